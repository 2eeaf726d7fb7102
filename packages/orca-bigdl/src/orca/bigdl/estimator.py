"""The BigDL Estimator: ``Estimator.from_bigdl(model=..., loss=..., optimizer=...)``.

BigDL trains in the JVM with its own data-parallel engine (its ``DistriOptimizer`` keeps the
replicas in step with BigDL's AllReduceParameter, the design :mod:`orca.core.sync` follows for
Python frameworks), so this Estimator drives BigDL's ``NNEstimator`` on a Spark DataFrame rather
than orca-core's Python workers. The inputs, the checks and the shape of the results are
orca-core's: the same data types as every Orca Estimator, ``fit`` returning a History with
``train_loss`` (and ``val_*``) per epoch, ``evaluate`` a flat dict, ``predict`` the container it
was given.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from orca.bigdl._engine import ensure_engine, quiet
from orca.core.plugin import (
    ArraySource,
    DataFrameSource,
    DataSource,
    History,
    NotFittedError,
    ShardsSource,
    check_positive_int,
    check_writable,
    get_data_source,
    is_spark_df,
    reading_model_file,
    require_model_file,
)

#: metric names -> BigDL validation method class names (in bigdl.dllib.optim.optimizer)
_METRICS = {"accuracy": "Top1Accuracy", "top1accuracy": "Top1Accuracy", "top5accuracy": "Top5Accuracy"}
#: BigDL's names for its validation methods (summary tags, evaluate results) -> Orca's metric names
_NAMES = {"Top1Accuracy": "accuracy", "Top5Accuracy": "top5accuracy", "MAE": "mae", "Loss": "loss"}
FEATURES, LABEL = "__orca_features", "__orca_label"
#: the reference's defaults for a DataFrame's columns (``est.fit(df, 1, batch_size=4)``)
DEFAULT_FEATURE_COL, DEFAULT_LABEL_COL = "features", "label"


def _reference_columns(data: Any, feature_cols: Any, label_cols: Any, need_labels: bool,
                       arg: str) -> tuple[Any, Any]:
    """A Spark DataFrame given without columns reads ``features`` (and ``label``), as in the reference.

    Raises:
        ValueError: such a DataFrame has no column of the default name.
    """
    if not is_spark_df(data):
        return feature_cols, label_cols
    columns = list(data.columns)
    for given, default, what in ((feature_cols, DEFAULT_FEATURE_COL, "feature_cols"),
                                 (label_cols if need_labels else "", DEFAULT_LABEL_COL, "label_cols")):
        if given is None and default not in columns:
            raise ValueError(f"{arg} is a Spark DataFrame without a {default!r} column, the default of {what}; "
                             f"give {what}=[...] naming the column(s). Its columns: {columns}.")
    return (DEFAULT_FEATURE_COL if feature_cols is None else feature_cols,
            DEFAULT_LABEL_COL if label_cols is None and need_labels else label_cols)


def _metric_name(method: Any) -> str:
    name = type(method).__name__
    return _NAMES.get(name, name.lower())


class Estimator:
    """Distributed training and inference of a BigDL (dllib) model on Spark.

    Create it with :meth:`from_bigdl`; then ``fit``, ``evaluate``, ``predict``, ``save``,
    ``load``, ``get_model``.

    Attributes:
        launcher: ``"spark"``: BigDL trains in Spark's executors (its JVM engine, not Orca's workers).
    """

    launcher = "spark"
    #: the model file of an MLflow run's ``model`` artifact (BigDL's own format: :meth:`load` reads it)
    mlflow_checkpoint_name = "model.bigdl"

    def __init__(self, *, model: Any, loss: Any, optimizer: Any, metrics: list[Any],
                 feature_preprocessing: Any, label_preprocessing: Any, model_dir: str | None) -> None:
        self.model = model
        self.loss = loss
        self.optimizer = optimizer
        self.metrics = metrics
        self.feature_preprocessing = feature_preprocessing
        self.label_preprocessing = label_preprocessing
        self.model_dir = model_dir
        self._epoch = 0
        self._rows: int | None = None  # set by _dataframe for a DataFrame: its row count
        #: ``f(event)`` called on the driver around each ``fit`` (``fit_begin``, each epoch's stats as
        #: ``epoch`` once BigDL's fit returns, ``fit_end`` / ``fit_failed``): :meth:`set_mlflow`'s logger
        self.fit_listeners: list[Any] = []

    @classmethod
    def from_bigdl(
        cls,
        *,
        model: Any,
        loss: Any = None,
        optimizer: Any = None,
        metrics: str | Any | Sequence[str | Any] | None = None,
        feature_preprocessing: Any = None,
        label_preprocessing: Any = None,
        model_dir: str | None = None,
    ) -> Estimator:
        """Build an Estimator from a BigDL model (the reference's arguments, as written).

        Args:
            model: a ``bigdl.dllib`` model (``Sequential().add(Linear(2, 2))``, a Keras-style
                dllib model, or one loaded with ``Model.loadModel``).
            loss: a BigDL criterion (``MSECriterion()``, ``ClassNLLCriterion()``...). Needed to
                train and evaluate.
            optimizer: a BigDL optim method (``Adam()``, ``SGD(learningrate=0.1)``); default SGD.
                It keeps its state (moments, step count) from one ``fit`` to the next.
            metrics: ``"accuracy"``, ``"top5accuracy"`` or BigDL validation methods
                (``Top1Accuracy()``...), reported by ``fit`` on validation data and by ``evaluate``.
            feature_preprocessing: a BigDL Preprocessing or the feature tensor size (list of ints)
                to turn each row's features into the model's input (default: one flat tensor).
            label_preprocessing: the same for labels.
            model_dir: where ``checkpoint_trigger`` writes BigDL checkpoints.

        Returns:
            The Estimator (nothing starts until ``fit``/``predict``).

        Raises:
            TypeError: ``model``, ``loss`` or ``optimizer`` is not a BigDL object.
            ValueError: an unknown metric name.
        """
        from bigdl.dllib.nn.layer import Layer

        if not isinstance(model, Layer):
            raise TypeError(f"model must be a bigdl.dllib model (e.g. Sequential().add(Linear(2, 2))), got "
                            f"{type(model).__name__}.")
        if loss is not None and type(loss).__module__.split(".")[0] != "bigdl":
            raise TypeError(f"loss must be a BigDL criterion (e.g. MSECriterion()), got {type(loss).__name__}.")
        if optimizer is not None and type(optimizer).__module__.split(".")[0] != "bigdl":
            raise TypeError(f"optimizer must be a BigDL optim method (e.g. Adam()), got {type(optimizer).__name__}.")
        return cls(model=model, loss=loss, optimizer=optimizer, metrics=_validation_methods(metrics),
                   feature_preprocessing=feature_preprocessing, label_preprocessing=label_preprocessing,
                   model_dir=model_dir)

    # ------------------------------------------------------------ data
    def _dataframe(self, data: Any, feature_cols: Any, label_cols: Any, need_labels: bool, arg: str) -> Any:
        """``data`` as a DataFrame with one feature column and (with labels) one label column."""
        from orca.core.plugin import OrcaContext

        feature_cols, label_cols = _reference_columns(data, feature_cols, label_cols, need_labels, arg)
        src = get_data_source(data, feature_cols=feature_cols, label_cols=label_cols, need_labels=need_labels,
                              arg=arg, allow_creator=False)
        spark = OrcaContext.get_spark_session()
        if isinstance(src, DataFrameSource):
            fcols, lcols = list(src.feature_cols or []), list(src.label_cols or []) if need_labels else []
            self._rows = _check_columns(src.obj, fcols, lcols, arg, finite=need_labels)
            return _assemble(src.obj, fcols, lcols)
        if isinstance(src, ArraySource):
            return _arrays_to_df(spark, src, need_labels)
        if isinstance(src, ShardsSource):
            df = src.obj.to_spark_df()
            fcols = list(src.feature_cols or ["x"])
            lcols = list(src.label_cols or ["y"]) if need_labels else []
            return _assemble(df, fcols, lcols)
        raise TypeError(f"{arg}: {src.what} is not supported by the BigDL Estimator; pass a Spark DataFrame, "
                        "an XShards or numpy arrays.")

    def _check_batch_size(self, batch_size: int, sc: Any) -> None:
        check_positive_int("batch_size", batch_size)
        cores = int(sc.defaultParallelism)
        if batch_size % cores:
            fix = (batch_size // cores + 1) * cores
            raise ValueError(f"batch_size={batch_size} must be a multiple of the {cores} workers BigDL trains on "
                             f"(one per core: nodes x cores per node); use batch_size >= number of workers and a "
                             f"multiple of it: {fix}.")

    # ------------------------------------------------------------ fit
    def fit(
        self,
        data: Any,
        epochs: int = 1,
        batch_size: int = 32,
        feature_cols: str | Sequence[str] | None = None,
        label_cols: str | Sequence[str] | None = None,
        caching_sample: bool = True,
        validation_data: Any = None,
        validation_trigger: Any = None,
        checkpoint_trigger: Any = None,
    ) -> History:
        """Train for ``epochs`` more epochs on ``data`` with BigDL's distributed optimizer.

        Args:
            data: a Spark DataFrame (with ``feature_cols`` / ``label_cols``), an XShards of
                ``{"x", "y"}`` dicts, or numpy ``(x, y)``.
            epochs: epochs to train in this call.
            batch_size: the global batch; BigDL needs a multiple of its total cores.
            feature_cols: feature column(s) (default for a DataFrame: ``features``, as in the
                reference): one array/Vector column, or several numeric or
                array columns (concatenated into one tensor per row).
            label_cols: the label column(s) (default for a DataFrame: ``label``).
            caching_sample: cache the converted samples (BigDL's ``setCachingSample``).
            validation_data: data to evaluate the loss and metrics on (same forms as ``data``).
            validation_trigger: when to validate (a BigDL trigger); default every epoch.
            checkpoint_trigger: when to write a BigDL checkpoint into ``model_dir``.

        Returns:
            A History: ``train_loss`` (the mean of the epoch's iterations) and, with validation
            data, ``val_loss`` and ``val_<metric>`` per epoch; ``num_samples`` per epoch.

        Raises:
            ValueError: bad columns, an empty DataFrame, a batch size BigDL cannot split, no
                loss, or ``checkpoint_trigger`` without ``model_dir``.
            TypeError: an unsupported data type.
        """
        if self.fit_listeners:  # (the parameters start BigDL's engine: only when someone listens)
            from orca.core.plugin import hyperparameters

            self._notify({"event": "fit_begin", "params": {
                "estimator": type(self).__name__, "backend": "bigdl", "num_workers": self.num_workers,
                "epochs": epochs, "batch_size": batch_size, "start_epoch": self._epoch,
                "loss": type(self.loss).__name__, **hyperparameters(self._optimizer_params())}})
        try:
            history = self._fit(data, epochs, batch_size, feature_cols, label_cols, caching_sample, validation_data,
                                validation_trigger, checkpoint_trigger)
        except BaseException as exc:
            self._notify({"event": "fit_failed", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
            raise
        for stats in history:
            self._notify({"event": "epoch", **stats})
        self._notify({"event": "fit_end", "history": [dict(h) for h in history], "restarts": []})
        return history

    def _optimizer_params(self) -> dict[str, Any]:
        """The optim method's class and hyper-parameters (``learningRate``, ``momentum``, ``beta1``...),
        read from its JVM object's fields (BigDL's Python wrappers keep none), for MLflow's run
        parameters; the default ``SGD()`` is made here when ``from_bigdl`` was given none."""
        from bigdl.dllib.optim.optimizer import SGD

        with quiet():
            if self.optimizer is None:
                self.optimizer = SGD()
            out: dict[str, Any] = {"optimizer": type(self.optimizer).__name__}
            try:
                jvalue = self.optimizer.value
                for field in jvalue.getClass().getDeclaredFields():
                    name = field.getName()
                    if "$" in name or name in ("state", "ev"):
                        continue
                    field.setAccessible(True)
                    value = field.get(jvalue)
                    if isinstance(value, (bool, int, float, str)):
                        out[name] = value
            except Exception:  # noqa: BLE001 - a JVM object without readable fields: its class alone
                pass
        return out

    def _notify(self, event: dict[str, Any]) -> None:
        from orca.core.plugin import notify_listeners

        notify_listeners(self.fit_listeners, event)

    def _fit(self, data: Any, epochs: int, batch_size: int, feature_cols: Any, label_cols: Any, caching_sample: bool,
             validation_data: Any, validation_trigger: Any, checkpoint_trigger: Any) -> History:
        from bigdl.dllib.nnframes import NNEstimator
        from bigdl.dllib.optim.optimizer import SGD, EveryEpoch, Loss, TrainSummary, ValidationSummary

        if self.loss is None:
            raise ValueError("no loss was given to from_bigdl(loss=...); it is needed to train.")
        check_positive_int("epochs", epochs)
        if checkpoint_trigger is not None and not self.model_dir:
            raise ValueError("checkpoint_trigger needs model_dir=... in from_bigdl (where checkpoints go).")
        self._rows = None
        df = self._dataframe(data, feature_cols, label_cols, True, "data")
        rows = self._rows  # a DataFrame's rows, counted with its column checks
        val_df = (self._dataframe(validation_data, feature_cols, label_cols, True, "validation_data")
                  if validation_data is not None else None)
        sc = ensure_engine()
        self._check_batch_size(batch_size, sc)
        if rows is None:
            rows = df.count()
        if rows == 0:
            raise ValueError("data: the data has no rows; fit needs at least one (df.count() > 0).")
        if batch_size > rows:  # BigDL's engine fails deep in a task ("samples's size doesn't match mini batch size")
            raise ValueError(f"batch_size={batch_size} is more than the {rows} rows of data: BigDL trains on full "
                             f"batches only; use batch_size <= {rows} (a multiple of its workers).")
        board = getattr(self, "_tensorboard", None)
        logs, app = board if board is not None else (tempfile.mkdtemp(prefix="orca-bigdl-"), "orca")
        try:
            with quiet():
                if self.optimizer is None:
                    self.optimizer = SGD()
                est = NNEstimator(self.model, self.loss, self.feature_preprocessing, self.label_preprocessing)
                est.setFeaturesCol(FEATURES).setLabelCol(LABEL).setBatchSize(batch_size)
                # the optim method counts epochs in its state across fits: train up to this many in all
                est.setMaxEpoch(self._epoch + epochs).setOptimMethod(self.optimizer)
                est.setCachingSample(caching_sample)
                train_summary = TrainSummary(log_dir=logs, app_name=app)
                est.setTrainSummary(train_summary)
                val_summary = None
                if val_df is not None:
                    val_summary = ValidationSummary(log_dir=logs, app_name=app)
                    est.setValidationSummary(val_summary)
                    est.setValidation(validation_trigger or EveryEpoch(), val_df,
                                      [Loss(self.loss), *self.metrics], batch_size)
                if checkpoint_trigger is not None:
                    est.setCheckpoint(self.model_dir, checkpoint_trigger, isOverWrite=False)
            try:
                with quiet():
                    est.fit(df)
            except Exception as exc:  # py4j errors carry the JVM's trace: name the cause on top
                raise RuntimeError(f"BigDL's training failed: {_java_cause(exc)}") from exc
            history = self._history(train_summary, val_summary, epochs, rows)
            self._summaries = (train_summary, val_summary)
        finally:
            if board is None:
                shutil.rmtree(logs, ignore_errors=True)
        self._epoch += epochs
        return history

    def _history(self, train_summary: Any, val_summary: Any, epochs: int, rows: int) -> History:
        losses = [float(r[1]) for r in train_summary.read_scalar("Loss")]
        per = max(1, len(losses) // epochs)
        stats = []
        for e in range(epochs):
            chunk = losses[e * per:(e + 1) * per] if e < epochs - 1 else losses[e * per:]
            loss = float(np.mean(chunk)) if chunk else float("nan")
            stats.append({"epoch": self._epoch + e + 1, "num_samples": rows, "train_loss": loss, "loss": loss})
        if val_summary is not None:
            for tag in ["Loss", *{type(m).__name__ for m in self.metrics}]:
                values = [float(r[1]) for r in val_summary.read_scalar(tag)]
                name = "val_" + _NAMES.get(tag, tag.lower())
                for e, value in enumerate(values[-epochs:]):  # one record per validation (every epoch by default)
                    stats[len(stats) - len(values[-epochs:]) + e][name] = value
        return History(stats)

    # ------------------------------------------------------------ evaluate / predict
    def evaluate(self, data: Any, batch_size: int = 32, feature_cols: str | Sequence[str] | None = None,
                 label_cols: str | Sequence[str] | None = None) -> dict[str, float]:
        """The loss and metrics over ``data``, computed by BigDL on the executors.

        Returns:
            ``{"val_loss": ..., "val_<metric>": ..., "num_samples": N}``.
        """
        from bigdl.dllib.optim.optimizer import Loss

        if self.loss is None:
            raise ValueError("no loss was given to from_bigdl(loss=...); it is needed to evaluate.")
        df = self._dataframe(data, feature_cols, label_cols, True, "data")
        sc = ensure_engine()
        self._check_batch_size(batch_size, sc)
        samples = df.rdd.map(_to_sample)
        with quiet():
            methods = [Loss(self.loss), *self.metrics]
            results = self.model.evaluate(samples, batch_size, methods)
        out: dict[str, float] = {}
        for method, result in zip(methods, results, strict=True):
            out[f"val_{_metric_name(method)}"] = float(result.result)
        out["num_samples"] = int(results[0].total_num)  # the loss counts rows (some methods count batches)
        return out

    def predict(self, data: Any, batch_size: int = 32, feature_cols: str | Sequence[str] | None = None) -> Any:
        """Predict ``data`` on the executors; the result has the input's container type.

        Returns:
            A DataFrame with a ``prediction`` (array) column added; an ndarray for numpy input;
            an XShards whose shards gain ``prediction`` for an XShards.
        """
        from bigdl.dllib.nnframes import NNModel

        feature_cols, _ = _reference_columns(data, feature_cols, None, False, "data")
        src = get_data_source(data, feature_cols=feature_cols, need_labels=False, arg="data", allow_creator=False)
        ensure_engine()
        check_positive_int("batch_size", batch_size)
        if isinstance(src, DataFrameSource):
            _check_columns(src.obj, list(src.feature_cols or []), [], "data", finite=False)
        with quiet():
            nn_model = NNModel(self.model, self.feature_preprocessing).setBatchSize(batch_size)
            nn_model.setFeaturesCol(FEATURES).setPredictionCol("prediction")
        if isinstance(src, DataFrameSource):
            df = src.obj
            assembled = _assemble(df, list(src.feature_cols or []), [], keep=True)
            return nn_model.transform(assembled).drop(FEATURES)
        from orca.core.plugin import OrcaContext

        if isinstance(src, ArraySource):
            df = _arrays_to_df(OrcaContext.get_spark_session(), src, False, with_index=True)
            out = nn_model.transform(df).orderBy("__orca_index").select("prediction").toPandas()
            return np.stack(out["prediction"].to_numpy()).astype(np.float32)
        if isinstance(src, ShardsSource):
            from orca.core import XShards

            shards = src.obj
            dicts = bool(shards._first_map(lambda shard: isinstance(shard, dict)))
            fcols = list(src.feature_cols or ["x"])
            out = nn_model.transform(_assemble(shards.to_spark_df(), fcols, [], keep=True)).drop(FEATURES)
            result = XShards.from_spark_df(out)
            return result.transform_shard(_pandas_to_dict) if dicts else result
        raise TypeError(f"data: {src.what} is not supported by predict; pass a Spark DataFrame, an XShards "
                        "or a numpy array.")

    # ------------------------------------------------------------ MLflow
    def set_mlflow(self, tracking_uri: str | None = None, experiment_name: str | None = None,
                   run_name: str | None = None, log_model: bool = True) -> Any:
        """Log every following ``fit`` as an MLflow run, as every Orca Estimator does: parameters,
        each epoch's stats (once BigDL's fit returns) and (``log_model``) the trained model as the
        run's ``model/model.bigdl`` artifact (BigDL's own format; :meth:`load` reads it). Needs
        ``mlflow``.

        Returns:
            The :class:`~orca.core.engine.tracking.MLflowLogger` (its ``run_ids`` lists the runs).
        """
        from orca.core.plugin import MLflowLogger

        return MLflowLogger.attach(self, tracking_uri=tracking_uri, experiment_name=experiment_name,
                                   run_name=run_name, log_model=log_model)

    def save_mlflow_model(self, path: str) -> bool:
        """No MLflow flavour runs BigDL models: the run gets BigDL's model file alone.

        Returns:
            False.
        """
        return False

    def save_checkpoint(self, path: str) -> str:
        """Write the model in BigDL's own format (as :meth:`save`; :meth:`load` reads it).

        Returns:
            ``path``.
        """
        return self.save(path)

    # ------------------------------------------------------------ TensorBoard
    def set_tensorboard(self, log_dir: str, app_name: str = "orca") -> None:
        """Keep the TensorBoard summaries BigDL writes during the next fits in
        ``log_dir/app_name/{train,validation}`` (BigDL writes them itself: ``Loss`` and
        ``Throughput`` per iteration, validation results per validation), as the reference did.

        Args:
            log_dir: the folder TensorBoard reads (``tensorboard --logdir log_dir``).
            app_name: the run's subfolder (default ``"orca"``).

        Raises:
            TypeError: ``log_dir`` or ``app_name`` is not a string (or ``app_name`` is empty).
        """
        if not isinstance(log_dir, str) or not isinstance(app_name, str) or not app_name:
            raise TypeError("set_tensorboard(log_dir, app_name='orca') takes strings, e.g. "
                            "set_tensorboard('/tmp/logs') or set_tensorboard('/tmp/logs', 'lenet').")
        os.makedirs(log_dir, exist_ok=True)
        self._tensorboard = (log_dir, app_name)

    def get_train_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of the last fit's training summary (``"Loss"``,
        ``"Throughput"``), one row per iteration.

        Raises:
            ValueError: no fit since :meth:`set_tensorboard`.
        """
        return self._summary(0, tag)

    def get_validation_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of the last fit's validation summary (``"Loss"``
        or a metric's BigDL name, e.g. ``"Top1Accuracy"``), one row per validation.

        Raises:
            ValueError: no fit with validation data since :meth:`set_tensorboard`.
        """
        return self._summary(1, tag)

    def _summary(self, which: int, tag: str) -> np.ndarray:
        summaries = getattr(self, "_summaries", None)
        if getattr(self, "_tensorboard", None) is None or summaries is None or summaries[which] is None:
            raise ValueError(f"no summaries: call set_tensorboard(log_dir) and fit"
                             f"{' with validation_data' if which else ''} first to record {tag!r}.")
        with quiet():
            return np.asarray(summaries[which].read_scalar(tag), dtype=np.float64)

    @property
    def num_workers(self) -> int:
        """The cores BigDL trains on (nodes x cores per node; the global batch is split over them).
        Starts BigDL's engine on Orca's Spark session if it is not running yet."""
        return int(ensure_engine().defaultParallelism)

    def get_state(self) -> dict[str, Any]:
        """The model's weights (numpy copies, in BigDL's order) and the epochs trained so far."""
        ensure_engine()
        with quiet():
            weights = self.model.get_weights() or []
        return {"weights": [np.array(w) for w in weights], "epoch": self._epoch}

    # ------------------------------------------------------------ model I/O
    def get_model(self) -> Any:
        """The BigDL model (trained in place by ``fit``)."""
        return self.model

    def save(self, path: str) -> str:
        """Write the model in BigDL's own format (``Model.loadModel(path)`` opens it); ``path`` local.

        Returns:
            ``path``.
        """
        check_writable(path)
        ensure_engine()
        with quiet():
            self.model.saveModel(path, over_write=True)
        return path

    def load(self, path: str) -> None:
        """Replace the model with one written by :meth:`save` (or BigDL's ``saveModel``).

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is not a model :meth:`save` wrote (a damaged or foreign file).
        """
        from bigdl.dllib.nn.layer import Model

        require_model_file(path, os.path.exists(path))
        ensure_engine()
        with quiet(), reading_model_file(path):
            self.model = Model.loadModel(path)

    def load_orca_checkpoint(self, path: str) -> None:
        """Load the newest BigDL checkpoint (``model.<iteration>``) under ``path`` (a ``model_dir``)."""
        from bigdl.dllib.nn.layer import Model

        found = []
        for root, _dirs, files in os.walk(path):
            found += [os.path.join(root, f) for f in files if f.startswith("model.") and f[6:].isdigit()]
        if not found:
            raise NotFittedError(f"no BigDL checkpoint (model.<iteration>) under {path!r}.")
        newest = max(found, key=lambda f: int(os.path.basename(f)[6:]))
        ensure_engine()
        with quiet():
            self.model = Model.loadModel(newest)

    def shutdown(self) -> None:
        """Nothing to stop: BigDL's engine lives with the Spark session (``stop_orca_context``)."""


# ---------------------------------------------------------------- helpers
def _validation_methods(metrics: Any) -> list[Any]:
    import bigdl.dllib.optim.optimizer as optim

    if metrics is None:
        return []
    items = [metrics] if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)) else list(metrics)
    out = []
    for m in items:
        if isinstance(m, str):
            if m.lower() not in _METRICS:
                raise ValueError(f"metrics: unknown metric {m!r}; use {sorted(_METRICS)} or BigDL validation "
                                 "methods (bigdl.dllib.optim.optimizer.Top1Accuracy()...).")
            with quiet():
                out.append(getattr(optim, _METRICS[m.lower()])())
        elif type(m).__module__.split(".")[0] == "bigdl":
            out.append(m)
        else:
            raise TypeError(f"metrics: {type(m).__name__} is not a metric name or a BigDL validation method.")
    return out


def _check_columns(df: Any, fcols: list[str], lcols: list[str], arg: str, finite: bool) -> int:
    """What Orca's workers check in every batch, checked here in one Spark job over ``df`` (BigDL's
    JVM would fail on it with a Scala error naming no column, or train on NaN): no nulls, arrays of
    one length per column, and (``finite``: training and evaluation) no NaN/Inf.

    Returns:
        The number of rows (counted in the same job).

    Raises:
        ValueError: naming the column, what is wrong, and the fix (the messages of orca-core's checks).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, FloatType

    def non_finite(c: Any) -> Any:
        return F.isnan(c) | (F.abs(c) == float("inf"))

    checks: list[tuple[str, str, str, Any]] = []  # (what, kind, column, aggregate)
    for kind, cols in (("feature", fcols), ("label", lcols)):
        for c in cols:
            typ, col = df.schema[c].dataType, F.col(c)
            checks.append(("null", kind, c, F.sum(col.isNull().cast("long"))))
            if isinstance(typ, ArrayType):
                checks.append(("null", kind, c, F.sum(F.exists(col, lambda v: v.isNull()).cast("long"))))
                checks += [("min", kind, c, F.min(F.size(col))), ("max", kind, c, F.max(F.size(col)))]
                if finite and isinstance(typ.elementType, (FloatType, DoubleType)):
                    checks.append(("nan", kind, c, F.sum(F.exists(col, non_finite).cast("long"))))
            elif finite and isinstance(typ, (FloatType, DoubleType)):
                checks.append(("nan", kind, c, F.sum(non_finite(col).cast("long"))))
    got = df.agg(F.count(F.lit(1)).alias("rows"), *[a.alias(f"c{i}") for i, (*_, a) in enumerate(checks)]).first()
    shortest: dict[str, Any] = {}
    for i, (what, kind, c, _) in enumerate(checks):
        n = got[f"c{i}"] or 0
        if what == "null" and n:
            raise ValueError(f"{arg}: column {c!r} has {n} null value(s) (or rows with null elements); drop or fill "
                             f"them first (df.na.drop(subset=[{c!r}]) or df.na.fill(...)).")
        if what == "min":
            shortest[c] = got[f"c{i}"]
        if what == "max" and shortest.get(c) is not None and n != shortest[c]:
            raise ValueError(f"{arg}: column {c!r} holds arrays of different lengths ({shortest[c]}..{n}); "
                             "every row must have the same shape.")
        if what == "nan" and n:
            raise ValueError(f"{arg}: {kind} column {c!r} holds NaN/Inf value(s) in {n} row(s); a model cannot train "
                             "or be scored on them. Drop or fill them first (df.na.drop / df.na.fill).")
    return int(got["rows"])


def _assemble(df: Any, fcols: list[str], lcols: list[str], keep: bool = False) -> Any:
    """One float array column of features (and one of labels): several numeric, array or Vector
    columns are concatenated per row, in the order given."""
    from pyspark.sql import functions as F

    def as_array(col: str) -> Any:
        typ = type(df.schema[col].dataType).__name__
        if typ == "VectorUDT":
            from pyspark.ml.functions import vector_to_array

            return vector_to_array(F.col(col)).cast("array<float>")
        if typ == "ArrayType":
            return F.col(col).cast("array<float>")
        return F.array(F.col(col).cast("float"))

    def combine(cols: list[str]) -> Any:
        return as_array(cols[0]) if len(cols) == 1 else F.concat(*[as_array(c) for c in cols])

    extra = [combine(fcols).alias(FEATURES)]
    if lcols:
        extra.append(combine(lcols).alias(LABEL))
    return df.select("*", *extra) if keep else df.select(*extra)


def _arrays_to_df(spark: Any, src: DataSource, need_labels: bool, with_index: bool = False) -> Any:
    import pandas as pd

    parts = src.obj
    x = np.concatenate([np.concatenate([np.asarray(a).reshape(len(a), -1) for a in p["x"]], 1) for p in parts])
    frame: dict[str, Any] = {FEATURES: list(x.astype(np.float32))}
    if need_labels:
        y = np.concatenate([np.concatenate([np.asarray(a).reshape(len(a), -1) for a in p["y"]], 1) for p in parts])
        frame[LABEL] = list(y.astype(np.float32))
    if with_index:
        frame["__orca_index"] = np.arange(len(x))
    schema = f"{FEATURES} array<float>" + (f", {LABEL} array<float>" if need_labels else "") + \
        (", __orca_index long" if with_index else "")
    return spark.createDataFrame(pd.DataFrame(frame), schema=schema)


def _pandas_to_dict(frame: Any) -> dict[str, np.ndarray]:
    """A pandas shard back to a dict of arrays (array columns stacked into 2-D arrays)."""
    out = {}
    for col in frame.columns:
        values = frame[col].to_numpy()
        out[col] = np.stack(values) if values.dtype == object and len(values) else values
    return out


def _to_sample(row: Any) -> Any:
    from bigdl.dllib.utils.common import Sample

    return Sample.from_ndarray(np.asarray(row[FEATURES], np.float32), np.asarray(row[LABEL], np.float32))


def _java_cause(exc: BaseException) -> str:
    """The JVM trace's first error line and, where it differs, its root cause (the last "Caused by")."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if "Exception:" in line or "Error:" in line]
    if not lines:
        return text.splitlines()[0] if text else type(exc).__name__
    roots = [line for line in lines if line.startswith("Caused by:")]
    return lines[0] if not roots or roots[-1] == lines[0] else f"{lines[0]} ... {roots[-1]}"
