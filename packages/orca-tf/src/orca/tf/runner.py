"""KerasRunner: one worker's compiled Keras model, kept in step over a MultiWorkerMirroredStrategy.

Each step computes the compiled loss of the local batch, scaled by the batch's share of the
global batch (see :mod:`orca.core.engine.feed`), under a ``GradientTape``; the flat gradient
is summed over the workers by the strategy's collective all-reduce and divided by the world
size, so every worker applies exactly the global batch's gradient with the compiled
optimizer, also when its own share is uneven or empty. Compiled metrics accumulate locally
and are merged exactly (their state variables summed) at the end of each epoch.

The same step runs on two other transports: :mod:`orca.core.sync` (:class:`BigDLKerasRunner`)
and Horovod (:class:`HorovodKerasRunner`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from orca.core.plugin import (
    Batch,
    Rendezvous,
    Runner,
    check_class_indices,
    horovod_module,
    join_horovod,
    leave_horovod,
    pack,
    unpack,
)
from orca.tf import _keras, _sync
from orca.tf._dataset import dataset_batches
from orca.tf._graph import shape_rows

#: Keras callbacks that write files: they run on the chief (rank 0) only
WRITERS = ("ModelCheckpoint", "TensorBoard", "CSVLogger", "BackupAndRestore")


def build_model(spec: dict[str, Any], config: dict[str, Any]) -> Any:
    """Call the model creator (and ``compile_args_creator``); check a Keras model came back."""
    model = spec["model_creator"](config)
    _keras.check_model(model)
    if spec.get("compile_args_creator") is not None:
        model.compile(**spec["compile_args_creator"](config))
    return model


def _inputs(arrays: list[Any]) -> Any:
    import tensorflow as tf

    tensors = [tf.convert_to_tensor(a.tolist() if a.dtype == object else a) for a in arrays]
    return tensors[0] if len(tensors) == 1 else tensors


def _outputs(out: Any) -> list[np.ndarray]:
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [np.asarray(o) for o in out]
    return [np.asarray(out)]


@dataclass
class _Step:
    """A worker's compiled step: ``step`` (one worker) or ``grads_of`` + ``reduce_apply`` (several).

    A step that may be skipped (``fit(skip_non_finite_steps=True)``) runs unfused instead:
    ``grads_of``, ``reduce`` (the all-reduced mean, the same on every rank), a finiteness
    check on the host, then ``apply_flat`` (each traced on first use only).
    """

    step: Any = None
    grads_of: Any = None
    reduce_apply: Any = None
    reduce: Any = None
    apply_flat: Any = None
    size: int = 0


class KerasRunner(Runner):
    """Runs a compiled Keras 3 or tf_keras model in one Orca worker."""

    can_skip_steps = True
    strategy: Any = None
    #: what keeps the replicas in step: ``"strategy"`` (a MultiWorkerMirroredStrategy: the ``ray``
    #: and ``spark`` backends), ``"orca"`` (orca.core.sync: ``bigdl``) or ``"horovod"``; only the
    #: strategy configures TF's own collectives (and may need a child process)
    sync = "strategy"
    child_preload = ("tensorflow",)
    #: TensorFlow's runtime starts with the model, after the share has loaded: ~2 GB of address
    #: space (its thread pools and allocator), measured under Spark's memory limit
    address_space_mb = 2048
    fit_options: dict[str, Any] = {}  # noqa: RUF012 - replaced, never mutated

    @classmethod
    def needs_child(cls, spec: dict[str, Any], rendezvous: Rendezvous) -> bool:
        """A strategy rank runs in a fresh child process (a spare that has imported TensorFlow
        already) when this process cannot join another strategy (a reused Spark worker that ran
        TF), and whenever this process outlives the call (any Spark Python worker): TensorFlow's
        gRPC server listens on every interface and cannot be stopped, so it must end with the
        process that started it, at the end of the fit, not with an idle Spark worker later."""
        if rendezvous.world_size <= 1 or cls.sync != "strategy":
            return False
        return bool(rendezvous.extra.get("process_outlives_call")) or not _sync.can_join(rendezvous)

    def seed_framework(self, seed: int) -> None:
        import random

        import tensorflow as tf

        random.seed(seed)  # Keras 3 draws unseeded initializers' seeds from Python's generator
        tf.random.set_seed(seed)
        try:
            import keras
        except ImportError:
            return
        keras.utils.set_random_seed(seed)  # also resets Keras 3's global SeedGenerator

    def setup(self, rendezvous: Rendezvous) -> None:
        # The strategy (TF's collectives) is configured before TF's first op, seeding included.
        # With a strategy, the initial weights go through it and the sync group (epoch stats) is
        # joined last, as a child's parent joins it after the child set up: so ranks hosted in a
        # child (a reused Spark worker) and ranks hosted in place wait on each other in one order.
        # On the bigdl backend the sync group carries the weights and gradients; on horovod,
        # Horovod does, started once the sync group is up (its barrier).
        if rendezvous.world_size > 1 and self.sync == "strategy":
            self.strategy = _sync.join(rendezvous, self.threads)
        else:
            _sync.set_threads(self.threads)
        self.begin_setup(rendezvous)
        if self.strategy is None:
            self.join_group()
            if rendezvous.world_size > 1:
                self._join_transport(rendezvous)
        self.model = build_model(self.spec, self.config)
        self.legacy = _keras.is_legacy(self.model)
        self.fit_options: dict[str, Any] = {}
        self.keras_callbacks: list[Any] = []
        self._keras_batch = 0
        self._step: _Step | None = None
        self._synced = False
        self._metric_sample: Any = None
        self._rows = 0
        self._label_check: tuple[Any, ...] | None = None
        if self.model.built:
            self._broadcast_weights()
        self.join_group()

    def _x(self, arrays: list[Any]) -> Any:
        """The model's input tensors: flat rows (a DataFrame array column) reshaped to the rows
        of inputs of a static shape (64 values for an ``(None, 8, 8, 1)`` input)."""
        try:
            inputs = [tuple(t.shape) for t in (self.model.inputs or [])]
        except (AttributeError, ValueError):  # a subclassed model: no declared inputs
            inputs = []
        if len(inputs) == len(arrays):
            arrays = [shape_rows(np.asarray(a), s) if np.asarray(a).dtype != object else a
                      for a, s in zip(arrays, inputs, strict=True)]
        return _inputs(arrays)

    # ------------------------------------------------------------ sync
    def _join_transport(self, rendezvous: Rendezvous) -> None:
        """Start a gradient transport of the runner's own after the sync group (none here)."""

    def _mean_of(self, flat: Any) -> Any:
        """The mean over the workers of the flat float32 tensor ``flat``, traced into a step."""
        return _sync.all_sum(self.strategy, flat) / float(self.world)

    def _broadcast_weights(self) -> None:
        """Rank 0's initial weights to every worker (a sum where the other ranks add zeros)."""
        self._synced = True
        if self.strategy is None and self.group is None:
            return
        weights = self.model.get_weights()
        if not weights:
            return
        if self.strategy is None:
            self.model.set_weights(self.broadcast_arrays(weights))
            return
        flat = pack(weights) if self.rank == 0 else np.zeros(sum(w.size for w in weights))
        self.model.set_weights(unpack(np.asarray(_sync.all_sum(self.strategy, flat)), weights))

    def _ensure_built(self, x: Any) -> None:
        if not self.model.built:
            self.model(x, training=False)
        if not self._synced:
            self._broadcast_weights()

    def _make_step(self) -> _Step:
        import tensorflow as tf

        model, tvars = self.model, self.model.trainable_variables
        shapes = [tuple(v.shape) for v in tvars]
        sizes = [int(np.prod(s)) for s in shapes]
        counter = getattr(model, "_train_counter", None) if self.legacy else None
        mean_of = self._mean_of

        def loss_and_grads(x: Any, y: Any, sw: Any, weight: Any) -> Any:
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = _keras.compute_loss(model, x, y, pred, sw, training=True)
                scaled = tf.cast(loss, tf.float32) * weight
            grads = tape.gradient(scaled, tvars)
            model.compute_metrics(x, y, pred, sw)
            return loss, [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                          for g, v in zip(grads, tvars, strict=True)]

        def apply(grads: list[Any]) -> None:
            _keras.apply_gradients(model, grads, tvars)
            if counter is not None:  # tf_keras counts steps here (its TensorBoard's batch step)
                counter.assign_add(1)

        @tf.function(reduce_retracing=True)
        def grads_of(x: Any, y: Any, sw: Any, weight: Any) -> Any:
            loss, grads = loss_and_grads(x, y, sw, weight)
            return loss, tf.concat([tf.cast(tf.reshape(g, [-1]), tf.float32) for g in grads], 0)

        @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
        def apply_flat(flat: Any) -> None:
            parts = tf.split(flat, sizes)
            apply([tf.cast(tf.reshape(p, s), v.dtype) for p, s, v in zip(parts, shapes, tvars, strict=True)])

        if self.world == 1:  # one worker: one tf.function a step, as in model.fit
            @tf.function(reduce_retracing=True)
            def step(x: Any, y: Any, sw: Any, weight: Any) -> Any:
                loss, grads = loss_and_grads(x, y, sw, weight)
                apply(grads)
                return loss

            return _Step(step=step, grads_of=grads_of, reduce=lambda flat: flat, apply_flat=apply_flat)

        if self.sync == "orca":
            def orca_reduce(flat: Any) -> Any:
                buf = np.array(flat, dtype=np.float32)  # a writable copy of the tensor (80 KB..MBs)
                self.allreduce_mean_(buf)
                return tf.constant(buf)

            return _Step(grads_of=grads_of, reduce_apply=lambda flat: apply_flat(orca_reduce(flat)),
                         reduce=orca_reduce, apply_flat=apply_flat, size=sum(sizes))

        # Every rank runs this same function once a step (an empty share with zeros): one trace,
        # so the collective inside it has the same instance on every rank, and no eager
        # all-reduce (about 3x slower than one inside a tf.function) on the hot path.
        @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
        def reduce_apply(flat: Any) -> None:
            apply_flat(mean_of(flat))  # traced into this one function

        @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
        def reduce(flat: Any) -> Any:
            return mean_of(flat)

        return _Step(grads_of=grads_of, reduce_apply=reduce_apply, reduce=reduce, apply_flat=apply_flat,
                     size=sum(sizes))

    # ------------------------------------------------------------ steps
    def _sample_weight(self, y: list[np.ndarray]) -> Any:
        cw = self.fit_options.get("class_weight")
        if not cw or not y:
            return None
        labels = np.asarray(y[0])
        if labels.ndim > 1 and labels.shape[-1] > 1:
            labels = labels.argmax(-1)
        return np.asarray([cw.get(int(v), 1.0) for v in labels.reshape(len(labels), -1)[:, 0]], np.float32)

    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        if not _keras.is_compiled(self.model):
            raise ValueError("the model is not compiled: model_creator must return model.compile(optimizer=..., "
                             "loss=...)'d model, or pass compile_args_creator.")
        import tensorflow as tf

        if self.keras_callbacks:  # Keras calls this before each step (TensorBoard counts batches here)
            for cb in self.keras_callbacks:
                cb.on_train_batch_begin(self._keras_batch)
            self._keras_batch += 1
        value = 0.0
        if batch.size > 0:
            x, y = self._x(batch.x), _inputs(batch.y)
            self._ensure_built(x)
            self._check_labels(batch.y)
            if self._step is None:
                self._step = self._make_step()
            sw = self._sample_weight(batch.y)
            weight = tf.constant(batch.weight, tf.float32)
            self._remember_sample(batch)
            if skip_non_finite:
                loss, flat = self._step.grads_of(x, y, sw, weight)
                return float(loss) if self._apply_if_finite(flat) else None
            if self._step.step is not None:
                return float(self._step.step(x, y, sw, weight))
            loss, flat = self._step.grads_of(x, y, sw, weight)
            self._step.reduce_apply(flat)
            return float(loss)
        if self._step is None:
            if not self.model.built:
                raise ValueError("a worker holds no rows in the first step and the model has no known input "
                                 "shape; give the model an Input layer.")
            self._step = self._make_step()
        if self._step.reduce_apply is not None:  # the collective still needs this rank's (zero) share
            zeros = tf.zeros([self._step.size], tf.float32)
            if skip_non_finite:
                return value if self._apply_if_finite(zeros) else None
            self._step.reduce_apply(zeros)
        return value

    def _check_labels(self, y: list[np.ndarray]) -> None:
        """Class-index labels of a sparse categorical cross-entropy must be in range: TF fails deep in
        the step (an InvalidArgumentError naming neither the column nor the fix)."""
        if getattr(self, "_label_check", None) is None:
            self._label_check = _sparse_ce_classes(self.model) or ()
        if self._label_check and len(y) == 1:
            classes, ignore, name = self._label_check
            check_class_indices(y[0], classes, name, ignore)

    def _apply_if_finite(self, flat: Any) -> bool:
        """All-reduce ``flat`` and apply it unless it holds NaN/Inf (the same answer on every rank)."""
        assert self._step is not None
        total = self._step.reduce(flat)
        if not np.isfinite(np.asarray(total)).all():
            return False
        self._step.apply_flat(total)
        return True

    def _remember_sample(self, batch: Batch) -> None:
        if self._metric_sample is None:
            self._metric_sample = ([_wire(a[:1]) for a in batch.x], [_wire(a[:1]) for a in batch.y])
        self._rows += batch.size

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        x, y = self._x(batch.x), _inputs(batch.y)
        pred = self.model(x, training=False)
        loss = _keras.compute_loss(self.model, x, y, pred, None, training=False) if self.model.loss else None
        self.model.compute_metrics(x, y, pred, None)
        self._remember_sample(batch)
        return (float(loss) if loss is not None else float("nan")), _outputs(pred)

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        try:
            out = self.model(self._x(batch.x), training=False)
        except (ValueError, TypeError) as exc:
            shapes = [tuple(a.shape) for a in batch.x]
            raise ValueError(f"the model rejected input shape(s) {shapes}: {exc}") from None
        return _outputs(out)

    # ------------------------------------------------------------ metrics
    def metric_states(self) -> Any:
        metrics = _keras.compiled_metrics(self.model)
        values = [[np.asarray(v.numpy()) for v in m.variables] for m in metrics]
        state = {"rows": self._rows, "values": values, "sample": self._metric_sample}
        for m in metrics:
            m.reset_state()
        self._rows = 0
        return state if state["rows"] else {"rows": 0, "values": None, "sample": None}

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        live = [s for s in states if s and s["rows"]]
        if not live:
            return {}
        built = _keras.compiled_metrics(self.model)  # tf_keras lists none before its first update
        if not built or any(not m.variables for m in built):  # build them on one real row
            x, y = live[0]["sample"]
            xs, ys = self._x(x), _inputs(y)
            self.model.compute_metrics(xs, ys, self.model(xs, training=False), None)
        metrics = _keras.compiled_metrics(self.model)
        for i, m in enumerate(metrics):
            for j, var in enumerate(m.variables):
                var.assign(sum(np.asarray(s["values"][i][j]) for s in live))
        results: dict[str, float] = {}
        for m in metrics:
            res = m.result()
            items = res.items() if isinstance(res, dict) else [(m.name, res)]
            for name, value in items:
                arr = np.asarray(value)
                if arr.size == 1:
                    results[name] = float(arr)
            m.reset_state()
        return results

    # ------------------------------------------------------------ callbacks
    def begin_fit(self, options: dict[str, Any]) -> None:
        """Options of one ``fit`` call: Keras callbacks, class weights, epochs, steps."""
        self.fit_options = dict(options)
        callbacks = [cb for cb in options.get("callbacks") or []
                     if self.rank == 0 or type(cb).__name__ not in WRITERS]
        self.keras_callbacks = callbacks
        self.model.stop_training = False
        for cb in callbacks:
            cb.set_model(self.model)
            cb.set_params({"epochs": options.get("epochs"), "steps": options.get("steps"), "verbose": 0})

    def keras_event(self, name: str, *args: Any) -> bool:
        """Call ``name`` on every Keras callback; True when one asked to stop training."""
        if name == "on_epoch_begin":
            self._keras_batch = 0
        for cb in self.keras_callbacks:
            getattr(cb, name)(*args)
        return bool(getattr(self.model, "stop_training", False))

    def native_batches(self, creator: Any, batch_size: int, training: bool,
                       steps: int | None = None) -> Iterator[Batch]:
        """This rank's batches of the creator's batched ``tf.data.Dataset`` (see
        :func:`orca.tf._dataset.dataset_batches`)."""
        return dataset_batches(creator(self.config, batch_size), self.world, self.rank, steps)

    def optimizer_params(self) -> dict[str, Any]:
        """The compiled optimizer's class and its ``get_config()`` (``learning_rate``, ``momentum``...),
        for MLflow's run parameters (core keeps the scalar ones)."""
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return {}
        config = {k: v for k, v in optimizer.get_config().items() if k != "name"}
        return {"optimizer": type(optimizer).__name__, **config}

    # ------------------------------------------------------------ state
    def weights(self) -> list[np.ndarray]:
        return [np.asarray(w) for w in self.model.get_weights()]

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"weights": self.model.get_weights()}
        if getattr(self.model, "optimizer", None) is not None:
            state["optimizer"] = [np.asarray(v.numpy()) for v in _keras.optimizer_variables(self.model)]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self.model.set_weights(state["weights"])
        self._synced = True
        opt_state = state.get("optimizer")
        if opt_state and getattr(self.model, "optimizer", None) is not None:
            _keras.build_optimizer(self.model)
            variables = _keras.optimizer_variables(self.model)
            if len(variables) == len(opt_state):
                for var, value in zip(variables, opt_state, strict=True):
                    var.assign(value)


class BigDLKerasRunner(KerasRunner):
    """The ``bigdl`` backend's runner: the same compiled step, its gradients all-reduced by
    :mod:`orca.core.sync` (BigDL's reduce-scatter + all-gather) instead of a
    MultiWorkerMirroredStrategy. No TF collective is configured, so a reused Spark Python
    worker hosts it in place (no child process)."""

    sync = "orca"


def _hvd() -> Any:
    """``horovod.tensorflow`` (an ImportError naming the command that builds it when missing)."""
    return horovod_module("horovod.tensorflow", "tensorflow")


class HorovodKerasRunner(KerasRunner):
    """The ``horovod`` backend's runner: the same compiled step, its flat gradient all-reduced by
    Horovod (its gloo controller, no MPI) instead of a MultiWorkerMirroredStrategy.

    No TF collective and no gRPC server is configured, so the runner is hosted in place. The
    Horovod job is started from Orca's rendezvous once the sync group is up
    (:mod:`orca.core.horovod`: rank 0 serves Horovod's rendezvous store, every rank sets its place
    and calls ``hvd.init()``). Each step sums the one flat gradient with ``hvd.allreduce`` inside
    the same ``tf.function`` as the strategy's all-reduce, and divides it by the world size, so
    the exact global-batch rule, the empty-share steps (zeros) and skipped non-finite steps are
    as on the other backends; rank 0's initial weights reach the others by ``hvd.broadcast``.
    """

    sync = "horovod"
    _store: Any = None
    _horovod = False

    def _join_transport(self, rendezvous: Rendezvous) -> None:
        self._store = join_horovod(_hvd(), rendezvous, self.group, self.timeout_s)
        self._horovod = True

    def _mean_of(self, flat: Any) -> Any:
        hvd = _hvd()
        # the sum, then one division: the same numbers as the strategy's and orca.core.sync's mean
        return hvd.allreduce(flat, op=hvd.Sum, name="orca_flat_gradient") / float(self.world)

    def _broadcast_weights(self) -> None:
        """Rank 0's initial weights to every worker, packed into one float64 ``hvd.broadcast``."""
        self._synced = True
        if not self._horovod:
            return
        weights = self.model.get_weights()
        if not weights:
            return
        import tensorflow as tf

        hvd = _hvd()
        flat = hvd.broadcast(tf.constant(pack(weights)), root_rank=0, name="orca_initial_weights")
        self.model.set_weights(unpack(np.asarray(flat), weights))

    def shutdown(self) -> None:
        if self._horovod:
            leave_horovod(_hvd(), self._store)
            self._store, self._horovod = None, False
        super().shutdown()


def _wire(a: np.ndarray) -> np.ndarray:
    """``a`` as an array the sync layer carries: object arrays of strings become fixed-width
    strings (the sync layer takes no object arrays); Keras reads both alike."""
    a = np.asarray(a)
    if a.dtype == object:
        return np.asarray(a.tolist(), dtype=str)
    return a


def _sparse_ce_classes(model: Any) -> tuple[int, int | None, str] | None:
    """``(classes, ignore_class, loss name)`` when the compiled loss is a sparse categorical
    cross-entropy of a model with one output of known width; otherwise ``None``."""
    loss = getattr(model, "loss", None)
    name = loss if isinstance(loss, str) else getattr(loss, "__name__", None) or type(loss).__name__
    if name not in ("sparse_categorical_crossentropy", "SparseCategoricalCrossentropy"):
        return None
    try:
        outputs = model.outputs
        classes = int(outputs[0].shape[-1]) if len(outputs) == 1 else None
    except (AttributeError, TypeError, ValueError, IndexError):
        return None
    if not classes or classes < 2:
        return None
    ignore = getattr(loss, "ignore_class", None)
    return classes, (int(ignore) if ignore is not None else None), name
