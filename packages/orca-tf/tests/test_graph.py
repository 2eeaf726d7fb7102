"""The TF1-style Estimator: ``from_graph`` on a tf.compat.v1 graph and ``from_keras(keras_model=)``."""

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from orca.core.data import XShards
from orca.tf import Estimator

v1 = tf.compat.v1


def mlp_graph(n_in=4, hidden=5, optimizer=None, running=False):
    """A small tanh MLP regression graph with seeded initializers; returns its endpoints (with
    ``running``, also an update op keeping a moving mean of the inputs, as batch norm would)."""
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, (None, n_in), name="x")
        y = v1.placeholder(tf.float32, (None,), name="y")
        w1 = v1.get_variable("w1", (n_in, hidden), initializer=v1.random_normal_initializer(seed=1))
        b1 = v1.get_variable("b1", (hidden,), initializer=v1.constant_initializer(0.1))
        w2 = v1.get_variable("w2", (hidden, 1), initializer=v1.random_normal_initializer(seed=2))
        pred = tf.identity(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2)[:, 0], name="pred")
        loss = tf.reduce_mean((pred - y) ** 2)
        opt = optimizer() if optimizer is not None else v1.train.MomentumOptimizer(0.1, 0.9)
        extra = {}
        if running:
            avg = v1.get_variable("running_mean", (), initializer=v1.zeros_initializer(), trainable=False)
            extra["updates"] = [v1.assign(avg, 0.5 * avg + 0.5 * tf.reduce_mean(x))]
    return {"graph": g, "inputs": x, "outputs": pred, "labels": y, "loss": loss, "optimizer": opt, **extra}


def regression(rows, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    return x, (x @ np.array([1.5, -2.0, 0.5, 3.0], np.float32) + 0.25).astype(np.float32)


def single_process_steps(start, x, y, steps, clip_norm=None, clip_value=None):
    """The same graph trained in one plain tf.compat.v1 session, one step per global batch."""
    ep = mlp_graph()
    with ep["graph"].as_default():
        grads_vars = ep["optimizer"].compute_gradients(ep["loss"])
        if clip_value is not None:
            grads_vars = [(tf.clip_by_value(g, *clip_value), v) for g, v in grads_vars]
        if clip_norm is not None:
            clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_vars], clip_norm)
            grads_vars = list(zip(clipped, [v for _, v in grads_vars], strict=True))
        train = ep["optimizer"].apply_gradients(grads_vars)
        variables = v1.global_variables()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for v in variables:
                v.load(start[v.op.name], sess)
            for sl in steps:
                sess.run(train, {ep["inputs"]: x[sl], ep["labels"]: y[sl]})
            return {v.op.name: val for v, val in zip(variables, sess.run(variables), strict=True)}


def from_graph(ep, **kw):
    return Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], labels=ep["labels"], loss=ep["loss"],
                                optimizer=ep["optimizer"], updates=ep.get("updates"), workers_per_node=2, verbose=0,
                                **kw)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_from_graph_data_parallel_steps_equal_one_process_on_uneven_shares(orca_context, backend):
    """13 rows on 2 workers (7 + 6): a global batch of 13 is one step; each worker's gradient is
    weighted by its share, so the momentum steps equal one process's to 1e-6 (all variables,
    the optimizer's slots included)."""
    x, y = regression(13)
    est = from_graph(mlp_graph(), backend=backend)
    start = est.get_model()
    try:
        hist = est.fit((x, y), epochs=2, batch_size=13, shuffle=False)
        assert [h["num_samples"] for h in hist] == [13, 13] and hist[0]["batch_count"] == 1
        digests = est.worker_weight_digests()
        assert len(digests) == 2 and len(set(digests)) == 1
        got = est.get_model()
    finally:
        est.shutdown()
    want = single_process_steps(start, x, y, [slice(0, 13)] * 2)
    assert set(got) == set(want) and "w1/Momentum" in got
    assert not np.allclose(got["w1"], start["w1"])
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)


@pytest.mark.timeout(300)
def test_from_graph_clips_the_global_gradient_and_averages_updates(orca_context):
    """clip_norm applies to the all-reduced gradient: the same as clipping one process's gradient;
    what ``updates`` changed on each worker (a moving mean) is averaged over the workers."""
    x, y = regression(13, seed=1)
    est = from_graph(mlp_graph(running=True), backend="spark", clip_norm=0.5)
    start = est.get_model()
    try:
        est.fit((x, y), epochs=1, batch_size=13, shuffle=False)
        got = est.get_model()
        # the reference's setters change the clipping of the next steps (no new graph)
        est.clear_gradient_clipping()
        est.fit((x, y), epochs=1, batch_size=13, shuffle=False)
        cleared = est.get_model()
        est.set_constant_gradient_clipping(-0.05, 0.05)
        est.fit((x, y), epochs=1, batch_size=13, shuffle=False)
        by_value = est.get_model()
        with pytest.raises(ValueError, match="clip_value"):
            est.set_constant_gradient_clipping(1.0, -1.0)
        with pytest.raises(ValueError, match="clip_norm"):
            est.set_l2_norm_gradient_clipping(0)
    finally:
        est.shutdown()
    for before, after, clip in ((got, cleared, {}), (cleared, by_value, {"clip_value": (-0.05, 0.05)})):
        want_next = single_process_steps(before, x, y, [slice(0, 13)], **clip)
        for name, value in want_next.items():
            np.testing.assert_allclose(after[name], value, atol=1e-6, err_msg=name)
    unclipped_next = single_process_steps(cleared, x, y, [slice(0, 13)])
    assert not np.allclose(unclipped_next["w1"], by_value["w1"], atol=1e-4)  # the value clip bites
    want = single_process_steps(start, x, y, [slice(0, 13)], clip_norm=0.5)
    unclipped = single_process_steps(start, x, y, [slice(0, 13)])
    assert not np.allclose(want["w1"], unclipped["w1"], atol=1e-4)  # the clip bites
    # rows 0-6 on rank 0, 7-12 on rank 1: one update each from 0, then the mean of the two
    running = (0.5 * x[:7].mean() + 0.5 * x[7:].mean()) / 2
    assert got.pop("running_mean") == pytest.approx(running, abs=1e-6)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)


def lenet_graph():
    """A small LeNet-style conv net on 8x8 digits, with an accuracy metric tensor."""
    g = tf.Graph()
    with g.as_default():
        images = v1.placeholder(tf.float32, (None, 8, 8, 1), name="images")
        labels = v1.placeholder(tf.int32, (None,), name="labels")
        k = v1.get_variable("conv/k", (3, 3, 1, 8), initializer=v1.glorot_uniform_initializer(seed=1))
        kb = v1.get_variable("conv/b", (8,), initializer=v1.zeros_initializer())
        h = tf.nn.relu(tf.nn.conv2d(images, k, strides=1, padding="SAME") + kb)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(h, (-1, 4 * 4 * 8))
        w = v1.get_variable("fc/w", (128, 10), initializer=v1.glorot_uniform_initializer(seed=2))
        b = v1.get_variable("fc/b", (10,), initializer=v1.zeros_initializer())
        logits = tf.matmul(h, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels), tf.float32))
    return images, labels, logits, loss, acc


@pytest.mark.timeout(600)
def test_the_guides_tf1_sample_lenet_on_a_tf_data_dataset_learns_and_evaluate_matches_predict(orca_context, tmp_path):
    """The reference guide's TF 1.15 sample (section 2.1) as written, digits for MNIST: fit on a
    mapped tf.data.Dataset, predict a DataFrame by feature_cols=['image']; accuracy above 0.9
    on held-out rows, and the metric from evaluate equals one computed from predict's output."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    train, test = order[:1400], order[1400:]
    spark = orca_context.spark_session()
    df = spark.createDataFrame(pd.DataFrame({"image": [r.reshape(-1).tolist() for r in x[test]],
                                             "label": y[test]})).repartition(3)

    def preprocess(image, label):  # the guide's dataset.map(preprocess)
        return tf.reshape(image, (8, 8, 1)), tf.cast(label, tf.int32)

    mnist_train = tf.data.Dataset.from_tensor_slices((x[train].reshape(-1, 64), y[train])).map(preprocess)
    mnist_test = tf.data.Dataset.from_tensor_slices((x[test].reshape(-1, 64), y[test])).map(preprocess)
    max_epoch = 8

    images, labels, logits, loss, acc = lenet_graph()
    est = Estimator.from_graph(inputs=images,
                               outputs=logits,
                               labels=labels,
                               loss=loss,
                               optimizer=v1.train.AdamOptimizer(0.01),  # the guide's default rate, 0.001, is
                               metrics={"acc": acc},                    # for MNIST's 60,000 rows
                               workers_per_node=2, verbose=0)
    est.set_tensorboard(str(tmp_path / "logs"), "lenet")  # the reference's TF1 summaries
    try:
        hist = est.fit(data=mnist_train,
                       batch_size=64,
                       epochs=max_epoch,
                       validation_data=mnist_test)
        assert [h["num_samples"] for h in hist] == [1400] * max_epoch
        assert hist[-1]["loss"] < hist[0]["loss"] and "acc" in hist[-1] and "val_acc" in hist[-1]
        stats = est.evaluate(df, batch_size=50, feature_cols=["image"], label_cols=["label"])
        assert stats["num_samples"] == len(test)
        assert stats["acc"] > 0.9
        predictions = est.predict(data=df,
                                  feature_cols=["image"]).toPandas()
    finally:
        est.shutdown()
    # one point per epoch at its last iteration, the History's merged values (what TensorBoard shows)
    steps = np.cumsum([h["batch_count"] for h in hist])
    loss, val_acc = est.get_train_summary("Loss"), est.get_validation_summary("acc")
    np.testing.assert_array_equal(loss[:, 0], steps)
    np.testing.assert_allclose(loss[:, 1], [h["loss"] for h in hist], rtol=1e-6)
    np.testing.assert_allclose(val_acc[:, 1], [h["val_acc"] for h in hist], rtol=1e-6)
    assert len(est.get_train_summary("acc")) == max_epoch and (est.get_train_summary("Throughput")[:, 1] > 0).all()
    assert sorted(p.name for p in (tmp_path / "logs" / "lenet").iterdir()) == ["train", "validation"]
    logits_out = np.stack([np.asarray(p) for p in predictions["prediction"]])
    from_predict = float((logits_out.argmax(1) == predictions["label"].to_numpy()).mean())
    assert stats["acc"] == pytest.approx(from_predict, abs=1e-6)
    assert hist[-1]["val_acc"] == pytest.approx(stats["acc"], abs=1e-6)


@pytest.mark.timeout(300)
def test_from_graph_on_a_tf_data_dataset_steps_as_one_process_reading_it_in_order(orca_context):
    """A tf.data.Dataset travels as its graph (its map included); 2 workers read alternate
    per-worker batches, so each step's global batch is the next rows in order: 13 rows, a global
    batch of 8, equal one process's steps on rows 0-7 and 8-12 (1e-6). A pipeline calling Python
    is refused on the driver, naming the fix."""
    x, y = regression(13, seed=4)
    ds = tf.data.Dataset.from_tensor_slices((x / 2.0, y)).map(lambda a, b: (a * 2.0, b))
    est = from_graph(mlp_graph(), backend="spark")
    start = est.get_model()
    try:
        hist = est.fit(ds.batch(5), epochs=1, batch_size=8, shuffle=False)  # a batched one is re-batched
        assert hist[0]["num_samples"] == 13 and hist[0]["batch_count"] == 2
        got = est.get_model()
        calls_python = tf.data.Dataset.from_tensor_slices(x).map(
            lambda a: tf.py_function(lambda t: t, [a], tf.float32))
        with pytest.raises(TypeError, match="data creator"):
            est.fit(calls_python, epochs=1, batch_size=8)
        with pytest.raises(ValueError, match="infinite"):
            est.fit(ds.repeat(), epochs=1, batch_size=8)
    finally:
        est.shutdown()
    want = single_process_steps(start, x, y, [slice(0, 8), slice(8, 13)])
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)


@pytest.mark.timeout(300)
def test_save_load_round_trip_keeps_predictions(orca_context, tmp_path):
    x, y = regression(40, seed=2)
    est = from_graph(mlp_graph(), backend="spark", metrics={"mae": "mae"})  # one of orca.core's metrics
    try:
        est.fit((x, y), epochs=2, batch_size=8)
        before = est.predict(x, batch_size=16)
        stats = est.evaluate((x, y), batch_size=16)
        assert stats["mae"] == pytest.approx(float(np.abs(before - y).mean()), abs=1e-5)
        prefix = est.save(str(tmp_path / "ckpt" / "model"))
        trained = est.get_model()
        exported = est.export_saved_model(str(tmp_path / "serving"))
        with pytest.raises(FileExistsError, match="overwrite=True"):
            est.export_saved_model(exported)
        est.export_saved_model(exported, overwrite=True)
    finally:
        est.shutdown()
    # TF Serving's view: the SavedModel's serving signature gives the Estimator's predictions
    served = tf.saved_model.load(exported).signatures["serving_default"](x=tf.constant(x))["pred"].numpy()
    np.testing.assert_allclose(served, before, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "serving"]  # no temporary left beside it
    # a plain TF reader sees the trained values under the graph's variable names
    reader = tf.train.load_checkpoint(prefix)
    np.testing.assert_array_equal(reader.get_tensor("w1"), trained["w1"])
    fresh = from_graph(mlp_graph(), backend="spark")
    try:
        assert not np.allclose(fresh.predict(x, batch_size=16), before)
        fresh.load(prefix)
        after = fresh.predict(x, batch_size=16)
        shards = fresh.predict(XShards.partition({"x": x}, num_shards=2), batch_size=16)
        from_shards = np.concatenate([s["prediction"] for s in shards.collect()])
        with pytest.raises(FileNotFoundError, match="no TF checkpoint"):
            fresh.load(str(tmp_path / "missing"))
    finally:
        fresh.shutdown()
    assert before.shape == (40,)
    np.testing.assert_array_equal(after, before)
    np.testing.assert_allclose(from_shards, before, atol=1e-6)


def keras_model(flavour):
    if flavour == "keras3":
        import keras
    else:
        import tf_keras as keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse", metrics=["mae"])
    return model


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flavour, overrides", [("keras3", False), ("keras3", True), ("tf_keras", True)])
def test_from_keras_compiled_model_step_equals_train_on_batch(orca_context, flavour, overrides):
    """keras_model= ships the architecture, weights and compile config as data; two steps on 2
    workers over 7 + 6 rows equal plain Keras' train_on_batch on the global batch. With the
    reference's optimizer= and metrics= overrides, a model compiled otherwise trains and
    evaluates as one compiled with them."""
    x, y = regression(13, seed=3)
    model = keras_model(flavour)
    start = [w.copy() for w in model.get_weights()]
    if overrides:
        keras = __import__("keras" if flavour == "keras3" else "tf_keras")
        given = keras_model(flavour)  # the same architecture and weights (seeded) ...
        given.compile(optimizer="adam", loss="mse")  # ... compiled otherwise
        est = Estimator.from_keras(keras_model=given, backend="spark", workers_per_node=2, verbose=0,
                                   optimizer=keras.optimizers.SGD(0.1, momentum=0.9), metrics=["mae"])
    else:
        est = Estimator.from_keras(keras_model=model, backend="spark", workers_per_node=2, verbose=0)
    try:
        est.fit((x, y), epochs=2, batch_size=13, shuffle=False)
        assert len(set(est.worker_weight_digests())) == 1
        got = est.get_model().get_weights()
        stats = est.evaluate((x, y), batch_size=13)
    finally:
        est.shutdown()
    for a, b in zip(model.get_weights(), start, strict=True):  # the user's model is not touched
        np.testing.assert_array_equal(a, b)
    for _ in range(2):
        model.train_on_batch(x, y)
    for a, b in zip(got, model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    want_mae = float(np.abs(model.predict(x, verbose=0)[:, 0] - y).mean())
    assert stats["mae"] == pytest.approx(want_mae, abs=1e-5)


def test_bad_inputs_are_refused_on_the_driver_naming_the_argument():
    ep = mlp_graph()
    with pytest.raises(TypeError, match="outputs"):
        Estimator.from_graph(inputs=ep["inputs"], outputs="pred")
    other = mlp_graph()
    with pytest.raises(ValueError, match="outputs.*another graph"):
        Estimator.from_graph(inputs=ep["inputs"], outputs=other["outputs"])
    with pytest.raises(ValueError, match="loss.*another graph"):
        Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], labels=ep["labels"], loss=other["loss"],
                             optimizer=ep["optimizer"])
    import keras
    import tf_keras

    legacy = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
    legacy.compile(optimizer="sgd", loss="mse")
    with pytest.raises(TypeError, match="optimizer must be a name or a tf_keras optimizer"):
        Estimator.from_keras(keras_model=legacy, optimizer=keras.optimizers.SGD(0.1))
    with pytest.raises(TypeError, match="metrics must be a list"):
        Estimator.from_keras(keras_model=legacy, metrics="mae")
    with pytest.raises(ValueError, match="override a keras_model"):
        Estimator.from_keras(model_creator=lambda config: legacy, optimizer="sgd")
    with pytest.raises(TypeError, match="optimizer must be a tf.compat.v1.train.Optimizer"):
        Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], labels=ep["labels"], loss=ep["loss"],
                             optimizer=keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="optimizer is given but loss is None"):
        Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], optimizer=ep["optimizer"])
    with pytest.raises(ValueError, match="clip_norm"):
        from_graph(ep, clip_norm=-1)
    with pytest.raises(ValueError, match="set_tensorboard"):
        from_graph(ep).get_train_summary("Loss")
    with pytest.raises(ValueError, match="backend"):
        from_graph(ep, backend="bigdl")
    no_labels = Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], verbose=0)
    x, y = regression(8)
    with pytest.raises(ValueError, match="fit needs labels"):
        no_labels.fit((x, y), epochs=1, batch_size=4)
    with pytest.raises(ValueError, match="evaluate needs labels"):
        no_labels.evaluate((x, y))
    no_opt = Estimator.from_graph(inputs=ep["inputs"], outputs=ep["outputs"], labels=ep["labels"], verbose=0)
    with pytest.raises(ValueError, match="fit needs loss= and optimizer="):
        no_opt.fit((x, y), epochs=1, batch_size=4)
    with pytest.raises(ValueError, match="one of model_creator= .* and keras_model=.*not both"):
        Estimator.from_keras(model_creator=lambda config: None, keras_model=object())
    with pytest.raises(TypeError, match="keras_model must be a compiled keras.Model"):
        Estimator.from_keras(keras_model="model.h5")
    uncompiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="keras_model is not compiled"):
        Estimator.from_keras(keras_model=uncompiled)
