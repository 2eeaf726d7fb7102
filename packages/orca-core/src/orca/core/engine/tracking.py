"""MLflow tracking of ``fit``, for every framework (``est.set_mlflow(...)``).

An :class:`MLflowLogger` is a ``BaseEstimator.fit_listeners`` listener working on the driver:

- ``fit_begin``: one MLflow run per ``fit`` call (a child of the user's active run, if there is
  one), with the fit's parameters (Estimator class, backend, workers, epochs, batch size, the
  Estimator's ``config``), and the optimizer's hyper-parameters as rank 0 built them
  (``optimizer``: its class, ``optimizer.<name>``: each scalar one, e.g. ``optimizer.lr``; see
  :func:`hyperparameters`);
- a fit resumed from an Orca checkpoint that a tracked fit wrote (``load_checkpoint`` then
  ``fit``: ``save_checkpoint`` and ``ModelCheckpoint`` store the run's id in the checkpoint)
  reopens that run instead of making a new one: its epochs continue the run's, an epoch the run
  already holds (a checkpoint older than the run's last epoch) is not logged twice, and the
  parameters that changed (``epochs``, ``start_epoch``...) go to the ``orca.resumes`` tag (JSON)
  since MLflow parameters cannot change;
- each epoch: its merged statistics (the History's, exact over all workers) as metrics at
  ``step`` = the epoch number; an epoch restarted after a lost worker (``max_failures``) logs
  in the same run, so a recovered fit is one run, never a duplicate;
- ``fit_end``: the restart records (a ``orca.restarts`` tag, JSON), the model as the ``model``
  artifact: an MLflow Model with the framework's flavour where it has one (the Estimator's
  ``save_mlflow_model``: ``mlflow.pytorch`` for torch, ``mlflow.tensorflow`` for Keras), plus
  ``model/orca.ckpt`` (``save_checkpoint``'s data-only file, which ``load_checkpoint`` reads);
  and the run ends ``FINISHED``; a failed fit ends it ``FAILED`` with the error as a tag.

It talks to MLflow through ``MlflowClient`` with the given tracking URI, so the process-wide
MLflow settings are not changed. Needs ``mlflow`` (``pip install "orca-core[mlflow]"``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

_INSTALL = 'MLflow tracking needs the mlflow package: pip install "orca-core[mlflow]".'
_NOT_METRICS = {"event", "epoch", "stopped_early"}


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise ImportError(_INSTALL) from None
    return mlflow


def _scalar(value: Any) -> Any:
    """``value`` as a JSON scalar (a numpy scalar unwrapped), or ``None`` if it is not one."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    return value if isinstance(value, (bool, int, float, str)) else None


def hyperparameters(params: Mapping[str, Any]) -> dict[str, Any]:
    """The run parameters of an optimizer from a runner's ``optimizer_params()`` (the framework's
    hook: torch's param group, Keras' ``get_config()``, MXNet's optimizer parameters).

    Args:
        params: ``{"optimizer": class name, hyper-parameter: value, ...}``.

    Returns:
        ``{"optimizer": name, "optimizer.<key>": value}`` of the scalar values (numbers,
        strings, booleans, and lists of numbers such as Adam's ``betas``); the others (a learning
        rate schedule, ``None``) are left out. Plain JSON values, in the keys' order.
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, (list, tuple)):
            items = [_scalar(v) for v in value]
            kept: Any = items if items and all(isinstance(v, (int, float)) for v in items) else None
        else:
            kept = _scalar(value)
        if kept is not None:
            out["optimizer" if key == "optimizer" else f"optimizer.{key}"] = kept
    return out


class MLflowLogger:
    """Logs each ``fit`` of an Estimator as an MLflow run (see the module doc).

    Args:
        estimator: the Estimator whose fits are logged (its ``save_checkpoint`` writes the model).
        tracking_uri: where runs go (``sqlite:///mlflow.db``, ``http://host:5000``...); ``None``:
            MLflow's current tracking URI.
        experiment_name: the experiment (created when missing); ``None``: MLflow's default one.
        run_name: the runs' name (``None``: MLflow picks one).
        log_model: log the trained model as an artifact at the end of each fit.
    """

    def __init__(self, estimator: Any, tracking_uri: str | None = None, experiment_name: str | None = None,
                 run_name: str | None = None, log_model: bool = True) -> None:
        mlflow = _mlflow()
        self.estimator = estimator
        self.client = mlflow.tracking.MlflowClient(tracking_uri)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.log_model = log_model
        #: the run of the fit in progress (``None`` between fits); ``run_ids``: every run logged
        self.run_id: str | None = None
        self.run_ids: list[str] = []
        self._params: dict[str, str] = {}  # the run's parameters (MLflow's cannot change)
        self._changed: dict[str, str] = {}  # this fit's parameters the reopened run holds other values of
        self._logged_steps: set[int] = set()  # epochs a reopened run held already

    @classmethod
    def attach(cls, estimator: Any, **settings: Any) -> MLflowLogger:
        """A logger for ``estimator`` appended to its ``fit_listeners``, replacing the one a previous
        call attached (what ``set_mlflow`` does on every Estimator)."""
        old = getattr(estimator, "_mlflow", None)
        if old is not None:
            estimator.fit_listeners.remove(old)
        estimator._mlflow = logger = cls(estimator, **settings)
        estimator.fit_listeners.append(logger)
        return logger

    def _experiment_id(self) -> str:
        if self.experiment_name is None:
            return "0"
        found = self.client.get_experiment_by_name(self.experiment_name)
        return str(found.experiment_id if found is not None else self.client.create_experiment(self.experiment_name))

    def __call__(self, event: dict[str, Any]) -> None:
        """Log one fit event (``fit_begin``, rank 0's ``begin``, ``epoch``, ``fit_end``, ``fit_failed``)."""
        kind = event.get("event")
        if kind == "fit_begin":
            self._begin(event.get("params") or {}, event.get("resume") or {})
        elif self.run_id is None:
            return
        elif kind == "begin":  # rank 0's: the optimizer it built
            self._log_params(event.get("optimizer") or {})
        elif kind == "epoch":
            self._epoch(event)
        elif kind == "fit_end":
            self._end(event)
        elif kind == "fit_failed":
            self.client.set_tag(self.run_id, "orca.error", str(event.get("error", ""))[:5000])
            self.client.set_terminated(self.run_id, "FAILED")
            self.run_id = None

    def _begin(self, params: dict[str, Any], resume: dict[str, Any]) -> None:
        self._params, self._changed, self._logged_steps = {}, {}, set()
        run = self._reopen(str(resume["mlflow_run_id"])) if resume.get("mlflow_run_id") else None
        if run is None:
            tags = {"orca.estimator": str(params.get("estimator", ""))}
            if resume.get("mlflow_run_id"):  # its run is not in this store: a new one, saying where it came from
                tags["orca.resumed_from"] = str(resume["mlflow_run_id"])
            active = _mlflow().active_run()
            if active is not None:  # nested under the user's run
                tags["mlflow.parentRunId"] = active.info.run_id
            run = self.client.create_run(self._experiment_id(), tags=tags, run_name=self.run_name)
        self.run_id = run.info.run_id
        if self.run_id not in self.run_ids:
            self.run_ids.append(self.run_id)
        # what the Estimator's checkpoints carry from now on: a fit resumed from one continues this run
        meta = getattr(self.estimator, "_checkpoint_meta", None)
        if isinstance(meta, dict):
            meta["mlflow_run_id"] = self.run_id
        self._log_params(params)

    def _reopen(self, run_id: str) -> Any:
        """The run ``run_id`` set running again for a resumed fit (``None`` if this store lacks it)."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        if run.info.lifecycle_stage != "active":
            return None
        self.client.update_run(run_id, status="RUNNING")
        self._params = {k: str(v) for k, v in run.data.params.items()}
        for key in ("loss", "train_loss"):
            self._logged_steps |= {int(p.step) for p in self.client.get_metric_history(run_id, key)}
        return run

    def _log_params(self, params: Mapping[str, Any]) -> None:
        """Log the parameters the run lacks; on a reopened run, those it holds other values of go
        to the ``orca.resumes`` tag (at the fit's end)."""
        from mlflow.entities import Param

        new = []
        for key, value in params.items():
            key, text = str(key)[:250], str(value)[:6000]
            if key not in self._params:
                self._params[key] = text
                new.append(Param(key, text))
            elif self._params[key] != text:
                self._changed[key] = text
        for i in range(0, len(new), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(str(self.run_id), params=new[i:i + 100])

    def _epoch(self, event: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        step = int(event.get("epoch") or 0)
        if step in self._logged_steps:  # a reopened run holds this epoch already: once, never twice
            return
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in event.items()
                   if k not in _NOT_METRICS and isinstance(v, (int, float)) and not isinstance(v, bool)]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def _end(self, event: dict[str, Any]) -> None:
        run_id = self.run_id
        assert run_id is not None
        restarts = event.get("restarts") or []
        self.client.set_tag(run_id, "orca.restarts", json.dumps(restarts))
        if self._changed:  # a reopened run: what this fit ran with that its parameters cannot say
            run = self.client.get_run(run_id)
            resumes = json.loads(run.data.tags.get("orca.resumes", "[]"))
            resumes.append(self._changed)
            self.client.set_tag(run_id, "orca.resumes", json.dumps(resumes)[:5000])
        if self.log_model:
            try:
                self._log_model(run_id)
            except BaseException as exc:  # the fit succeeded: the run ends, saying what was not logged
                self.client.set_tag(run_id, "orca.error", f"logging the model failed: {exc}"[:5000])
                self.client.set_terminated(run_id, "FAILED")
                self.run_id = None
                raise
        self.client.set_terminated(run_id, "FINISHED")
        self.run_id = None

    def _log_model(self, run_id: str) -> None:
        """The trained model as the run's ``model`` artifact (see the module doc)."""
        with tempfile.TemporaryDirectory(prefix="orca-mlflow-") as tmp:
            model_dir = os.path.join(tmp, "model")
            if not self.estimator.save_mlflow_model(model_dir):  # the framework's MLflow flavour
                os.makedirs(model_dir)
            # Orca's data-only checkpoint (an Estimator with a format of its own names its file)
            name = getattr(self.estimator, "mlflow_checkpoint_name", "orca.ckpt")
            self.estimator.save_checkpoint(os.path.join(model_dir, name))
            self.client.log_artifacts(run_id, model_dir, artifact_path="model")
