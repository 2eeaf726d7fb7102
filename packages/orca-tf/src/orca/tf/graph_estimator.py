"""The TF1-style Estimator on a ``tf.compat.v1`` graph: ``Estimator.from_graph(...)``.

It runs on the same engine as every Orca Estimator (:class:`~orca.core.plugin.BaseEstimator`):
the same data sources, lock-step plan, exact metric merging, liveness and recovery. Its runner
(:class:`~orca.tf.graph_runner.GraphRunner`) rebuilds the graph from the serialized MetaGraph on
each worker and keeps the replicas in step with :mod:`orca.core.sync`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from orca.core import plugin
from orca.core.plugin import Backend, BaseEstimator, History, Runner, declare, get_data_source, solo_runner
from orca.tf._dataset import dataset_adapter
from orca.tf.graph_runner import GraphRunner


class GraphEstimator(BaseEstimator):
    """Distributed training and inference of a ``tf.compat.v1`` graph; made by ``Estimator.from_graph``.

    ``fit``, ``evaluate`` and ``predict`` take a Spark DataFrame (``feature_cols``/``label_cols``,
    one column per ``inputs``/``labels`` placeholder), an XShards of ``{"x": ..., "y": ...}``
    dicts, or numpy data (``x``, ``(x, y)``, ``{"x": ..., "y": ...}``). ``save``/``load`` write
    and read a TF checkpoint of the variables; ``get_model`` returns their values.
    """

    backends = declare(
        Backend("spark", "spark", GraphRunner, "Spark barrier tasks kept in step by orca.core.sync"),
        Backend("ray", "ray", GraphRunner, "Ray actors kept in step by orca.core.sync"),
    )

    def __init__(self, *, spec: dict[str, Any], initial: dict[str, np.ndarray], backend: str,
                 workers_per_node: int, metrics: Any, model_dir: str | None, use_tqdm: bool) -> None:
        super().__init__(spec=spec, backend=backend, workers_per_node=workers_per_node, metrics=metrics,
                         model_dir=model_dir, use_tqdm=use_tqdm)
        self._driver_runner: GraphRunner | None = None
        self._driver_runner_version = -1
        self.set_state(initial)

    def _source(self, data: Any, feature_cols: Any, label_cols: Any, need_labels: bool, arg: str) -> Any:
        return get_data_source(data, feature_cols=feature_cols, label_cols=label_cols, need_labels=need_labels,
                               arg=arg, extra_adapters=(dataset_adapter,))

    def _metric_runner(self) -> Runner | None:
        return GraphRunner(self.spec)  # merging graph metrics needs no session

    def _need(self, method: str, train: bool) -> None:
        g = self.spec["graph"]
        if not g["labels"]:
            raise ValueError(f"{method} needs labels: pass labels= (the label placeholder(s)) to "
                             "Estimator.from_graph.")
        if train and g["apply_op"] is None:
            raise ValueError(f"{method} needs loss= and optimizer= (a tf.compat.v1.train.Optimizer) in "
                             "Estimator.from_graph.")

    def fit(self, data: Any, epochs: int = 1, batch_size: int = 32, feature_cols: Any = None,  # type: ignore[override]
            label_cols: Any = None, validation_data: Any = None, callbacks: list[Any] | None = None,
            max_steps: int | None = None, shuffle: bool | str = True, validation_freq: int = 1,
            max_failures: int | None = None, skip_non_finite_steps: bool = False) -> History:
        """Train data-parallel: each step applies exactly the global batch's gradient of ``loss``.

        Args:
            data: a Spark DataFrame, an XShards of ``{"x", "y"}`` dicts, numpy ``(x, y)``, a
                ``tf.data.Dataset`` of ``(features, labels)`` rows (batched here by ``batch_size``;
                it travels as its graph, see :mod:`orca.tf._dataset`) or a data creator
                ``f(config, batch_size)`` returning a batched ``tf.data.Dataset`` (``batch_size`` is
                then the per-worker batch).
            epochs: passes over the data.
            batch_size: the global batch size, split across the workers.
            feature_cols: DataFrame columns feeding ``inputs`` (in order).
            label_cols: DataFrame columns feeding ``labels`` (in order).
            validation_data: data of the same kind, evaluated after every ``validation_freq`` epochs.
            callbacks: orca Callbacks (run in the workers).
            max_steps: stop after this many steps in all.
            shuffle: how each worker shuffles its rows every epoch: ``True``, ``"full"``,
                ``"window"`` or ``False`` (see :meth:`orca.core.engine.estimator.BaseEstimator.fit`).
            validation_freq: validate after every this many epochs.
            max_failures: lost workers the fit recovers from (see ``BaseEstimator.fit``).
            skip_non_finite_steps: leave out a step whose all-reduced gradient holds NaN/Inf
                (see ``BaseEstimator.fit``).

        Returns:
            A History: per epoch ``loss``, the graph metrics (on the training batches, before each
            step's update), ``val_loss`` and ``val_<metric>``, ``num_samples``.

        Raises:
            ValueError: the graph has no labels, loss or optimizer; bad data (named on the driver).
        """
        self._need("fit", train=True)
        return super().fit(data, epochs=epochs, batch_size=batch_size, feature_cols=feature_cols,
                           label_cols=label_cols, validation_data=validation_data, callbacks=callbacks,
                           max_steps=max_steps, shuffle=shuffle, validation_freq=validation_freq,
                           max_failures=max_failures, skip_non_finite_steps=skip_non_finite_steps)

    def evaluate(self, data: Any, batch_size: int = 32, feature_cols: Any = None,
                 label_cols: Any = None) -> dict[str, float]:
        """The loss and metrics over ``data``, exact over all rows (merged over the workers).

        Returns:
            ``{"loss", "<metric>", ..., "num_samples"}``, also under ``val_``-prefixed keys. A graph
            metric is the row-weighted mean of its per-batch values (exact for a batch mean).
        """
        self._need("evaluate", train=False)
        stats = super().evaluate(data, batch_size=batch_size, feature_cols=feature_cols, label_cols=label_cols)
        return {**{k[4:]: v for k, v in stats.items() if k.startswith("val_")}, **stats}

    # ------------------------------------------------------------ gradient clipping
    def set_constant_gradient_clipping(self, min: float, max: float) -> None:  # noqa: A002 - the reference's names
        """Clip every element of the all-reduced gradient to ``[min, max]`` from the next step on
        (applied before an L2-norm clipping; replaces ``clip_value=``)."""
        from orca.tf._graph import check_clip

        _, bounds = check_clip(None, (min, max))
        self._set_clip(value=bounds)

    def set_l2_norm_gradient_clipping(self, clip_norm: float) -> None:
        """Scale the all-reduced gradient down to a global L2 norm of at most ``clip_norm`` from the
        next step on (replaces ``clip_norm=``)."""
        from orca.tf._graph import check_clip

        norm, _ = check_clip(clip_norm, None)
        self._set_clip(norm=norm)

    def clear_gradient_clipping(self) -> None:
        """No gradient clipping from the next step on."""
        self._set_clip(norm=None, value=None)

    def _set_clip(self, **changes: Any) -> None:
        clip = {**self.spec.get("clip", {}), **changes}
        if clip != self.spec.get("clip"):
            self._replace_spec(dict(self.spec, clip=clip))  # the workers restart from the driver's state

    # ------------------------------------------------------------ model I/O
    def _runner(self) -> GraphRunner:
        """The driver's session on the graph, holding the current variable values."""
        if self._driver_runner is None or self._driver_runner_version != self._model.version:
            if self._driver_runner is not None:
                self._driver_runner.shutdown()
            runner = solo_runner(GraphRunner, self.spec, self.get_state())
            assert isinstance(runner, GraphRunner)
            self._driver_runner, self._driver_runner_version = runner, self._model.version
        return self._driver_runner

    def get_model(self) -> dict[str, np.ndarray]:
        """The trained variables: ``{variable name: numpy value}`` of every global variable of the
        graph (the model's and the optimizer's, e.g. ``"dense/kernel"``, ``"dense/kernel/Adam"``).
        Feed them to your own session with ``var.load(value, sess)`` or use :meth:`save`."""
        return {k: np.array(v) for k, v in self.get_state().items()}

    def get_session(self) -> Any:
        """A ``tf.compat.v1.Session`` on the driver's copy of the graph, holding the trained values
        (the graph's tensors keep the names of the graph given to ``from_graph``)."""
        return self._runner().sess

    def save(self, checkpoint_path: str) -> str:
        """Save the variables as a TF checkpoint at the prefix ``checkpoint_path``.

        Writes ``checkpoint_path.index`` and ``.data-*`` (the values, read by
        ``tf.compat.v1.train.Saver.restore`` / ``tf.train.load_checkpoint``) and ``.meta`` (the
        graph, a MetaGraphDef protobuf). No Python code is written. Returns the prefix.
        """
        plugin.check_writable(checkpoint_path)
        parent = os.path.dirname(os.path.abspath(checkpoint_path))
        os.makedirs(parent, exist_ok=True)
        return self._runner().save_tf_checkpoint(checkpoint_path)

    def export_saved_model(self, export_dir: str, overwrite: bool = False) -> str:
        """Export the trained graph as a SavedModel for serving (TF Serving, ``tf.saved_model.load``).

        The ``serving_default`` signature maps the graph's ``inputs`` to its ``outputs``, each
        keyed by its op name (``x`` for ``tf.compat.v1.placeholder(..., name="x")``). The export
        is written beside ``export_dir`` and moved into place once complete: a failure never
        leaves a half-written directory, nor removes one that stood there.

        Args:
            export_dir: a local directory path; it must not exist unless ``overwrite``.
            overwrite: replace an existing export at ``export_dir``.

        Returns:
            ``export_dir``.

        Raises:
            FileExistsError: ``export_dir`` exists and ``overwrite`` is False.
        """
        import shutil
        import uuid

        target = os.path.abspath(export_dir)
        if os.path.exists(target) and not overwrite:
            raise FileExistsError(f"{export_dir!r} exists; pass overwrite=True to replace it, or another directory.")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self._runner().export_saved_model(tmp)
            if os.path.exists(target):
                old = f"{tmp}.old"
                os.rename(target, old)
                try:
                    os.rename(tmp, target)
                except OSError:
                    os.rename(old, target)  # the export that stood there stays
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return export_dir

    def load(self, checkpoint_path: str) -> None:
        """Load variable values from a TF checkpoint (written by :meth:`save` or a ``Saver`` on the
        same graph); every variable of the graph must be in it.

        Raises:
            FileNotFoundError: no checkpoint at ``checkpoint_path``.
            ValueError: a variable of the graph is missing from the checkpoint or has another shape,
                or the checkpoint's files are damaged or foreign.
        """
        import tensorflow as tf

        if not os.path.exists(checkpoint_path + ".index"):
            raise FileNotFoundError(f"no TF checkpoint at {checkpoint_path!r} (no {checkpoint_path}.index); pass the "
                                    "path the Estimator's save() wrote (no saved model there).")
        with plugin.reading_model_file(checkpoint_path):
            reader = tf.train.load_checkpoint(checkpoint_path)
            have = reader.get_variable_to_shape_map()
        current = self.get_state()
        missing = [n for n in current if n not in have]
        if missing:
            raise ValueError(f"the checkpoint {checkpoint_path!r} lacks variables of the graph: {missing[:5]}.")
        with plugin.reading_model_file(checkpoint_path):
            state = {n: reader.get_tensor(n) for n in current}
        wrong = [n for n in current if np.shape(state[n]) != np.shape(current[n])]
        if wrong:
            raise ValueError(f"the checkpoint {checkpoint_path!r} has other shapes for {wrong[:5]}.")
        self.set_state(state)

    def shutdown(self) -> None:
        if getattr(self, "_driver_runner", None) is not None:
            self._driver_runner.shutdown()  # type: ignore[union-attr]
            self._driver_runner = None
        super().shutdown()
