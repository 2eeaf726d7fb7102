"""``orca.tf.data.Dataset`` (the reference's ``bigdl.orca.data.tf.data.Dataset``): an XShards' rows
mapped by tf.data functions, trained, evaluated and predicted as the XShards of the mapped rows."""

import numpy as np
import pytest
from conftest import linear_creator, regression

from orca.core.data import XShards
from orca.tf import Estimator
from orca.tf.data import Dataset


@pytest.mark.timeout(300)
def test_a_mapped_dataset_trains_evaluates_and_predicts_as_the_xshards_of_its_mapped_rows(orca_context):
    """fit (with validation, the reference's steps_per_epoch), evaluate (its num_steps) and predict
    of ``from_tensor_slices(shards).map(scale)`` give exactly the numbers of the already-scaled
    XShards; predict gives, as the reference's, the XShards of the mapped rows with ``prediction``."""
    x, y = regression(rows=48)
    shards = XShards.partition({"x": x, "y": y}, num_shards=2, backend="spark")

    def scale(e):  # (nested: Spark's own cloudpickle sends it by value)
        return e["x"] * 2.0, e["y"]

    ds = Dataset.from_tensor_slices(shards).map(scale)
    mapped = XShards.partition({"x": x * 2.0, "y": y}, num_shards=2, backend="spark")

    got = ds.get_xshards().collect()
    assert [type(s) for s in got] == [tuple, tuple]
    np.testing.assert_array_equal(np.concatenate([s[0] for s in got]), x * 2.0)
    np.testing.assert_array_equal(np.concatenate([s[1] for s in got]), y)

    runs = []
    for data in (ds, mapped):
        est = Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend="spark", workers_per_node=1,
                                   verbose=0)
        try:
            hist = est.fit(data, epochs=2, batch_size=8, steps_per_epoch=6, validation_data=data, shuffle=False)
            stats = est.evaluate(data, batch_size=8, num_steps=6)
            pred = est.predict(data, batch_size=8)
            runs.append((hist.history, stats, pred.collect(), est.get_model().get_weights()))
        finally:
            est.shutdown()
    (hist, stats, pred, weights), (want_hist, want_stats, want_pred, want_weights) = runs
    assert hist["loss"] == want_hist["loss"] and hist["val_loss"] == want_hist["val_loss"]
    assert hist["num_samples"] == [48, 48] and want_hist["loss"][1] < want_hist["loss"][0]
    assert stats == want_stats and stats["num_samples"] == 48
    for w, want in zip(weights, want_weights, strict=True):
        np.testing.assert_array_equal(w, want)
    assert isinstance(pred, list) and len(pred) == 2
    assert all(set(s) == {"x", "y", "prediction"} for s in pred)
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in pred]), x * 2.0)
    np.testing.assert_array_equal(np.concatenate([s["prediction"] for s in pred]),
                                  np.concatenate([s["prediction"] for s in want_pred]))
    w, b = weights
    np.testing.assert_allclose(np.concatenate([s["prediction"] for s in pred]).reshape(-1), (x * 2.0) @ w[:, 0] + b[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(120)
def test_bad_datasets_are_refused_on_the_driver_with_the_fix():
    """Not an XShards, a map function that raises, and elements without features are refused on the
    driver before any worker starts, each with its message (local XShards: the checks are the same
    for every form, and no Spark task has to import TensorFlow for them)."""
    x, y = regression(rows=8)
    with pytest.raises(TypeError, match=r"orca XShards, got ndarray; build one with orca\.core\.data\.XShards\."
                                        r"partition\(data\)"):
        Dataset.from_tensor_slices(x)
    with pytest.raises(TypeError, match="a function of an element"):
        Dataset.from_tensor_slices(XShards.partition(x, num_shards=1, backend="local")).map("scale")

    shards = XShards.partition({"item": x, "label": y}, num_shards=2, backend="local")

    def needs_a_label_column(e):
        raise ValueError(f"no 'y' among {sorted(e)}")

    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", workers_per_node=2, verbose=0)
    try:
        with pytest.raises(ValueError, match=r"no 'y' among \['item', 'label'\]"):
            est.fit(Dataset.from_tensor_slices(shards).map(needs_a_label_column), epochs=1, batch_size=4)
        with pytest.raises(TypeError, match=r"data: the Dataset's elements are dicts with keys \['item', 'label'\] "
                                            r"and no 'x' key; map the elements to \(features, labels\) tuples"):
            est.evaluate(Dataset.from_tensor_slices(shards), batch_size=4)
        pairs = Dataset.from_tensor_slices(shards).map(lambda e: (e["item"], e["label"]))
        with pytest.raises(TypeError, match="validation_data: the Dataset's features are a dict"):
            est.fit(pairs, epochs=1, batch_size=4,
                    validation_data=pairs.map(lambda f, lab: ({"a": f}, lab)))
        with pytest.raises(ValueError, match="'y'"):  # features only: fit names the missing labels
            est.fit(pairs.map(lambda f, lab: f), epochs=1, batch_size=4)
        assert est._group is None or not est._group.started  # all refused on the driver: no worker started
    finally:
        est.shutdown()


@pytest.mark.timeout(300)
def test_the_graph_estimator_fits_and_predicts_a_dataset_of_pandas_shards(orca_context):
    """The reference's graph-Estimator tests (``test_estimator_graph_fit_dataset`` /
    ``_predict_dataset``): pandas shards mapped to ``((a, b), label)`` feed two placeholders; one
    global batch of all 12 rows is one plain SGD step, as numpy computes it, and predict gives the
    mapped rows with ``prediction``."""
    import pandas as pd
    import tensorflow as tf

    v1 = tf.compat.v1
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.normal(size=12), "b": rng.normal(size=12)}, dtype=np.float32)
    frame["label"] = (2 * frame["a"] - frame["b"] + 0.5).astype(np.float32)
    shards = XShards.from_list([frame.iloc[:7], frame.iloc[7:]], backend="spark")
    ds = Dataset.from_tensor_slices(shards).map(lambda e: ((e["a"], e["b"]), e["label"]))
    g = tf.Graph()
    with g.as_default():
        a, b, y = (v1.placeholder(tf.float32, (None,), name=n) for n in ("a", "b", "y"))
        w = v1.get_variable("w", (2,), initializer=v1.constant_initializer([0.1, 0.2]))
        c = v1.get_variable("c", (), initializer=v1.constant_initializer(0.3))
        pred = w[0] * a + w[1] * b + c
        loss = tf.reduce_mean((pred - y) ** 2)
    est = Estimator.from_graph(inputs=[a, b], outputs=pred, labels=y, loss=loss,
                               optimizer=v1.train.GradientDescentOptimizer(0.1), workers_per_node=1, verbose=0)
    try:
        hist = est.fit(ds, epochs=1, batch_size=12, shuffle=False)
        got = est.get_model()
        out = est.predict(ds, batch_size=12).collect()
    finally:
        est.shutdown()
    feats, lab = frame[["a", "b"]].to_numpy(), frame["label"].to_numpy()
    err = feats @ np.array([0.1, 0.2], np.float32) + 0.3 - lab
    assert hist[0]["num_samples"] == 12 and hist[0]["loss"] == pytest.approx(float(np.mean(err**2)), rel=1e-5)
    np.testing.assert_allclose(got["w"], [0.1, 0.2] - 0.1 * 2 * feats.T @ err / 12, atol=1e-6)
    np.testing.assert_allclose(got["c"], 0.3 - 0.1 * 2 * err.mean(), atol=1e-6)
    assert [len(s["prediction"]) for s in out] == [7, 5] and all(set(s) == {"x", "y", "prediction"} for s in out)
    np.testing.assert_allclose(np.concatenate([s["prediction"] for s in out]), feats @ got["w"] + got["c"],
                               atol=1e-6)
