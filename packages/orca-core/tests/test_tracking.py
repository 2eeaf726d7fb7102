"""MLflow tracking of fit (est.set_mlflow), against a real sqlite tracking store, read back with
MlflowClient: one run per fit, nested under the caller's run, the optimizer's hyper-parameters, the
History's merged metrics, the model as an artifact that load_checkpoint reads, one run (not two)
for a fit that recovered from a killed worker, and for a fit resumed from a checkpoint."""

import sys
from typing import Any

import cloudpickle
import mlflow
import numpy as np
import pytest
from test_toy_framework import NUM_FEATURES, NumpyEstimator

from orca.core.engine import OrcaWorkerError
from orca.core.engine.callbacks import ModelCheckpoint
from orca.core.testing.failures import KillOnce

pytestmark = pytest.mark.timeout(240)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    client.create_experiment("orca", artifact_location=str(tmp_path / "artifacts"))
    return uri, client


def regression(rows=40):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(rows, NUM_FEATURES))
    return {"x": x, "y": (x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5)[:, None]}


def test_a_fit_is_one_run_with_its_params_epochs_and_model(ray_runtime: Any, store: Any, tmp_path: Any) -> None:
    uri, client = store
    data = regression()
    est = NumpyEstimator.from_numpy(backend="ray")
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca", run_name="toy")
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run(experiment_id=client.get_experiment_by_name("orca").experiment_id) as parent:
            hist = est.fit(data, epochs=3, batch_size=8, validation_data=data)
        state = est.get_state()
    finally:
        mlflow.set_tracking_uri("")
        est.shutdown()
    (run_id,) = logger.run_ids
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "toy"
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id  # nested under the caller's run
    assert run.data.params["backend"] == "ray" and run.data.params["batch_size"] == "8"
    assert run.data.params["epochs"] == "3" and run.data.params["num_workers"] == str(est.num_workers)
    # the optimizer's hyper-parameters as rank 0's runner reports them (optimizer_params), scalars only
    assert run.data.params["optimizer"] == "GradientDescent" and run.data.params["optimizer.lr"] == "0.05"
    assert "optimizer.schedule" not in run.data.params
    for key in ("loss", "val_loss"):
        points = client.get_metric_history(run_id, key)
        assert [p.step for p in points] == [1, 2, 3]
        np.testing.assert_allclose([p.value for p in points], [h[key] for h in hist], rtol=1e-12)
    assert run.data.tags["orca.restarts"] == "[]"
    local = client.download_artifacts(run_id, "model/orca.ckpt", str(tmp_path))
    fresh = NumpyEstimator.from_numpy(backend="ray")
    fresh.load_checkpoint(local)
    for name, value in state.items():
        np.testing.assert_array_equal(fresh.get_state()[name], value)


def test_a_recovered_fit_is_one_run_and_a_failed_one_ends_failed(ray_runtime: Any, store: Any,
                                                                  tmp_path: Any) -> None:
    uri, client = store
    data = regression(32)
    est = NumpyEstimator.from_numpy(backend="ray")
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca", log_model=False)
    try:
        hist = est.fit(data, epochs=3, batch_size=8, callbacks=[KillOnce(str(tmp_path / "killed"))], max_failures=1)
        with pytest.raises(OrcaWorkerError, match="4 features"):  # a width the model rejects, in the workers
            est.fit({"x": data["x"][:, :2], "y": data["y"]}, epochs=1, batch_size=8)
    finally:
        est.shutdown()
    recovered, failed = logger.run_ids
    assert [r["epoch"] for r in hist.restarts] == [2]
    run = client.get_run(recovered)
    assert run.info.status == "FINISHED"
    assert [p.step for p in client.get_metric_history(recovered, "loss")] == [1, 2, 3]  # epoch 2 once
    assert '"epoch": 2' in run.data.tags["orca.restarts"]
    bad = client.get_run(failed)
    assert bad.info.status == "FAILED" and bad.data.tags["orca.error"].startswith("OrcaWorkerError")
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [failed, recovered]


class _UnsavableEstimator(NumpyEstimator):
    def save_mlflow_model(self, path: str) -> bool:
        raise OSError("disk full")


def test_a_model_that_cannot_be_logged_ends_the_run_failed_and_the_fit_keeps_its_result(ray_runtime: Any,
                                                                                         store: Any) -> None:
    uri, client = store
    est = _UnsavableEstimator.from_numpy(backend="ray")
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca")
    try:
        hist = est.fit(regression(), epochs=2, batch_size=8)
    finally:
        est.shutdown()
    assert [h["epoch"] for h in hist] == [1, 2]  # the fit itself succeeded
    run = client.get_run(logger.run_ids[0])
    assert run.info.status == "FAILED"
    assert run.data.tags["orca.error"] == "logging the model failed: disk full"
    assert [p.step for p in client.get_metric_history(run.info.run_id, "loss")] == [1, 2]


def test_a_fit_resumed_from_a_checkpoint_continues_its_run_with_every_epoch_once(ray_runtime: Any, store: Any,
                                                                              tmp_path: Any) -> None:
    """A tracked fit of 3 epochs writes ModelCheckpoint files (in the workers). Resuming from epoch 2's
    (load_checkpoint, fit 2 epochs) reopens that run: epoch 3, which it holds already, is not logged
    again, epoch 4 is. save_checkpoint (on the driver) then carries the run too: another Estimator
    that loads it and fits epoch 5 continues the same run. One run in the experiment, FINISHED, with
    epochs 1-5 once each, and each resume's changed parameters in its ``orca.resumes`` tag."""
    import json

    uri, client = store
    data = regression(32)
    est = NumpyEstimator.from_numpy(backend="ray")
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca", log_model=False)
    try:
        first = est.fit(data, epochs=3, batch_size=8, callbacks=[ModelCheckpoint(str(tmp_path / "ckpt-{epoch}.ckpt"))])
        est.load_checkpoint(str(tmp_path / "ckpt-2.ckpt"))  # older than the run's last epoch
        second = est.fit(data, epochs=2, batch_size=8)
        est.save_checkpoint(str(tmp_path / "final.ckpt"))
    finally:
        est.shutdown()
    other = NumpyEstimator.from_numpy(backend="ray")
    other_logger = other.set_mlflow(tracking_uri=uri, experiment_name="orca", log_model=False)
    try:
        other.load_checkpoint(str(tmp_path / "final.ckpt"))
        third = other.fit(data, epochs=1, batch_size=8)
    finally:
        other.shutdown()
    assert [h["epoch"] for h in [*first, *second, *third]] == [1, 2, 3, 3, 4, 5]
    (run_id,) = logger.run_ids
    assert other_logger.run_ids == [run_id]
    run = client.get_run(run_id)
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [run_id]  # no duplicate
    assert run.info.status == "FINISHED"
    points = client.get_metric_history(run_id, "loss")
    assert [p.step for p in points] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([p.value for p in points], [h["loss"] for h in [*first, second[1], *third]],
                               rtol=1e-12)
    assert run.data.params["start_epoch"] == "0" and run.data.params["epochs"] == "3"  # the first fit's
    resumes = json.loads(run.data.tags["orca.resumes"])
    assert [(r["start_epoch"], r["epochs"]) for r in resumes] == [("2", "2"), ("4", "1")]
