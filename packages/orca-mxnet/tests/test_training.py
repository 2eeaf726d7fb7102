"""orca.mxnet trains what one process would train: a known SGD step, identical replicas, uneven
and empty shards, every input type, the reference's example and Gluon metrics."""

import numpy as np
import pandas as pd
import pytest
from conftest import accuracy, classifier_creator, l2_loss, linear_creator, plain_predict, softmax_loss

from orca.core.data import XShards
from orca.mxnet import Estimator, create_config

pytestmark = pytest.mark.timeout(300)


def _sgd_config(lr):
    return create_config(optimizer="sgd", optimizer_params={"learning_rate": lr}, seed=0)


def test_one_global_batch_sgd_step_equals_the_single_process_step(orca_context, backend):
    """L2Loss = (p - y)^2 / 2 averaged over the global batch of 8: one SGD step from w = 0, b = 0 moves
    w by lr * mean((y - 0) * x) and b by lr * mean(y), exactly as one process on all 8 rows would."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.25).astype(np.float32)
    lr = 0.1
    est = Estimator.from_mxnet(config=_sgd_config(lr), model_creator=linear_creator(init_w=np.zeros(4)),
                               loss_creator=l2_loss, backend=backend, workers_per_node=2)
    try:
        est.fit((x, y), epochs=1, batch_size=8)
        params = est.get_state()["params"]
        w, b = params["0.weight"].reshape(-1), params["0.bias"].reshape(-1)
        np.testing.assert_allclose(w, lr * (y[:, None] * x).mean(0), atol=1e-6)
        np.testing.assert_allclose(b, [lr * y.mean()], atol=1e-6)
        digests = est.worker_weight_digests()
        assert len(digests) == 2 and len(set(digests)) == 1
    finally:
        est.shutdown()


def test_skewed_and_empty_shards_train_as_one_process(orca_context, backend):
    """Shards of 0, 3 and 29 rows on 2 workers train the same weights as the same global batches in
    one process (a model that knows its input shape: a worker may see no rows first)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x.sum(1) + 1).astype(np.float32)
    shards = XShards.from_list([{"x": x[:0], "y": y[:0]}, {"x": x[:3], "y": y[:3]}, {"x": x[3:], "y": y[3:]}],
                               backend="local")
    est = Estimator.from_mxnet(config=_sgd_config(0.05), model_creator=linear_creator(init_w=np.zeros(4)),
                               loss_creator=l2_loss, backend=backend, workers_per_node=2)
    one = Estimator.from_mxnet(config=_sgd_config(0.05), model_creator=linear_creator(init_w=np.zeros(4)),
                               loss_creator=l2_loss, backend=backend, workers_per_node=1)
    try:
        hist = est.fit(shards, epochs=3, batch_size=32)
        got = est.get_state()["params"]
        est.shutdown()  # one worker group at a time on a small machine
        ref = one.fit((x, y), epochs=3, batch_size=32)
        want = one.get_state()["params"]
        for k in want:
            np.testing.assert_allclose(got[k], want[k], atol=1e-5)
        assert hist[-1]["num_samples"] == 32
        np.testing.assert_allclose(hist.history["train_loss"], ref.history["train_loss"], rtol=1e-4)
    finally:
        est.shutdown()
        one.shutdown()


def test_dataframe_fit_evaluate_predict_with_gluon_metrics(orca_context, spark, backend):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) > 0).astype(np.float32)
    df = spark.createDataFrame(pd.DataFrame({"id": np.arange(200), "x": list(x), "y": y})).repartition(3)

    est = Estimator.from_mxnet(config=create_config(optimizer="adam", optimizer_params={"learning_rate": 0.05}),
                               model_creator=classifier_creator(16), loss_creator=softmax_loss,
                               eval_metrics_creator=accuracy,
                               backend=backend, workers_per_node=2)
    try:
        hist = est.fit(df, epochs=6, batch_size=32, feature_cols=["x"], label_cols=["y"], validation_data=df)
        assert hist.history["train_loss"][-1] < hist.history["train_loss"][0]
        assert hist.history["val_accuracy"][-1] > 0.85
        stats = est.evaluate(df, batch_size=64, feature_cols=["x"], label_cols=["y"])
        assert stats["num_samples"] == 200
        out = est.predict(df, feature_cols=["x"]).toPandas().sort_values("id")
        logits = np.stack(out["prediction"].to_numpy())
        net = est.get_model()
        np.testing.assert_allclose(logits, plain_predict(net, np.stack(out["x"].to_numpy())), atol=1e-5)
        acc = float(((logits.argmax(1)) == out["y"].to_numpy()).mean())
        assert stats["val_accuracy"] == pytest.approx(acc, abs=1e-6)
    finally:
        est.shutdown()


def test_reference_example_with_a_data_creator(orca_context):
    """The reference's MXNet example as written: create_config, creators taking (config, kv) and a
    DataIter sharded by kv.rank, num_workers=2."""
    import mxnet as mx

    def get_train_data_iter(config, kv):
        rng = np.random.default_rng(kv.rank)
        x = rng.normal(size=(64 + 8 * kv.rank, 4)).astype(np.float32)  # uneven shards
        y = (x[:, 0] > 0).astype(np.float32)
        return mx.io.NDArrayIter(x, y, batch_size=config["batch_size"], shuffle=True)

    def get_model(config):
        from mxnet import gluon

        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(2))
        return net

    def get_loss(config):
        from mxnet import gluon

        return gluon.loss.SoftmaxCrossEntropyLoss()

    def get_metrics(config):
        return mx.metric.Accuracy()

    config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.1}, log_interval=2, seed=42,
                           extra_config={"batch_size": 16})
    est = Estimator.from_mxnet(config=config, model_creator=get_model, loss_creator=get_loss,
                               eval_metrics_creator=get_metrics, num_workers=2)
    try:
        hist = est.fit(get_train_data_iter, epochs=4, batch_size=32)
        assert len(hist) == 4 and hist.history["accuracy"][-1] > 0.7
        assert hist[-1]["num_samples"] == 64 + 72
        assert len(set(est.worker_weight_digests())) == 1
    finally:
        est.shutdown()


def test_a_gluon_dataloader_creator_with_uneven_shards_takes_the_global_batch_step(orca_context, backend):
    """Rank 0 reads 3 rows, rank 1 reads 5 (one batch each): the step is the 8-row batch's mean
    gradient, as in one process."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    y = (x @ np.array([0.5, 1.0, -1.0, 2.0], np.float32)).astype(np.float32)

    def creator(config, kv):
        from mxnet import gluon

        rows = slice(0, 3) if kv.rank == 0 else slice(3, 8)
        if kv.num_workers == 1:
            rows = slice(0, 8)
        return gluon.data.DataLoader(gluon.data.ArrayDataset(x[rows], y[rows]), batch_size=8)

    lr = 0.1
    est = Estimator.from_mxnet(config=_sgd_config(lr), model_creator=linear_creator(init_w=np.zeros(4)),
                               loss_creator=l2_loss, backend=backend, workers_per_node=2)
    try:
        hist = est.fit(creator, epochs=1, batch_size=8)
        w = est.get_state()["params"]["0.weight"].reshape(-1)
        np.testing.assert_allclose(w, lr * (y[:, None] * x).mean(0), atol=1e-6)
        assert hist[-1]["num_samples"] == 8
    finally:
        est.shutdown()


def test_native_loaders_with_different_batch_counts_equal_one_process(orca_context, backend):
    """Rank 0 reads 13 rows (batches of 4, 4, 4, 1), rank 1 reads 6 (4, 2): the ranks take four
    lock-step steps, rank 1 empty ones at the end. No row is padded or repeated, and w and b equal
    one process's SGD over the same four global batches to 1e-6."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(19, 4)).astype(np.float32)
    y = (x @ np.array([0.5, 1.0, -1.0, 2.0], np.float32) + 0.5).astype(np.float32)

    def creator(config, kv):
        from mxnet import gluon

        rows = slice(0, 13) if kv.rank == 0 else slice(13, 19)
        return gluon.data.DataLoader(gluon.data.ArrayDataset(x[rows], y[rows]), batch_size=config["batch_size"])

    lr = 0.1
    est = Estimator.from_mxnet(config=_sgd_config(lr), model_creator=linear_creator(init_w=np.zeros(4)),
                               loss_creator=l2_loss, backend=backend, workers_per_node=2)
    try:
        hist = est.fit(creator, epochs=2, batch_size=8)
        state = est.get_state()["params"]
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [19, 19]
    steps = [[*range(0, 4), *range(13, 17)], [*range(4, 8), *range(17, 19)], list(range(8, 12)), [12]]
    w, b = np.zeros(4), 0.0
    for _ in range(2):
        for rows in steps:
            err = x[rows].astype(np.float64) @ w + b - y[rows]
            w, b = w - lr * (err[:, None] * x[rows]).mean(0), b - lr * err.mean()
    np.testing.assert_allclose(state["0.weight"].reshape(-1), w, atol=1e-6)
    np.testing.assert_allclose(state["0.bias"].reshape(-1), [b], atol=1e-6)
