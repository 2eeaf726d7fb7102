"""The TensorFlow 2 / Keras Estimator: ``Estimator.from_keras(model_creator=...)``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from orca.core.plugin import (
    Backend,
    BaseEstimator,
    Callback,
    DataSource,
    History,
    NotFittedError,
    Runner,
    check_positive_int,
    check_writable,
    declare,
    get_data_source,
    horovod_install_hint,
    reading_model_file,
    require_model_file,
    solo_runner,
    warn_once,
)
from orca.tf import _keras
from orca.tf._dataset import dataset_adapter, first_rows, is_dataset
from orca.tf.data import as_xshards
from orca.tf.runner import BigDLKerasRunner, HorovodKerasRunner, KerasRunner

if TYPE_CHECKING:
    from orca.tf.graph_estimator import GraphEstimator

#: engine stats that are not Keras history keys
_ENGINE_KEYS = ("train_loss", "epoch", "num_samples", "batch_count", "epoch_time_s")


class _KerasFit(Callback):
    """Carries one ``fit`` call's Keras options into every worker and drives the Keras callbacks there."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.has_callbacks = bool(options.get("callbacks"))

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.runner.begin_fit(self.options)  # type: ignore[attr-defined]
        if self.has_callbacks:
            self.runner.keras_event("on_train_begin", {})  # type: ignore[attr-defined]

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.has_callbacks:
            self.runner.keras_event("on_epoch_begin", epoch, {})  # type: ignore[attr-defined]

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        if self.has_callbacks:
            self.runner.keras_event("on_train_batch_end", step, dict(logs or {}))  # type: ignore[attr-defined]

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.has_callbacks:
            keras_logs = {k: v for k, v in (logs or {}).items() if k not in _ENGINE_KEYS}
            if self.runner.keras_event("on_epoch_end", epoch, keras_logs):  # type: ignore[attr-defined]
                self.runner.stop_training = True

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.has_callbacks:
            self.runner.keras_event("on_train_end", {})  # type: ignore[attr-defined]


class Estimator(BaseEstimator):
    """Distributed training and inference of a Keras model (Keras 3 or tf_keras) on Ray or Spark.

    Create it with :meth:`from_keras`; then ``fit``, ``evaluate``, ``predict``, ``save``, ``load``,
    ``save_weights``, ``load_weights``, ``get_model``. See :class:`orca.core.engine.BaseEstimator`.
    """

    backends = declare(
        Backend("ray", "ray", KerasRunner, "Ray actors kept in step by a MultiWorkerMirroredStrategy"),
        Backend("spark", "spark", KerasRunner, "Spark barrier tasks kept in step by a MultiWorkerMirroredStrategy"),
        Backend("bigdl", "spark", BigDLKerasRunner, "Spark barrier tasks kept in step by orca.core.sync"),
        Backend("horovod", "ray", HorovodKerasRunner, "Ray actors, gradients all-reduced by Horovod (gloo)",
                requires=("horovod.tensorflow",),
                install="Horovod 0.28.1 builds only against TensorFlow <= 2.15 (Keras 2: tf.keras, or tf_keras), "
                        f"so give it an environment of its own: {horovod_install_hint('tensorflow')}."),
    )

    @classmethod
    def from_keras(
        cls,
        *,
        model_creator: Callable[[dict[str, Any]], Any] | None = None,
        keras_model: Any = None,
        config: dict[str, Any] | None = None,
        compile_args_creator: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        workers_per_node: int = 1,
        backend: str = "ray",
        model_dir: str | None = None,
        verbose: int = 1,
        seed: int | None = 0,
        metrics: Sequence[Any] | None = None,
        optimizer: Any = None,
    ) -> Estimator:
        """Build an Estimator from a Keras model creator (TF2 style) or a compiled model (TF1 style).

        With neither (as the reference allowed), the Estimator has no model until :meth:`load` reads
        a saved one; any other call before that raises ``NotFittedError``.

        Args:
            model_creator: ``f(config)`` returning a compiled ``keras.Model`` (Keras 3, or tf_keras
                for Keras 2). It runs on every worker.
            keras_model: a compiled ``keras.Model`` (Keras 3 or tf_keras), instead of
                ``model_creator``: its architecture (``get_config``), weights and compile
                configuration (optimizer, loss, metrics) are copied as plain data and every worker
                rebuilds it from them (no pickled code travels); it then trains exactly as a
                creator's model. The model object itself is not changed: ``get_model`` returns the
                trained copy. Custom layers must be registered Keras serializables.
            config: a dict handed to the creators and to data creators.
            compile_args_creator: ``f(config)`` returning ``model.compile`` keyword arguments, for a
                creator that returns an uncompiled model.
            workers_per_node: workers on each node; ``batch_size`` is split across all workers.
            backend: ``"ray"`` (Ray actors) or ``"spark"`` (Spark barrier tasks), both keeping the
                replicas in step over a ``tf.distribute.MultiWorkerMirroredStrategy``; ``"bigdl"``
                (Spark barrier tasks kept in step by Orca's own parameter sync, :mod:`orca.core.sync`,
                as the torch ``bigdl`` backend: the same steps and weights, with a faster all-reduce
                than the strategy's on CPU clusters); or ``"horovod"`` (Ray actors, each step's
                gradient all-reduced by Horovod's gloo controller, started from Orca's rendezvous:
                no MPI, no ``horovodrun``; the same steps and weights). Horovod 0.28.1 builds only
                against TensorFlow <= 2.15: ``pip install orca-tf "tensorflow-cpu==2.15.1"``, then
                ``python -m orca.core.horovod_install tensorflow``.
            model_dir: default directory for checkpoints (a shared filesystem on a cluster).
            verbose: 0 hides the driver's progress bar.
            seed: seeds model creation and shuffling on every worker (``None``: unseeded).
            metrics: with ``keras_model``, the metrics to train and evaluate with instead of the
                compiled ones (names or Keras metric objects of the model's Keras flavour).
            optimizer: with ``keras_model``, the optimizer to train with instead of the compiled
                one (a name or a Keras optimizer of the model's flavour; it travels as its config).

        Returns:
            The Estimator. No worker starts until the first call that needs one.

        Raises:
            ValueError: an unknown backend.
            ImportError: ``backend="horovod"`` in an environment without Horovod for TensorFlow
                (the message names the commands that install it).
            TypeError: ``model_creator`` or ``compile_args_creator`` is not callable, or
                ``keras_model`` is not a Keras model, or ``optimizer``/``metrics`` are of the other
                Keras flavour.
            ValueError: both ``model_creator`` and ``keras_model``; ``keras_model`` is not compiled or
                cannot be serialized.

        Examples:
            >>> def model_creator(config):
            ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            ...     model.compile(optimizer="sgd", loss="mse")
            ...     return model
            >>> est = Estimator.from_keras(model_creator=model_creator, backend="spark")  # doctest: +SKIP
            >>> est.fit(df, epochs=2, batch_size=64, feature_cols=["x"], label_cols=["y"])  # doctest: +SKIP
        """
        if model_creator is not None and keras_model is not None:
            raise ValueError("pass one of model_creator= (a function f(config) returning a compiled "
                             "keras.Model) and keras_model= (a compiled keras.Model), not both.")
        if keras_model is None and (optimizer is not None or metrics is not None):
            raise ValueError("optimizer= and metrics= override a keras_model='s compile settings; with "
                             "model_creator=, compile the model with them in the creator.")
        if keras_model is not None:
            model_creator = _creator_of(keras_model, optimizer, metrics)
        if model_creator is not None and (not callable(model_creator) or isinstance(model_creator, type)):
            raise TypeError(f"model_creator must be a function f(config) returning a compiled keras.Model, got "
                            f"{type(model_creator).__name__}.")
        if compile_args_creator is not None and not callable(compile_args_creator):
            raise TypeError("compile_args_creator must be a function f(config) returning compile() arguments.")
        spec: dict[str, Any] = {"model_creator": model_creator, "compile_args_creator": compile_args_creator,
                                "config": dict(config or {}), "seed": seed}
        return cls(spec=spec, backend=backend, workers_per_node=workers_per_node, model_dir=model_dir,
                   use_tqdm=bool(verbose))

    @classmethod
    def from_graph(
        cls,
        *,
        inputs: Any,
        outputs: Any,
        labels: Any = None,
        loss: Any = None,
        optimizer: Any = None,
        metrics: Any = None,
        clip_norm: float | None = None,
        clip_value: float | tuple[float, float] | None = None,
        updates: Any = None,
        sess: Any = None,
        model_dir: str | None = None,
        backend: str = "spark",
        workers_per_node: int = 1,
        verbose: int = 1,
        seed: int | None = 0,
    ) -> GraphEstimator:
        """Build an Estimator from a ``tf.compat.v1`` graph (TF1 style: placeholders, a loss tensor,
        a ``tf.compat.v1.train`` optimizer).

        The graph is serialized (a MetaGraph protobuf) with the training ops added to a private
        copy; every worker rebuilds it, computes the gradient of ``loss`` on its share of each
        global batch, all-reduces it with :mod:`orca.core.sync` and applies it with
        ``optimizer``: the step equals one process's step on the global batch.

        Args:
            inputs: the input placeholder(s), fed from ``feature_cols`` (or ``x``) in order.
            outputs: the output tensor(s): what ``predict`` returns.
            labels: the label placeholder(s), fed from ``label_cols`` (or ``y``); needed to fit
                and evaluate.
            loss: a scalar tensor, the batch's mean loss (needed to fit).
            optimizer: a ``tf.compat.v1.train.Optimizer`` (e.g. ``AdamOptimizer()``).
            metrics: ``{name: scalar tensor}`` holding a batch's mean (e.g. accuracy), merged
                exactly as the row-weighted mean over all batches; a value may also be one of
                orca.core's metrics (``"accuracy"``, a ``Metric``), computed on the first output.
            clip_norm: clip the all-reduced gradients to this global L2 norm.
            clip_value: clip each all-reduced gradient element to ``[-v, v]`` (or ``(min, max)``);
                applied before ``clip_norm``.
            updates: ops to run with each training step (e.g. batch-norm moving averages); what
                they change is averaged over the workers at each epoch end.
            sess: a ``tf.compat.v1.Session`` whose variable values are the starting point
                (default: the variables' initializers).
            model_dir: default directory for checkpoints.
            backend: ``"spark"`` (Spark barrier tasks) or ``"ray"`` (Ray actors).
            workers_per_node: workers on each node.
            verbose: 0 hides the driver's progress bar.
            seed: the graph seed on every worker (``None``: unseeded).

        Returns:
            A :class:`~orca.tf.graph_estimator.GraphEstimator`: ``fit``, ``evaluate``,
            ``predict``, ``save``/``load`` (a TF checkpoint), ``get_model`` (the variable values).

        Raises:
            TypeError: an endpoint is not a graph tensor, or ``optimizer`` is not a
                ``tf.compat.v1.train.Optimizer``.
            ValueError: endpoints from different graphs, a non-scalar loss or metric, an
                optimizer without a loss, bad clipping values, an unknown backend.

        Examples:
            >>> x = tf.compat.v1.placeholder(tf.float32, (None, 4))  # doctest: +SKIP
            >>> y = tf.compat.v1.placeholder(tf.float32, (None,))  # doctest: +SKIP
            >>> w = tf.compat.v1.get_variable("w", (4, 1))  # doctest: +SKIP
            >>> pred = tf.matmul(x, w)[:, 0]  # doctest: +SKIP
            >>> est = Estimator.from_graph(inputs=x, outputs=pred, labels=y,  # doctest: +SKIP
            ...     loss=tf.reduce_mean((pred - y) ** 2),
            ...     optimizer=tf.compat.v1.train.GradientDescentOptimizer(0.1))
            >>> est.fit(df, epochs=2, batch_size=64, feature_cols=["x"], label_cols=["y"])  # doctest: +SKIP
        """
        from orca.tf import _graph
        from orca.tf.graph_estimator import GraphEstimator

        if backend not in GraphEstimator.backends:
            raise ValueError(f"backend={backend!r} is not a from_graph backend; use one of "
                             f"{sorted(GraphEstimator.backends)}.")
        norm, bounds = _graph.check_clip(clip_norm, clip_value)
        ins = _graph.tensors(inputs, "inputs")
        graph_metrics, engine_metrics = _graph.split_metrics(metrics, ins[0].graph)
        graph_spec, initial = _graph.build_spec(
            inputs=inputs, outputs=outputs, labels=labels, loss=loss, optimizer=optimizer, metrics=graph_metrics,
            updates=updates, sess=sess)
        spec = {"graph": graph_spec, "config": {}, "seed": seed, "clip": {"norm": norm, "value": bounds}}
        return GraphEstimator(spec=spec, initial=initial, backend=backend, workers_per_node=workers_per_node,
                              metrics=engine_metrics, model_dir=model_dir, use_tqdm=bool(verbose))

    # ------------------------------------------------------------ data
    def extra_adapters(self) -> Sequence[Any]:
        """A bare ``tf.data.Dataset`` travels as its graph (see :mod:`orca.tf._dataset`)."""
        return (dataset_adapter,)

    def _source(self, data: Any, feature_cols: Any, label_cols: Any, need_labels: bool, arg: str) -> DataSource:
        # string feature columns feed TextVectorization / StringLookup layers; an orca.tf.data.Dataset
        # trains as the XShards of its mapped rows
        return get_data_source(as_xshards(data, arg), feature_cols=feature_cols, label_cols=label_cols,
                               need_labels=need_labels, arg=arg, allow_strings=True,
                               extra_adapters=self.extra_adapters())

    def _metric_runner(self) -> Runner | None:
        if getattr(self, "_driver_runner", None) is None:
            self._driver_runner = solo_runner(KerasRunner, self.spec, None)
        return self._driver_runner

    # ------------------------------------------------------------ API
    def fit(  # type: ignore[override]
        self,
        data: Any,
        epochs: int = 1,
        batch_size: int = 32,
        steps_per_epoch: int | None = None,
        validation_data: Any = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        callbacks: list[Any] | None = None,
        class_weight: dict[int, float] | None = None,
        initial_epoch: int = 0,
        feature_cols: str | Sequence[str] | None = None,
        label_cols: str | Sequence[str] | None = None,
        verbose: int | None = None,
        shuffle: bool | str = True,
        max_failures: int | None = None,
        skip_non_finite_steps: bool = False,
        data_config: dict[str, Any] | None = None,
    ) -> History:
        """Train data-parallel; every step applies exactly the global batch's gradient.

        Args:
            data: a Spark DataFrame (with ``feature_cols``/``label_cols``), an XShards, numpy data
                (an array, ``(x, y)`` or ``{"x": ..., "y": ...}``), a ``tf.data.Dataset`` of
                ``(features, labels)`` rows (batched here by ``batch_size``; it travels as its graph,
                see :mod:`orca.tf._dataset`), an :class:`orca.tf.data.Dataset` (an XShards' rows
                mapped by ``tf.data`` functions: it trains as the XShards of the mapped rows), or a
                data creator ``f(config, batch_size)`` returning a batched ``tf.data.Dataset``
                (``batch_size`` is then the per-worker batch).
            epochs: the epoch to train up to (Keras' meaning: ``epochs - initial_epoch`` epochs run).
            batch_size: the global batch size, split across the workers.
            steps_per_epoch: steps of a data-creator epoch (needed when its dataset's size is
                unknown). For DataFrames, XShards and numpy it is derived: ``ceil(rows / batch_size)``.
            validation_data: data of the same kind, evaluated after every ``validation_freq`` epochs.
            validation_steps: batches of a data-creator validation set per worker.
            validation_freq: validate after every this many epochs (Keras' meaning: epochs whose
                1-based number is a multiple of it); the other epochs skip the validation pass on
                every worker, and their history and callback logs have no ``val_`` keys.
            callbacks: Keras callbacks (``ModelCheckpoint`` and ``TensorBoard`` write on the chief
                only; ``EarlyStopping``, ``LearningRateScheduler``, ``ReduceLROnPlateau`` run on every
                worker with the merged logs) or orca Callbacks.
            class_weight: ``{class index: weight}`` applied as per-sample loss weights.
            initial_epoch: the epoch to start from (resuming).
            feature_cols: input column(s).
            label_cols: target column(s).
            verbose: 0 hides the progress bar for this call.
            shuffle: how each worker shuffles its rows every epoch: ``True``, ``"full"``,
                ``"window"`` or ``False`` (see :meth:`orca.core.engine.estimator.BaseEstimator.fit`).
            max_failures: lost workers the fit recovers from, resuming from the last completed
                epoch (see ``orca.core``'s ``BaseEstimator.fit``; Keras callbacks then start afresh
                with each epoch).
            skip_non_finite_steps: leave out (not apply) a step whose all-reduced gradient holds
                NaN/Inf, on every worker alike, and count it in the History's ``skipped_steps``
                (see ``BaseEstimator.fit``); the compiled metrics still see the skipped batch.
            data_config: the reference's: merged into the config a data creator (of ``data`` and
                ``validation_data``) is called with; other data ignore it (a one-time warning: their
                types come from the data, no ``output_signature`` is needed).

        Returns:
            A History: ``history.history`` has Keras' keys (``loss``, compiled metric names,
            ``val_loss``, ``val_<metric>``) plus ``num_samples`` and ``epoch_time_s``.

        Raises:
            ValueError / TypeError: bad input, named on the driver before any worker starts.
            OrcaWorkerError: a worker failed; carries its traceback.
        """
        self._require_model()
        if not isinstance(initial_epoch, int) or initial_epoch < 0:
            raise ValueError(f"initial_epoch must be a non-negative int, got {initial_epoch!r}.")
        if not isinstance(epochs, int) or epochs <= initial_epoch:
            raise ValueError(f"epochs must be an int greater than initial_epoch={initial_epoch}, got {epochs!r}.")
        check_positive_int("validation_freq", validation_freq)
        keras_cbs = [cb for cb in callbacks or [] if not isinstance(cb, Callback)]
        for cb in keras_cbs:
            if not hasattr(cb, "set_model") or not hasattr(cb, "on_epoch_end"):
                raise TypeError(f"callbacks: {cb!r} is neither a Keras callback nor an orca Callback.")
        orca_cbs = [cb for cb in callbacks or [] if isinstance(cb, Callback)]
        if initial_epoch:
            self._epoch = initial_epoch
        options = {"callbacks": keras_cbs, "class_weight": class_weight, "epochs": epochs,
                   "steps_per_epoch": steps_per_epoch, "validation_steps": validation_steps, "steps": steps_per_epoch}
        data = _with_data_config(data, data_config)
        validation_data = _with_data_config(validation_data, data_config)
        use_tqdm = self.use_tqdm
        if verbose is not None:
            self.use_tqdm = bool(verbose)
        try:
            with _keras.eager():  # the driver's Keras work runs eagerly, also under TF1 code (disable_v2_behavior)
                history = super().fit(data, epochs=epochs - initial_epoch, batch_size=batch_size,
                                      feature_cols=feature_cols, label_cols=label_cols,
                                      validation_data=validation_data, callbacks=[_KerasFit(options), *orca_cbs],
                                      shuffle=shuffle, validation_freq=validation_freq,
                                      steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                                      max_failures=max_failures, skip_non_finite_steps=skip_non_finite_steps)
        finally:
            self.use_tqdm = use_tqdm
        # Keras' History.params: with history.history, what the reference's fit returned as one dict
        history.params = {"verbose": int(bool(self.use_tqdm if verbose is None else verbose)), "epochs": epochs,
                          "steps": history[-1].get("batch_count") if history else steps_per_epoch}
        return history

    def evaluate(self, data: Any, batch_size: int = 32, num_steps: int | None = None,
                 feature_cols: Any = None, label_cols: Any = None,
                 data_config: dict[str, Any] | None = None) -> dict[str, float]:
        """Evaluate the compiled loss and metrics exactly over ``data`` (merged over all workers).

        Args:
            data: data as for :meth:`fit`.
            batch_size: the global batch size, split across the workers.
            num_steps: evaluate only the first ``num_steps`` global batches (the first
                ``num_steps * batch_size`` rows; of a data creator, ``num_steps`` batches per
                worker). ``None``: all of ``data``.
            feature_cols: input column(s).
            label_cols: target column(s).
            data_config: merged into a data creator's config (see :meth:`fit`).

        Returns:
            ``{"loss": ..., "<metric>": ..., "num_samples": N}`` with Keras' metric names; the
            same values are also under ``val_``- and ``validation_``-prefixed keys (the latter
            are the reference's).

        Raises:
            ValueError: ``num_steps`` is not a positive int, or covers part of an XShards only.
        """
        self._require_model()
        data = as_xshards(_with_data_config(data, data_config))  # num_steps then cuts it as an XShards
        if num_steps is not None:
            check_positive_int("num_steps", num_steps)
            data = _first_steps(data, num_steps, batch_size, self.num_workers)
        with _keras.eager():
            stats = super().evaluate(data, batch_size=batch_size, feature_cols=feature_cols, label_cols=label_cols)
        plain = {k[4:]: v for k, v in stats.items() if k.startswith("val_")}
        return {**plain, **stats, **{f"validation_{k}": v for k, v in plain.items()}}

    def predict(self, data: Any, batch_size: int = 32, feature_cols: Any = None,
                output_cols: Sequence[str] | None = None) -> Any:
        """Predict ``data``; the result has the input's container type (see ``BaseEstimator.predict``):
        of an :class:`orca.tf.data.Dataset`, as the reference, the XShards of its mapped rows
        (``{"x", "y"}`` dicts) whose shards gain ``prediction``."""
        with _keras.eager():
            return super().predict(data, batch_size=batch_size, feature_cols=feature_cols, output_cols=output_cols)

    # ------------------------------------------------------------ model I/O
    def get_model(self, set_weights: bool = True, sample_input: Any = None) -> Any:
        """The trained Keras model (a copy built on the driver).

        Args:
            set_weights: ``False`` gives the creator's model as it builds it, without the trained
                weights (the reference's spark backend's argument).
            sample_input: an input the model is called on before the weights are set: it builds
                a subclassed model whose creator does not (the reference's ray backend's argument).

        In a process that turned eager execution off (TF1 code: ``disable_v2_behavior()``), the
        model is a graph-mode tf_keras model, read through the Keras session as TF1 code reads one.
        """
        self._require_model()
        import tensorflow as tf

        from orca.tf._keras import graph_mode_model
        from orca.tf.runner import build_model

        state = self.get_state() if set_weights else None
        if not tf.executing_eagerly():
            return graph_mode_model(build_model(self.spec, dict(self.spec.get("config") or {})), state)
        runner = solo_runner(KerasRunner, self.spec, None if sample_input is not None else state)
        assert isinstance(runner, KerasRunner)
        if sample_input is not None:
            runner.model(sample_input, training=False)  # creates a subclassed model's variables
            if state is not None:
                runner.set_state(state)
        return runner.model

    def save_mlflow_model(self, path: str) -> bool:
        """The trained model as an MLflow Model at ``path``: the ``mlflow.keras`` flavour for a Keras 3
        model, ``mlflow.tensorflow`` for a tf_keras one (each flavour's ``load_model`` reads it back).
        Needs ``mlflow``.

        Returns:
            True.
        """
        import importlib.metadata as md

        from orca.tf import _keras

        model = self.get_model()
        tf_dist = next((d for d in ("tensorflow-cpu", "tensorflow") if _installed(md, d)), "tensorflow")
        requirements = [f"{tf_dist}=={md.version(tf_dist)}"]
        if _keras.is_legacy(model):
            import mlflow.tensorflow

            mlflow.tensorflow.save_model(model, path, pip_requirements=[*requirements, f"tf_keras=={md.version('tf_keras')}"])
        else:
            import mlflow.keras

            mlflow.keras.save_model(model, path, pip_requirements=[*requirements, f"keras=={md.version('keras')}"])
        return True

    def save(self, filepath: str, overwrite: bool = True, include_optimizer: bool = True,
             save_format: str | None = None) -> str:
        """Save the model so plain Keras opens it.

        Args:
            filepath: ``*.keras`` (Keras' native format; also any other file name with a
                suffix), ``*.h5``/``*.hdf5`` (HDF5), or a name without suffix for a TF SavedModel
                directory (``keras.layers.TFSMLayer`` or ``tf.saved_model.load`` open it;
                tf_keras' ``load_model`` too).
            overwrite: replace an existing file.
            include_optimizer: also save the optimizer state (``.keras`` and h5).
            save_format: ``"keras"``, ``"h5"`` or ``"tf"``; inferred from ``filepath`` when None.

        Returns:
            ``filepath``.
        """
        fmt = save_format or _format_of(filepath)
        check_writable(filepath)
        if os.path.exists(filepath) and not overwrite:
            raise FileExistsError(f"{filepath!r} exists; pass overwrite=True.")
        model = self.get_model()
        from orca.tf._keras import is_legacy

        if fmt == "tf":
            if is_legacy(model):
                model.save(filepath, save_format="tf", include_optimizer=include_optimizer)
            else:
                model.export(filepath, verbose=0)
        elif fmt == "h5" and is_legacy(model):
            model.save(filepath, save_format="h5", include_optimizer=include_optimizer)
        elif is_legacy(model) and filepath.endswith(".keras"):
            model.save(filepath)  # Keras 2's native format takes no include_optimizer: it always has it
        elif fmt == "h5" or filepath.endswith(".keras") or is_legacy(model):
            model.save(filepath, include_optimizer=include_optimizer)
        else:  # Keras 3 insists on the .keras suffix: write one, then move it to the asked name
            import shutil
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                model.save(os.path.join(tmp, "model.keras"), include_optimizer=include_optimizer)
                shutil.move(os.path.join(tmp, "model.keras"), filepath)
        return filepath

    def load(self, filepath: str) -> None:
        """Load a model saved by :meth:`save` (or plain Keras) into this Estimator.

        The saved weights replace the current ones (the architecture is the creator's); the
        optimizer state too when the file has it.

        Raises:
            FileNotFoundError: nothing at ``filepath``.
            ValueError: a Keras 3 SavedModel (Keras 3 loads those for inference only), or a file
                that is not a model :meth:`save` wrote (a damaged or foreign file).
        """
        require_model_file(filepath, os.path.exists(filepath))
        given = filepath
        if self.spec.get("model_creator") is None:  # from_keras() without a model: the saved one becomes it
            self._adopt_saved_model(filepath)
        template = self.get_model()
        from orca.tf._keras import is_legacy, legacy_keras, optimizer_variables

        if is_legacy(template):
            with reading_model_file(given):
                loaded = legacy_keras(template).models.load_model(filepath)
        else:
            if os.path.isdir(filepath):
                raise ValueError(f"{filepath!r} is a SavedModel: Keras 3 opens those for inference only "
                                 "(keras.layers.TFSMLayer). Save as .keras or .h5 to load it back here.")
            import keras

            if not filepath.endswith((".keras", ".h5", ".hdf5")):  # a .keras zip saved under another name
                import shutil
                import tempfile

                tmp = tempfile.mkdtemp()
                filepath = shutil.copy(filepath, os.path.join(tmp, "model.keras"))
            # Keras 3 cannot rebuild some compile() strings ("mse") from h5: the weights are what we need
            with reading_model_file(given):
                loaded = keras.models.load_model(filepath, compile=not filepath.endswith((".h5", ".hdf5")))
        state: dict[str, Any] = {"weights": loaded.get_weights()}
        if getattr(loaded, "optimizer", None) is not None:
            variables = optimizer_variables(loaded)  # (read through the Keras session in graph mode: TF1 code)
            state["optimizer"] = (legacy_keras(loaded).backend.batch_get_value(variables) if is_legacy(loaded)
                                  else [v.numpy() for v in variables])
        self.set_state(state)

    def _adopt_saved_model(self, filepath: str) -> None:
        """Make the model saved at ``filepath`` (architecture, weights, compile settings Keras can
        rebuild) this Estimator's model creator, for an Estimator made without one."""
        import tensorflow as tf

        loader = tf.keras.models.load_model  # the Keras flavour the process's tf.keras is
        with reading_model_file(filepath):
            try:
                loaded = loader(filepath)
            except (ValueError, TypeError):  # Keras 3 cannot rebuild some h5 compile settings ("mse"):
                loaded = loader(filepath, compile=False)  # the model then comes uncompiled
        self.spec["model_creator"] = functools.partial(_keras.model_from_spec,
                                                       _keras.model_to_spec(loaded, uncompiled=True))
        self._driver_runner = None

    def _require_model(self) -> None:
        if self.spec.get("model_creator") is None:
            raise NotFittedError("this Estimator has no model: pass model_creator= (or keras_model=) to "
                                 "from_keras, or load() a saved model first.")

    def save_weights(self, filepath: str, overwrite: bool = True) -> str:
        """Save the weights only (Keras 3 wants a ``.weights.h5`` name). Returns ``filepath``."""
        self.get_model().save_weights(filepath, overwrite=overwrite)
        return filepath

    def load_weights(self, filepath: str) -> None:
        """Load weights written by :meth:`save_weights` or Keras' ``model.save_weights``."""
        model = self.get_model()
        model.load_weights(filepath)
        state = dict(self.get_state() or {}, weights=model.get_weights())
        self.set_state(state)


def _creator_of(keras_model: Any, optimizer: Any = None, metrics: Any = None) -> Callable[[dict[str, Any]], Any]:
    """A model creator rebuilding ``keras_model`` from plain data (an importable function plus
    the model's config, compile config and weights), its optimizer or metrics replaced when given."""
    if not (hasattr(keras_model, "trainable_variables") and hasattr(keras_model, "get_config")):
        raise TypeError(f"keras_model must be a compiled keras.Model (Keras 3 or tf_keras), got "
                        f"{type(keras_model).__name__}.")
    if not _keras.is_compiled(keras_model):
        raise ValueError("keras_model is not compiled: call keras_model.compile(optimizer=..., loss=..., "
                         "metrics=...) first.")
    return functools.partial(_keras.model_from_spec, _keras.model_to_spec(keras_model, optimizer, metrics))


class _WithConfig:
    """A data creator called with ``data_config`` merged into its config."""

    def __init__(self, creator: Callable[..., Any], extra: dict[str, Any]) -> None:
        self.creator, self.extra = creator, extra

    def __call__(self, config: dict[str, Any], batch_size: int) -> Any:
        return self.creator({**config, **self.extra}, batch_size)


def _is_creator(data: Any) -> bool:
    return callable(data) and not is_dataset(data) and not hasattr(data, "num_partitions")


def _with_data_config(data: Any, data_config: dict[str, Any] | None) -> Any:
    """``data`` with the reference's ``data_config`` applied: merged into a creator's config."""
    if data_config is None or data is None:
        return data
    if not isinstance(data_config, dict):
        raise TypeError(f"data_config must be a dict, got {type(data_config).__name__}.")
    if _is_creator(data):
        return _WithConfig(data, dict(data_config))
    warn_once("tf.data_config", f"data_config has no effect on {type(data).__name__} data: Orca reads the types "
              "from the data itself (no output_signature needed); it is merged into a data creator's config only.")
    return data


class _FirstSteps:
    """A data creator's first ``steps`` batches on each of ``world`` workers (they read batches
    ``rank, rank + world, ...``)."""

    def __init__(self, creator: Callable[..., Any], steps: int, world: int) -> None:
        self.creator, self.steps, self.world = creator, steps, world

    def __call__(self, config: dict[str, Any], batch_size: int) -> Any:
        return self.creator(config, batch_size).take(self.steps * self.world)


def _first_steps(data: Any, steps: int, batch_size: int, world: int) -> Any:
    """``data`` cut to its first ``steps`` global batches (``evaluate(num_steps=)``)."""
    rows = steps * batch_size
    if is_dataset(data):
        return first_rows(data, rows)
    if _is_creator(data):
        return _FirstSteps(data, steps, world)
    if type(data).__name__ == "DataFrame" and hasattr(data, "limit"):  # a Spark DataFrame
        return data.limit(rows)
    if hasattr(data, "num_rows_per_partition"):  # an XShards
        if sum(data.num_rows_per_partition()) > rows:
            raise ValueError(f"num_steps={steps} covers {rows} of the XShards' {sum(data.num_rows_per_partition())} "
                             "rows: evaluate a subset of it (or num_steps=None for all of it).")
        return data
    if isinstance(data, dict):
        return {k: _first_steps(v, steps, batch_size, world) for k, v in data.items()}
    if isinstance(data, (tuple, list)):
        return type(data)(_first_steps(v, steps, batch_size, world) for v in data)
    return data[:rows] if hasattr(data, "__getitem__") and hasattr(data, "shape") else data


def _installed(md: Any, dist: str) -> bool:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return False
    return True


def _format_of(filepath: str) -> str:
    if filepath.endswith(".keras"):
        return "keras"
    if filepath.endswith((".h5", ".hdf5")):
        return "h5"
    return "tf" if os.path.isdir(filepath) or not os.path.splitext(filepath)[1] else "keras"
