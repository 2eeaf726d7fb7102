"""KerasRunner: one worker's compiled Keras model, kept in step over a MultiWorkerMirroredStrategy.

Each step computes the compiled loss of the local batch, scaled by the batch's share of the
global batch (see :mod:`orca.core.engine.feed`), under a ``GradientTape``; the flat gradient
is summed over the workers by the strategy's collective all-reduce and divided by the world
size, so every worker applies exactly the global batch's gradient with the compiled
optimizer, also when its own share is uneven or empty. Compiled metrics accumulate locally
and are merged exactly (their state variables summed) at the end of each epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from orca.core.engine.feed import Batch
from orca.core.engine.runner import Rendezvous, Runner
from orca.tf import _keras, _sync

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


def _forward(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run the method in the child process when this runner moved there (see ``orca.core.engine.child``)."""

    @functools.wraps(method)
    def wrapper(self: KerasRunner, *args: Any) -> Any:
        if self.child is not None:
            return self.child.call(method.__name__, *args)
        return method(self, *args)

    return wrapper


@dataclass
class _Step:
    """A worker's compiled step: ``step`` (one worker) or ``grads_of`` + ``reduce_apply`` (several)."""

    step: Any = None
    grads_of: Any = None
    reduce_apply: Any = None
    size: int = 0


class KerasRunner(Runner):
    """Runs a compiled Keras 3 or tf_keras model in one Orca worker."""

    child: Any = None
    strategy: Any = None
    #: keep the replicas in step with orca.core.sync (the ``bigdl`` backend) instead of the strategy
    orca_sync = False
    group: Any = None
    fit_options: dict[str, Any] = {}  # noqa: RUF012 - replaced, never mutated

    def setup(self, rendezvous: Rendezvous) -> None:
        super().setup(rendezvous)
        self.world, self.rank = rendezvous.world_size, rendezvous.rank
        threads = int(self.spec.get("threads", 1))
        in_child = bool(self.spec.get("in_child"))
        if self.world > 1 and not in_child:
            # small-object collectives (epoch stats), the initial weights and, on the bigdl backend,
            # the gradients go through orca.core.sync; it needs no TF, so it lives in this process
            # also when the runner moves to a child (Spark's own allGather polls once a second)
            from orca.core.sync import SyncGroup

            self.group = SyncGroup.from_rendezvous(rendezvous, timeout_s=float(self.spec.get("timeout_s", 600)))
        strategy = self.world > 1 and not self.orca_sync
        if strategy and not in_child and not _sync.can_join(rendezvous):
            # this process cannot join another strategy: host the runner in a fresh child (a spare
            # that has imported TensorFlow already, see orca.core.engine.child)
            from orca.core.engine.child import start_child

            self.child = start_child(type(self), self.spec, rendezvous, preload=("tensorflow",),
                                     timeout_s=float(self.spec.get("timeout_s", 600)), what="the TF worker process")
            return
        if strategy:
            self.strategy = _sync.join(rendezvous, threads)
        else:
            _sync.set_threads(threads)
        import tensorflow as tf

        seed = self.spec.get("seed")
        if seed is not None:
            tf.random.set_seed(int(seed))
            np.random.seed(int(seed))
        self.model = build_model(self.spec, self.config)
        self.legacy = _keras.is_legacy(self.model)
        self.fit_options: dict[str, Any] = {}
        self.keras_callbacks: list[Any] = []
        self._keras_batch = 0
        self._step: _Step | None = None
        self._synced = False
        self._metric_sample: Any = None
        self._rows = 0
        if self.model.built:
            self._broadcast_weights()

    def shutdown(self) -> None:
        if self.child is not None:
            self.child.close()  # the child's runner shuts down with it
            self.child = None
        if self.group is not None:
            self.group.close()
            self.group = None

    def collective(self) -> Any:
        return self.group  # stats travel over the sync group when there is one (else the backend's)

    # ------------------------------------------------------------ sync
    def _broadcast_weights(self) -> None:
        """Rank 0's initial weights to every worker (a sum where the other ranks add zeros)."""
        self._synced = True
        if self.strategy is None and self.group is None:
            return
        weights = self.model.get_weights()
        if not weights:
            return
        flat = np.concatenate([w.reshape(-1).astype(np.float64) for w in weights])
        if self.group is not None:
            self.group.broadcast(flat)
            total = flat
        else:
            if self.rank != 0:
                flat = np.zeros_like(flat)
            total = np.asarray(_sync.all_sum(self.strategy, flat))
        out, offset = [], 0
        for w in weights:
            out.append(total[offset:offset + w.size].reshape(w.shape).astype(w.dtype))
            offset += w.size
        self.model.set_weights(out)

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
        strategy, world = self.strategy, float(self.world)

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

        if self.world == 1:  # one worker: one tf.function a step, as in model.fit
            @tf.function(reduce_retracing=True)
            def step(x: Any, y: Any, sw: Any, weight: Any) -> Any:
                loss, grads = loss_and_grads(x, y, sw, weight)
                apply(grads)
                return loss

            return _Step(step=step)

        @tf.function(reduce_retracing=True)
        def grads_of(x: Any, y: Any, sw: Any, weight: Any) -> Any:
            loss, grads = loss_and_grads(x, y, sw, weight)
            return loss, tf.concat([tf.cast(tf.reshape(g, [-1]), tf.float32) for g in grads], 0)

        if self.orca_sync:
            return _Step(grads_of=grads_of, reduce_apply=self._orca_reduce_apply(apply, shapes, sizes, tvars),
                         size=sum(sizes))

        # Every rank runs this same function once a step (an empty share with zeros): one trace,
        # so the collective inside it has the same instance on every rank, and no eager
        # all-reduce (about 3x slower than one inside a tf.function) on the hot path.
        @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
        def reduce_apply(flat: Any) -> None:
            total = _sync.all_sum(strategy, flat) / world
            parts = tf.split(total, sizes)
            apply([tf.cast(tf.reshape(p, s), v.dtype) for p, s, v in zip(parts, shapes, tvars, strict=True)])

        return _Step(grads_of=grads_of, reduce_apply=reduce_apply, size=sum(sizes))

    def _orca_reduce_apply(self, apply: Any, shapes: list[Any], sizes: list[int], tvars: list[Any]) -> Any:
        """The ``bigdl`` backend's step end: all-reduce the flat gradient with orca.core.sync (a
        numpy buffer, reduced in place), then apply it in one tf.function."""
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
        def apply_flat(flat: Any) -> None:
            parts = tf.split(flat, sizes)
            apply([tf.cast(tf.reshape(p, s), v.dtype) for p, s, v in zip(parts, shapes, tvars, strict=True)])

        group = self.group

        def reduce_apply(flat: Any) -> None:
            buf = np.array(flat, dtype=np.float32)  # a writable copy of the tensor (80 KB..MBs)
            group.allreduce(buf, op="mean")
            apply_flat(tf.constant(buf))

        return reduce_apply

    # ------------------------------------------------------------ steps
    def _sample_weight(self, y: list[np.ndarray]) -> Any:
        cw = self.fit_options.get("class_weight")
        if not cw or not y:
            return None
        labels = np.asarray(y[0])
        if labels.ndim > 1 and labels.shape[-1] > 1:
            labels = labels.argmax(-1)
        return np.asarray([cw.get(int(v), 1.0) for v in labels.reshape(len(labels), -1)[:, 0]], np.float32)

    @_forward
    def train_batch(self, batch: Batch) -> float:
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
            x, y = _inputs(batch.x), _inputs(batch.y)
            self._ensure_built(x)
            if self._step is None:
                self._step = self._make_step()
            sw = self._sample_weight(batch.y)
            weight = tf.constant(batch.weight, tf.float32)
            if self._step.step is not None:
                value = float(self._step.step(x, y, sw, weight))
            else:
                loss, flat = self._step.grads_of(x, y, sw, weight)
                value = float(loss)
                self._step.reduce_apply(flat)
            self._remember_sample(batch)
            return value
        if self._step is None:
            if not self.model.built:
                raise ValueError("a worker holds no rows in the first step and the model has no known input "
                                 "shape; give the model an Input layer.")
            self._step = self._make_step()
        if self._step.reduce_apply is not None:  # the collective still needs this rank's (zero) share
            self._step.reduce_apply(tf.zeros([self._step.size], tf.float32))
        return value

    def _remember_sample(self, batch: Batch) -> None:
        if self._metric_sample is None:
            self._metric_sample = ([a[:1] for a in batch.x], [a[:1] for a in batch.y])
        self._rows += batch.size

    @_forward
    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        x, y = _inputs(batch.x), _inputs(batch.y)
        pred = self.model(x, training=False)
        loss = _keras.compute_loss(self.model, x, y, pred, None, training=False) if self.model.loss else None
        self.model.compute_metrics(x, y, pred, None)
        self._remember_sample(batch)
        return (float(loss) if loss is not None else float("nan")), _outputs(pred)

    @_forward
    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        try:
            out = self.model(_inputs(batch.x), training=False)
        except (ValueError, TypeError) as exc:
            shapes = [tuple(a.shape) for a in batch.x]
            raise ValueError(f"the model rejected input shape(s) {shapes}: {exc}") from None
        return _outputs(out)

    # ------------------------------------------------------------ metrics
    @_forward
    def metric_states(self) -> Any:
        metrics = _keras.compiled_metrics(self.model)
        values = [[np.asarray(v.numpy()) for v in m.variables] for m in metrics]
        state = {"rows": self._rows, "values": values, "sample": self._metric_sample}
        for m in metrics:
            m.reset_state()
        self._rows = 0
        return state if state["rows"] else {"rows": 0, "values": None, "sample": None}

    @_forward
    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        live = [s for s in states if s and s["rows"]]
        if not live:
            return {}
        if any(not m.variables for m in _keras.compiled_metrics(self.model)):  # build them on one real row
            x, y = live[0]["sample"]
            xs, ys = _inputs(x), _inputs(y)
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
        self.fit_options = dict(options)  # here too: native_batches reads them in this process
        if self.child is not None:
            self.child.call("begin_fit", options)
            return
        callbacks = [cb for cb in options.get("callbacks") or []
                     if self.rank == 0 or type(cb).__name__ not in WRITERS]
        self.keras_callbacks = callbacks
        self.model.stop_training = False
        for cb in callbacks:
            cb.set_model(self.model)
            cb.set_params({"epochs": options.get("epochs"), "steps": options.get("steps"), "verbose": 0})

    @_forward
    def keras_event(self, name: str, *args: Any) -> bool:
        """Call ``name`` on every Keras callback; True when one asked to stop training."""
        if name == "on_epoch_begin":
            self._keras_batch = 0
        for cb in self.keras_callbacks:
            getattr(cb, name)(*args)
        return bool(getattr(self.model, "stop_training", False))

    def native_batches(self, creator: Any, batch_size: int, training: bool) -> Iterator[Batch]:
        import tensorflow as tf

        ds = creator(self.config, batch_size)
        if not isinstance(ds, tf.data.Dataset):
            raise TypeError(f"the data creator returned {type(ds).__name__}; return a batched tf.data.Dataset.")
        world, rank = self.rendezvous.world_size, self.rendezvous.rank  # type: ignore[union-attr]
        steps = self.fit_options.get("steps_per_epoch" if training else "validation_steps")
        n = int(ds.cardinality())
        if steps is None and n < 0:
            raise ValueError("the data creator's dataset has an unknown or infinite size; pass steps_per_epoch "
                             "(and validation_steps) to fit.")
        if training:  # every rank takes the same number of batches (lock-step)
            steps = steps if steps is not None else max(1, n // world)
            ds = ds.repeat().shard(world, rank).take(steps)
        else:
            ds = ds.shard(world, rank)
            if steps is not None:
                ds = ds.take(steps)
        for item in ds.as_numpy_iterator():
            if isinstance(item, dict):
                raise TypeError("a dataset of dicts is not supported; yield (features, labels) tuples.")
            items = list(item) if isinstance(item, tuple) else [item]
            x, y = items[0], items[1:2]
            xs = list(x) if isinstance(x, tuple) else [x]
            rows = len(xs[0])
            yield Batch(x=xs, y=[np.asarray(a) for a in y], size=rows, weight=1.0, global_size=rows * world)

    # ------------------------------------------------------------ state
    @_forward
    def weights(self) -> list[np.ndarray]:
        return [np.asarray(w) for w in self.model.get_weights()]

    @_forward
    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"weights": self.model.get_weights()}
        if getattr(self.model, "optimizer", None) is not None:
            state["optimizer"] = [np.asarray(v.numpy()) for v in _keras.optimizer_variables(self.model)]
        return state

    @_forward
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

    orca_sync = True
