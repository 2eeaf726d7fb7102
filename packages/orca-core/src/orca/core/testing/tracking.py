"""A real MLflow tracking store for tests: a sqlite database and an artifact folder under a
temporary directory, and the run's logged model fetched back (needs ``mlflow``, sqlalchemy and
alembic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def mlflow_store(tmp_path: Path, experiment: str = "orca") -> tuple[str, Any]:
    """``(tracking URI, MlflowClient)`` of a fresh sqlite store with ``experiment`` created, its
    artifacts under ``tmp_path/artifacts``."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    client.create_experiment(experiment, artifact_location=str(tmp_path / "artifacts"))
    return uri, client


def fit_and_fetch_model(est: Any, fit: Any, tmp_path: Path, params: dict[str, Any] | None = None) -> str:
    """Log ``fit()`` of ``est`` to a fresh store (:func:`mlflow_store`) and return the local folder
    of the one run's ``model`` artifact, after checking it is an MLflow Model (an ``MLmodel``
    file) with Orca's checkpoint (``orca.ckpt``) beside it, and that the run has ``params``
    (a float: that number within 1e-6; anything else: its text), e.g. the optimizer's
    ``{"optimizer": "SGD", "optimizer.lr": 0.1}``."""
    uri, client = mlflow_store(tmp_path)
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca")
    fit()
    (run_id,) = logger.run_ids
    logged = client.get_run(run_id).data.params
    for key, want in (params or {}).items():
        assert key in logged, f"run parameter {key!r} missing: {sorted(logged)}"
        if isinstance(want, float):
            assert abs(float(logged[key]) - want) <= 1e-6 * max(1.0, abs(want)), (key, logged[key], want)
        else:
            assert logged[key] == str(want), (key, logged[key], want)
    files = {f.path for f in client.list_artifacts(run_id, "model")}
    assert {"model/MLmodel", "model/orca.ckpt"} <= files, files
    return str(client.download_artifacts(run_id, "model", str(tmp_path / "downloaded")))
