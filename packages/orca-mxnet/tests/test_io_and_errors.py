"""Saving in MXNet's own format, checkpoints, and bad input rejected on the driver with the fix."""

import time

import numpy as np
import pytest
from conftest import l2_loss, linear_creator, plain_predict

from orca.core.engine.errors import OrcaWorkerError
from orca.mxnet import Estimator, ModelCheckpoint, create_config

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def xy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    return x, (x.sum(1) - 0.5).astype(np.float32)


def _est(backend="ray", **kw):
    return Estimator.from_mxnet(config=create_config(optimizer_params={"learning_rate": 0.05}, seed=0),
                                model_creator=linear_creator(), loss_creator=l2_loss, backend=backend,
                                workers_per_node=2, **kw)


def test_saved_parameters_open_with_plain_gluon_and_load_back(orca_context, xy, tmp_path):
    x, y = xy
    est = _est()
    try:
        est.fit((x, y), epochs=3, batch_size=16, shuffle=False)
        path = str(tmp_path / "model.params")
        est.save(path)
        before = est.predict(x)
    finally:
        est.shutdown()
    net = linear_creator()({})
    net.load_parameters(path)  # plain MXNet
    np.testing.assert_allclose(plain_predict(net, x), before, atol=1e-6)
    fresh = _est(backend="spark")
    fresh.load(path)
    np.testing.assert_allclose(fresh.predict(x), before, atol=1e-6)
    fresh.fit((x, y), epochs=1, batch_size=16, shuffle=False)  # training continues from the loaded weights
    resumed = fresh.predict(x)
    fresh.shutdown()
    straight = _est()
    try:  # plain SGD keeps no optimizer state: 3 epochs, save, load, 1 more == 4 epochs in one go
        straight.fit((x, y), epochs=4, batch_size=16, shuffle=False)
        np.testing.assert_allclose(resumed, straight.predict(x), atol=1e-5)
    finally:
        straight.shutdown()


def test_checkpoints_by_epoch_and_resume(orca_context, xy, tmp_path):
    x, y = xy
    est = _est()
    try:
        est.fit((x, y), epochs=2, batch_size=16,
                callbacks=[ModelCheckpoint(str(tmp_path / "ckpt-{epoch}"))])
        latest = Estimator.latest_checkpoint(str(tmp_path))
        assert latest.endswith("ckpt-2")
        want = est.predict(x)
    finally:
        est.shutdown()
    again = _est()
    try:
        again.load_checkpoint(latest)
        np.testing.assert_allclose(again.predict(x), want, atol=1e-6)
    finally:
        again.shutdown()


def test_load_of_a_file_for_another_model_names_the_parameters(orca_context, tmp_path, xy):
    import mxnet as mx

    path = str(tmp_path / "other.params")
    mx.nd.save(path, {"0.weight": mx.nd.zeros((1, 7)), "0.bias": mx.nd.zeros((1,))})
    est = _est()
    with pytest.raises(ValueError, match=r"'0.weight' has shape \(1, 4\) in the model and \(1, 7\)"):
        est.load(path)
    with pytest.raises(FileNotFoundError):
        est.load(str(tmp_path / "missing.params"))


@pytest.mark.parametrize("kw, match", [
    ({"model_creator": "net"}, "model_creator must be a function"),
    ({"loss_creator": 3}, "loss_creator must be a function"),
    ({"eval_metrics_creator": "acc"}, "eval_metrics_creator must be a function"),
    ({"num_workers": 0}, "num_workers must be a positive int"),
    ({"backend": "horovod"}, "backend='horovod' is not supported"),
])
def test_bad_arguments_are_rejected_at_construction(kw, match):
    args = {"config": create_config(), "model_creator": linear_creator(), "loss_creator": l2_loss, **kw}
    with pytest.raises((TypeError, ValueError), match=match):
        Estimator.from_mxnet(**args)


def test_wrong_columns_and_data_fail_on_the_driver_fast(orca_context, spark, xy):
    import pandas as pd

    x, y = xy
    df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y}))
    est = _est(backend="spark")
    t = time.perf_counter()
    with pytest.raises(ValueError, match="nope"):
        est.fit(df, epochs=1, batch_size=16, feature_cols=["nope"], label_cols=["y"])
    with pytest.raises(TypeError, match="not supported"):
        est.fit("data.csv", epochs=1)
    assert time.perf_counter() - t < 30


def test_a_shape_the_model_cannot_take_is_one_clear_error_from_the_workers(orca_context, backend):
    est = _est(backend=backend)
    bad = np.zeros((16, 7), np.float32)
    try:
        with pytest.raises((OrcaWorkerError, ValueError), match="input shape"):
            est.fit((bad, np.zeros(16, np.float32)), epochs=1, batch_size=8)
    finally:
        est.shutdown()


def test_an_mlflow_run_holds_a_pyfunc_model_of_the_exported_block(orca_context, xy, tmp_path):
    """set_mlflow against a real sqlite tracking store: MLflow has no MXNet flavour, so the run's
    ``model`` artifact is a pyfunc Model of the block Gluon exported (symbol + parameters, read back
    by orca.mxnet._mlflow), which ``mlflow.pyfunc.load_model`` opens and which predicts as the
    Estimator does; Orca's checkpoint sits beside it."""
    import mlflow

    from orca.core.testing.tracking import fit_and_fetch_model

    x, y = xy
    est = Estimator.from_mxnet(config=create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.05}, seed=0),
                               model_creator=linear_creator(), loss_creator=l2_loss, workers_per_node=2)
    try:
        local = fit_and_fetch_model(est, lambda: est.fit((x, y), epochs=2, batch_size=16), tmp_path,
                                    params={"optimizer": "sgd", "optimizer.learning_rate": 0.05})
        got = mlflow.pyfunc.load_model(local).predict(x)
        np.testing.assert_allclose(np.asarray(got).reshape(-1), np.asarray(est.predict(x)).reshape(-1),
                                   rtol=1e-5, atol=1e-5)
    finally:
        est.shutdown()
