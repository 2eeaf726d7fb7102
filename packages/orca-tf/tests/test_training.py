"""Training semantics: exact global-batch SGD, replicas in step, both Keras flavours, uneven data."""

import numpy as np
import pandas as pd
import pytest
from conftest import legacy_linear_creator, linear_creator, regression

from orca.core.data import XShards
from orca.tf import Estimator

pytestmark = pytest.mark.timeout(300)


def sgd_step_by_hand(est_model_weights, x, y, lr):
    w, b = est_model_weights
    pred = x @ w[:, 0] + b[0]
    err = pred - y
    grad_w = 2.0 / len(x) * (x.T @ err)
    grad_b = 2.0 / len(x) * err.sum()
    return w[:, 0] - lr * grad_w, b[0] - lr * grad_b


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_one_global_batch_sgd_step_equals_the_single_process_step(orca_context, all_backends, flavour):
    backend = all_backends
    creator = linear_creator(lr=0.1) if flavour == "keras3" else legacy_linear_creator(lr=0.1)
    x, y = regression(rows=40)
    w0 = creator({}).get_weights()
    est = Estimator.from_keras(model_creator=creator, backend=backend, workers_per_node=2, verbose=0)
    try:
        est.fit((x, y), epochs=1, batch_size=40, shuffle=False)
        digests = est.worker_weight_digests()
        assert len(digests) == 2 and len(set(digests)) == 1
        w1, b1 = est.get_model().get_weights()
    finally:
        est.shutdown()
    want_w, want_b = sgd_step_by_hand(w0, x, y, 0.1)
    np.testing.assert_allclose(w1[:, 0], want_w, atol=1e-5)
    np.testing.assert_allclose(b1[0], want_b, atol=1e-5)


def test_skewed_and_empty_shards_train_as_one_process(orca_context, all_backends):
    """One shard for two workers (a Spark backend's second worker holds nothing), global batches exact."""
    backend = all_backends
    x, y = regression(rows=30)
    shards = XShards.partition({"x": x, "y": y}, num_shards=1, backend="spark")
    est = Estimator.from_keras(model_creator=linear_creator(lr=0.1), backend=backend, workers_per_node=2, verbose=0)
    try:
        hist = est.fit(shards, epochs=2, batch_size=7, shuffle=False)
        assert hist[-1]["num_samples"] == 30 and hist[-1]["batch_count"] == 5
        assert len(set(est.worker_weight_digests())) == 1
        got = est.get_model().get_weights()
    finally:
        est.shutdown()
    import keras

    plain = linear_creator(lr=0.1)({})
    # the lock-step plan: ray cuts 15 + 15 rows (3 + 3 a step), spark/bigdl give all 30 to rank 0 (6 a step)
    if backend == "ray":
        steps = [np.r_[3 * k:3 * k + 3, 15 + 3 * k:18 + 3 * k] for k in range(5)]
    else:
        steps = [np.arange(6 * k, 6 * k + 6) for k in range(5)]
    for _ in range(2):
        for sl in steps:
            with __import__("tensorflow").GradientTape() as tape:
                loss = keras.losses.mean_squared_error(y[sl], plain(x[sl])[:, 0])
            plain.optimizer.apply(tape.gradient(loss, plain.trainable_variables), plain.trainable_variables)
    for a, b in zip(got, plain.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def reference_model_creator(config):
    """The reference's TF2 example: a compiled LeNet-style model (on 8x8 digits)."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.RMSprop(config.get("lr", 1e-2)),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def digits_dataset(rows, batch_size):
    """A slice of scikit-learn's digits as a batched tf.data.Dataset (tfds' MNIST in the guide)."""
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images[rows] / 16.0).astype("float32")[..., None]
    return tf.data.Dataset.from_tensor_slices((x, digits.target[rows].astype("int64"))).batch(batch_size)


def train_data_creator(config, batch_size):
    """The reference's data creator with a local data set in place of tfds.load."""
    return digits_dataset(slice(0, 1024), batch_size)


def val_data_creator(config, batch_size):
    """Held-out rows: the validation accuracy is measured on digits the model never trained on."""
    return digits_dataset(slice(1024, 1536), batch_size)


def test_reference_tf2_example_with_a_data_creator(orca_context, spark):
    """The guide's TF2 sample (fit on a data creator with steps_per_epoch, predict a DataFrame by
    feature_cols=['image']) on spark (a data creator in the runner's child process); data creators
    on ray: test_io_and_callbacks. Accuracy on held-out digits, from the history and from predict."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    test = slice(1024, 1536)
    df = spark.createDataFrame(pd.DataFrame({"image": [r.reshape(-1).tolist() for r in digits.images[test] / 16.0],
                                             "label": digits.target[test]}))
    est = Estimator.from_keras(model_creator=reference_model_creator, config={"lr": 1e-2}, workers_per_node=2,
                               backend="spark", verbose=0)
    try:
        stats = est.fit(data=train_data_creator, epochs=3, batch_size=32, steps_per_epoch=1024 // 32,
                        validation_data=val_data_creator)
        predictions = est.predict(data=df, feature_cols=["image"]).toPandas()
        assert len(set(est.worker_weight_digests())) == 1
        model = est.get_model()
    finally:
        est.shutdown()
    assert stats.history["accuracy"][-1] > stats.history["accuracy"][0]
    probs = np.stack(predictions["prediction"].map(np.asarray))
    plain = model.predict(np.stack(predictions["image"].map(np.asarray)).reshape(-1, 8, 8, 1), verbose=0)
    np.testing.assert_allclose(probs, plain, atol=1e-5)
    held_out = float((probs.argmax(1) == predictions["label"].to_numpy()).mean())
    assert held_out > 0.85
    assert stats.history["val_accuracy"][-1] == pytest.approx(held_out, abs=1e-6)  # the same 512 held-out rows


def test_string_columns_feed_a_string_lookup_layer(orca_context, spark):
    def creator(config):
        import keras

        keras.utils.set_random_seed(0)
        inp = keras.Input((1,), dtype="string")
        hot = keras.layers.StringLookup(vocabulary=["a", "b", "c"], output_mode="one_hot")(inp)
        model = keras.Model(inp, keras.layers.Dense(1)(hot))
        model.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse")
        return model

    pdf = pd.DataFrame({"s": ["a", "b", "c"] * 20, "y": [1.0, 2.0, 3.0] * 20})
    df = spark.createDataFrame(pdf).repartition(2)
    est = Estimator.from_keras(model_creator=creator, backend="spark", workers_per_node=2, verbose=0)
    hist = est.fit(df, epochs=5, batch_size=6, feature_cols=["s"], label_cols=["y"])
    assert hist.history["loss"][-1] < 0.05
    out = est.predict(df, feature_cols=["s"]).toPandas()
    model = est.get_model()  # the strings reach the lookup layer as in plain Keras
    import tensorflow as tf

    want = np.asarray(model(tf.constant(out["s"].tolist())[:, None], training=False)).reshape(-1)
    out["p"] = np.stack(out["prediction"].to_numpy())[:, 0]  # a DenseVector of one value a row
    np.testing.assert_allclose(out["p"].to_numpy(dtype=np.float64), want, atol=1e-5)
    means = out.groupby("s")["p"].mean()
    assert means["a"] < means["b"] < means["c"]  # the one-hot codes learned their order


def test_multi_output_predict_with_output_cols(orca_context, spark):
    def creator(config):
        import keras

        inp = keras.Input((4,))
        model = keras.Model(inp, [keras.layers.Dense(1)(inp), keras.layers.Dense(2)(inp)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    x, _ = regression(rows=20)
    est = Estimator.from_keras(model_creator=creator, backend="ray", workers_per_node=2, verbose=0)
    try:
        a, b = est.predict(x, batch_size=4)
        df = spark.createDataFrame(pd.DataFrame({"x": list(x)}))
        out = est.predict(df, feature_cols=["x"], output_cols=["p1", "p2"]).toPandas()
        shards = est.predict(XShards.partition({"x": x}, num_shards=2, backend="local"), output_cols=["p1", "p2"])
        model = est.get_model()
    finally:
        est.shutdown()
    want_a, want_b = (o.numpy() for o in model(x))
    np.testing.assert_allclose(a, want_a, atol=1e-5)
    np.testing.assert_allclose(b, want_b, atol=1e-5)
    np.testing.assert_allclose(np.stack(out["p2"].to_numpy()), want_b, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([s["p1"] for s in shards.collect()]), want_a, atol=1e-5)


def test_native_dataset_with_rows_no_worker_count_divides_equals_one_process(orca_context, all_backends):
    """41 rows in batches of 4 per worker: rank 0 takes batches 0, 2, ..., 10 (the last holds one
    row), rank 1 batches 1, 3, ..., 9. Step i is rows 8i..8i+7 and the last step row 40 alone: no
    row padded or repeated, and the weights equal plain Keras on the same global batches to 1e-6."""
    creator = linear_creator(lr=0.1, n_in=4, metrics=())
    x, y = regression(rows=41, seed=5)

    def data_creator(config, batch_size):
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices((x, y[:, None])).batch(batch_size)

    est = Estimator.from_keras(model_creator=creator, backend=all_backends, workers_per_node=2, verbose=0)
    try:
        hist = est.fit(data_creator, epochs=2, batch_size=8)
        got = est.get_model().get_weights()
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [41, 41]
    ref = creator({})
    ref.fit(x, y[:, None], batch_size=8, epochs=2, shuffle=False, verbose=0)
    for g, w in zip(got, ref.get_weights(), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)


def test_a_bare_tf_data_dataset_trains_as_one_process_reading_it_in_order(orca_context):
    """A tf.data.Dataset itself (the reference's fit(data=dataset)) travels as its graph, map
    included, and is batched by fit's batch_size: the same steps as plain Keras on it (1e-6)."""
    import tensorflow as tf

    creator = linear_creator(lr=0.1, n_in=4, metrics=())
    x, y = regression(rows=41, seed=6)
    ds = tf.data.Dataset.from_tensor_slices((x, y / 2.0)).map(lambda a, b: (a, b[None] * 2.0))
    est = Estimator.from_keras(model_creator=creator, backend="spark", workers_per_node=2, verbose=0)
    try:
        hist = est.fit(ds, epochs=2, batch_size=8)
        got = est.get_model().get_weights()
        stats = est.evaluate(ds, batch_size=8)
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [41, 41] and stats["num_samples"] == 41
    ref = creator({})
    ref.fit(x, y[:, None], batch_size=8, epochs=2, shuffle=False, verbose=0)
    for g, w in zip(got, ref.get_weights(), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)
    assert stats["loss"] == pytest.approx(float(ref.evaluate(x, y[:, None], verbose=0)), abs=1e-5)
