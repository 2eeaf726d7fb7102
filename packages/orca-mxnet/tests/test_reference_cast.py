"""Data reaches the Gluon model in the model's float type, as the reference's ``mx.nd.array`` made
every array float32: an XShards of float64 features and int64 labels (the reference's
``test_xshards_gluon``) fits a float32 model and predicts what the plain model gives on float32
inputs; a model cast to float64 keeps float64."""

import numpy as np
import pytest
from conftest import accuracy, classifier_creator, l2_loss, plain_predict, softmax_loss

from orca.core.data import XShards
from orca.mxnet import Estimator, create_config

pytestmark = pytest.mark.timeout(300)


def _predictions(est, shards):
    return np.concatenate([s["prediction"] for s in est.predict(shards).collect()])


def test_float64_features_and_int_labels_train_a_float32_model(orca_context):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(96, 4))  # float64, as np.array(df["data"].values.tolist()) gives
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0]) > 0).astype(np.int64)
    assert x.dtype == np.float64
    train = XShards.partition({"x": x, "y": y}, num_shards=3)
    est = Estimator.from_mxnet(config=create_config(optimizer="adam", optimizer_params={"learning_rate": 0.05},
                                                    seed=42),
                               model_creator=classifier_creator(8), loss_creator=softmax_loss,
                               eval_metrics_creator=accuracy, validation_metrics_creator=accuracy,
                               backend="ray", workers_per_node=2)
    try:
        hist = est.fit(train, validation_data=train, epochs=3, batch_size=16)
        assert np.isfinite(hist.history["train_loss"]).all()
        assert hist.history["train_loss"][-1] < hist.history["train_loss"][0]
        assert 0.0 <= hist.history["val_accuracy"][-1] <= 1.0
        got = _predictions(est, XShards.partition({"x": x}, num_shards=2))
        net = est.get_model()
    finally:
        est.shutdown()
    assert {np.dtype(p.dtype) for p in net.collect_params().values()} == {np.dtype(np.float32)}
    assert got.dtype == np.float32 and got.shape == (96, 2)
    np.testing.assert_allclose(got, plain_predict(net, x.astype(np.float32)), atol=1e-5)


def _float64_linear(config):
    import mxnet as mx
    from mxnet import gluon

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(1, in_units=4))
    net.initialize()
    net.cast("float64")
    net[0].weight.set_data(mx.nd.array(np.full((1, 4), 0.5), dtype="float64"))
    net[0].bias.set_data(mx.nd.array([0.5], dtype="float64"))
    return net


def test_a_model_cast_to_float64_gets_float64_data(orca_context):
    """A float64 model is fed float64 (not the reference's float32): its predictions carry
    float64 precision, x @ w + b exactly for w = 0.5, b = 0.5 before training."""
    x = np.linspace(-1.0, 1.0, 40).reshape(10, 4) + 1e-9  # a difference float32 cannot hold
    est = Estimator.from_mxnet(config=create_config(seed=0), model_creator=_float64_linear, loss_creator=l2_loss,
                               backend="ray", workers_per_node=2)
    try:
        got = _predictions(est, XShards.partition({"x": x}, num_shards=2))
    finally:
        est.shutdown()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.reshape(-1), x.sum(1) * 0.5 + 0.5, rtol=0, atol=1e-12)
