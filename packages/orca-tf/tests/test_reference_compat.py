"""Code written for the reference (bigdl-orca 2.x) runs with only its imports changed.

- TF1 code as it is ported: a script that starts with ``tf.compat.v1.disable_v2_behavior()``
  builds placeholders and a graph (or a tf_keras model) and trains them with
  ``Estimator.from_graph`` / ``from_keras(keras_model=)`` on a ``tf.data.Dataset``, a Spark
  DataFrame and an XShards. It runs in a child interpreter (the switch is process-wide and
  cannot be undone) and gives the same numbers as the same script with eager execution on.
- the TF2 Estimator's results read as the reference's tests read them: ``fit`` returned a dict
  (``stats["loss"]`` a per-epoch list, with Keras' ``epochs``/``steps``/``verbose``),
  ``evaluate`` keys ``validation_<name>``, ``evaluate(num_steps=)``, ``get_model(set_weights=)``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from orca.core.plugin import warnings_reset
from orca.core.testing.clusters import run_python

#: the reference guide's TF1 sample (section 2.1) on digits, as a script; MODE picks eager or v1
TF1_SCRIPT = r'''
import json, os
import tensorflow as tf
if MODE == "v1":
    tf.compat.v1.disable_v2_behavior()      # the first line of a ported TF 1.15 script
import numpy as np
import pandas as pd
from sklearn.datasets import load_digits
from orca.core import init_orca_context, stop_orca_context
from orca.core.data import XShards
from orca.tf import Estimator

v1 = tf.compat.v1
out = {"executing_eagerly": tf.executing_eagerly()}
digits = load_digits()
x = (digits.images / 16.0).astype(np.float32)[:600]
y = digits.target.astype(np.int32)[:600]
train, test = slice(0, 400), slice(400, 600)
ctx = init_orca_context(cluster_mode="local", cores=2, memory="2g", worker_timeout_s=180.0)
spark = ctx.spark_session()
df = spark.createDataFrame(pd.DataFrame({"image": [r.reshape(-1).tolist() for r in x[test]],
                                         "label": y[test]})).repartition(2)
shards = XShards.partition({"x": x[test].reshape(-1, 8, 8, 1), "y": y[test]}, num_shards=2)

def preprocess(image, label):  # the guide's dataset.map(preprocess)
    return tf.reshape(image, (8, 8, 1)), label

mnist_train = tf.data.Dataset.from_tensor_slices((x[train].reshape(-1, 64), y[train])).map(preprocess)
mnist_test = tf.data.Dataset.from_tensor_slices((x[test].reshape(-1, 64), y[test])).map(preprocess)

# --- from_graph: placeholders, a loss tensor, a tf.compat.v1.train optimizer
# (ported TF1 code builds on the default graph; with eager on, the graph needs a tf.Graph of its own)
graph = tf.compat.v1.get_default_graph() if MODE == "v1" else tf.Graph()
with graph.as_default():
    images = v1.placeholder(tf.float32, (None, 8, 8, 1), name="images")
    labels = v1.placeholder(tf.int32, (None,), name="labels")
    k = v1.get_variable("conv/k", (3, 3, 1, 8), initializer=v1.glorot_uniform_initializer(seed=1))
    h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(images, k, strides=1, padding="SAME")), 2, 2, "VALID")
    w = v1.get_variable("fc/w", (128, 10), initializer=v1.glorot_uniform_initializer(seed=2))
    logits = tf.matmul(tf.reshape(h, (-1, 128)), w)
    loss = tf.reduce_mean(v1.losses.sparse_softmax_cross_entropy(logits=logits, labels=labels))
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels), tf.float32))
est = Estimator.from_graph(inputs=images, outputs=logits, labels=labels, loss=loss,
                           optimizer=v1.train.AdamOptimizer(0.01), metrics={"acc": acc},
                           workers_per_node=2, verbose=0)
try:
    hist = est.fit(data=mnist_train, batch_size=64, epochs=3, validation_data=mnist_test, shuffle=False)
    out["graph_fit"] = [[h["loss"], h["acc"], h["val_acc"], h["num_samples"]] for h in hist]
    out["graph_eval_df"] = est.evaluate(df, batch_size=50, feature_cols=["image"], label_cols=["label"])["acc"]
    ev = est.evaluate(shards, batch_size=50)
    out["graph_eval_shards"] = [ev["acc"], ev["loss"], ev["num_samples"]]
    pred = est.predict(data=df, feature_cols=["image"]).toPandas()
    out["graph_predict_df"] = np.stack(pred["prediction"].map(np.asarray)).tolist()
    out["graph_predict_df_acc"] = float((np.argmax(out["graph_predict_df"], 1) == pred["label"].to_numpy()).mean())
    prefix = est.save(os.path.join(TMP, MODE, "ckpt"))
    out["graph_saved"] = os.path.exists(prefix + ".index")
finally:
    est.shutdown()

# --- from_keras(keras_model=): a compiled tf_keras model (TF 1.15's tf.keras)
import tf_keras as keras
keras.utils.set_random_seed(3)
model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.legacy.RMSprop(0.01),  # TF 1.15's tf.keras optimizers
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
rng = np.random.default_rng(3)  # the same start in both modes (graph-mode initializers draw other numbers)
model.set_weights([rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])
kest = Estimator.from_keras(keras_model=model, backend="bigdl", workers_per_node=2, verbose=0)
try:
    khist = kest.fit(data=mnist_train, batch_size=64, epochs=2, validation_data=mnist_test, shuffle=False)
    out["keras_fit"] = [[h["loss"], h["accuracy"], h["val_accuracy"]] for h in khist]
    kev = kest.evaluate(shards, batch_size=50)
    out["keras_eval_shards"] = [kev["accuracy"], kev["loss"]]
    kpred = kest.predict(df, feature_cols=["image"]).toPandas()
    out["keras_predict_df"] = np.stack(kpred["prediction"].map(np.asarray)).tolist()
    out["keras_get_model"] = [float(np.abs(w).sum()) for w in kest.get_model().get_weights()]
finally:
    kest.shutdown()
stop_orca_context()
out["y_test"] = y[test].tolist()
print(json.dumps(out))
'''


#: the sample's own context start and stop: a child interpreter runs them as written
_SAMPLE_INIT = 'ctx = init_orca_context(cluster_mode="local", cores=2, memory="2g", worker_timeout_s=180.0)\n'
_SAMPLE_STOP = "stop_orca_context()\n"


def run_tf1_sample(mode: str, tmp: str) -> dict:
    """The sample as a script of its own, in a child interpreter (``disable_v2_behavior`` is process-wide)."""
    return run_python(f"MODE = {mode!r}\nTMP = {tmp!r}\n" + TF1_SCRIPT, timeout_s=540)


def run_tf1_sample_here(tmp: str, ctx: object) -> dict:
    """The sample with eager execution on, in this (eager) test process, on the session's context
    (the same local[2] settings as the sample's own): its numbers as the script prints them."""
    assert TF1_SCRIPT.count(_SAMPLE_INIT) == 1 and TF1_SCRIPT.count(_SAMPLE_STOP) == 1
    code = TF1_SCRIPT.replace(_SAMPLE_INIT, "ctx = CTX\n").replace(_SAMPLE_STOP, "").replace("print(json.dumps(out))", "")
    namespace: dict = {"MODE": "eager", "TMP": tmp, "CTX": ctx}
    exec(compile(code, "<the TF1 sample, eager>", "exec"), namespace)  # noqa: S102 - this module's own sample
    return json.loads(json.dumps(namespace["out"]))


@pytest.mark.timeout(1200)
def test_tf1_script_with_v2_behavior_disabled_trains_as_with_eager_on(tmp_path, orca_context):
    """The TF1 sample with ``disable_v2_behavior()`` first: from_graph fits a tf.data.Dataset
    (validating on one), evaluates a DataFrame and an XShards, predicts a DataFrame, saves a
    checkpoint; from_keras(keras_model=) on a tf_keras model fits a Dataset, evaluates an XShards,
    predicts a DataFrame, and get_model gives the trained weights. Every number equals the same
    script's with eager on (run in this eager test process: the workers run the same serialized
    graph/model), and the models learn (held-out accuracy > 0.5 for the graph, > 0.3 for the 2-epoch Keras model; chance 0.1)."""
    v1 = run_tf1_sample("v1", str(tmp_path))
    eager = run_tf1_sample_here(str(tmp_path), orca_context)
    assert v1["executing_eagerly"] is False and eager["executing_eagerly"] is True
    assert [h[3] for h in v1["graph_fit"]] == [400, 400, 400]
    assert v1["graph_fit"][-1][0] < v1["graph_fit"][0][0]
    for key in ("graph_fit", "graph_eval_df", "graph_eval_shards", "graph_predict_df", "keras_fit",
                "keras_eval_shards", "keras_predict_df", "keras_get_model"):
        np.testing.assert_allclose(v1[key], eager[key], rtol=1e-5, atol=1e-5, err_msg=key)
    # the same 200 held-out rows as a DataFrame and as an XShards; predict agrees with evaluate
    assert v1["graph_eval_shards"][2] == 200
    assert v1["graph_eval_shards"][0] == pytest.approx(v1["graph_eval_df"], abs=1e-6)
    assert v1["graph_predict_df_acc"] == pytest.approx(v1["graph_eval_df"], abs=1e-6)
    assert v1["graph_fit"][-1][2] == pytest.approx(v1["graph_eval_df"], abs=1e-6)  # val_acc of the last epoch
    assert v1["graph_eval_df"] > 0.5  # chance: 0.1
    assert v1["graph_saved"] is True
    assert np.array(v1["keras_predict_df"]).shape == (200, 10)
    assert v1["keras_eval_shards"][0] > 0.3 and v1["keras_fit"][-1][0] < v1["keras_fit"][0][0]
    assert v1["keras_fit"][-1][2] == pytest.approx(v1["keras_eval_shards"][0], abs=1e-6)


def test_a_dataset_built_in_graph_mode_serializes_as_an_eager_one():
    """The driver-side reading of a tf.data.Dataset (its size, its graph) in graph mode, as TF1
    code builds it (here inside a tf.Graph, in this eager process): a batched
    ``tf.compat.v1.data.Dataset`` ships the same rows as the eager dataset; an infinite one is
    refused, naming the argument."""
    import tensorflow as tf

    from orca.tf._dataset import SerializedDataset

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.float32)
    eager = SerializedDataset.from_dataset(tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)))
    with tf.Graph().as_default():
        ds = tf.compat.v1.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)).batch(4)
        assert type(ds).__name__ == "DatasetV1Adapter"
        graph_mode = SerializedDataset.from_dataset(ds)
        with pytest.raises(ValueError, match="data is an infinite tf.data.Dataset"):
            SerializedDataset.from_dataset(ds.repeat())
    rows = [list(graph_mode({}, 4).unbatch().as_numpy_iterator()), list(eager({}, 4).unbatch().as_numpy_iterator())]
    for got in rows:
        np.testing.assert_array_equal(np.stack([r[0] for r in got]), x * 2)
        np.testing.assert_array_equal([r[1] for r in got], y)
    assert graph_mode.element_spec == eager.element_spec


def reference_model_creator(config):
    """The reference's TF2 test model: a linear Keras 3 model, SGD, loss and metric both MSE."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(config.get("lr", 1e-2)), loss="mean_squared_error",
                  metrics=["mean_squared_error"])
    return model


@pytest.mark.timeout(300)
def test_tf2_results_read_as_the_reference_tests_read_them(orca_context):
    """The reference's TF2 fit returned ``{**history.params, **history.history}``; its tests read
    ``stats["loss"]`` (a per-epoch list) and evaluate's ``validation_<name>`` keys, call
    ``evaluate(num_steps=)`` and ``get_model(set_weights=)``. Orca's History reads the same, and
    stays a list of per-epoch dicts."""
    from orca.core.data import XShards
    from orca.tf import Estimator

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 1)).astype(np.float32)
    y = (2.0 * x[:, 0] + 0.5).astype(np.float32)
    shards = XShards.partition({"x": x, "y": y}, num_shards=4)
    est = Estimator.from_keras(model_creator=reference_model_creator, config={"lr": 0.1}, workers_per_node=2,
                               backend="bigdl", verbose=0)
    try:
        start = est.get_model(set_weights=False).get_weights()
        stats = est.fit(shards, epochs=2, batch_size=4, steps_per_epoch=25)
        ev = est.evaluate(shards, batch_size=4, num_steps=25)
        part = est.evaluate((x, y), batch_size=4, num_steps=3)
        with pytest.raises(ValueError, match="num_steps=3 covers 12 of the XShards' 100 rows"):
            est.evaluate(shards, batch_size=4, num_steps=3)
        with pytest.raises(ValueError, match="num_steps"):
            est.evaluate(shards, batch_size=4, num_steps=0)
        trained = est.get_model().get_weights()
        fresh = est.get_model(set_weights=False).get_weights()
        pred = est.predict(x, batch_size=20)
    finally:
        est.shutdown()
    # the reference's dict: per-epoch lists and Keras' params
    assert stats["loss"] == [stats[0]["loss"], stats[1]["loss"]] and stats["loss"][1] < stats["loss"][0]
    assert stats["mean_squared_error"] == stats.history["mean_squared_error"]
    assert (stats["epochs"], stats["steps"], stats["verbose"]) == (2, 25, 0)
    assert "loss" in stats and "val_loss" not in stats and stats.get("val_loss", "none") == "none"
    assert {"loss", "mean_squared_error", "epochs", "steps"} <= set(stats.keys())
    with pytest.raises(KeyError, match="val_loss"):
        stats["val_loss"]
    assert isinstance(stats, list) and stats[-1]["num_samples"] == 100  # Orca's own view is kept
    # evaluate: the reference's validation_<name> keys, the same numbers as Orca's
    want_mse = float(np.mean((pred[:, 0] - y) ** 2))
    assert ev["validation_loss"] == ev["loss"] == pytest.approx(want_mse, rel=1e-5)
    assert ev["validation_mean_squared_error"] == pytest.approx(want_mse, rel=1e-5)
    assert ev["num_samples"] == 100
    assert part["num_samples"] == 12
    assert part["loss"] == pytest.approx(float(np.mean((pred[:12, 0] - y[:12]) ** 2)), rel=1e-5)
    # get_model(set_weights=False): the creator's model as it builds it (seeded), not the trained one
    for a, b in zip(fresh, start, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(trained[0], start[0])


@pytest.mark.timeout(300)
def test_evaluate_num_steps_and_data_config_as_the_reference(orca_context):
    """num_steps of a data creator: that many batches per worker (the global batches); of a
    tf.data.Dataset (batched or not): its first num_steps * batch_size rows. The reference's
    data_config reaches a data creator's config in fit and evaluate; other data warn once."""
    import tensorflow as tf

    from orca.tf import Estimator

    x = np.linspace(-1, 1, 40, dtype=np.float32).reshape(-1, 1)
    y = (3.0 * x[:, 0]).astype(np.float32)

    def creator(config, batch_size):
        rows = config.get("rows", len(x))  # the reference's data_config reaches a creator's config
        return tf.data.Dataset.from_tensor_slices((x[:rows], y[:rows])).batch(batch_size)

    est = Estimator.from_keras(model_creator=reference_model_creator, workers_per_node=2, backend="bigdl",
                               verbose=0)
    try:
        by_creator = est.evaluate(creator, batch_size=4, num_steps=3)
        whole = est.evaluate(creator, batch_size=4)
        by_dataset = est.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(7), batch_size=4, num_steps=3)
        pred = est.predict(x, batch_size=8)
        configured = est.evaluate(creator, batch_size=4, data_config={"rows": 8})
        with warnings_reset("tf.data_config"), pytest.warns(UserWarning, match="data_config has no effect on tuple data"):
            plain = est.evaluate((x, y), batch_size=4, data_config={"rows": 8})
        hist = est.fit(creator, epochs=1, batch_size=4, data_config={"rows": 8})
    finally:
        est.shutdown()
    assert configured["num_samples"] == 8 and plain["num_samples"] == 40
    assert hist[0]["num_samples"] == 8 and hist["epochs"] == 1
    # 3 steps on 2 workers of the creator's batches (the launcher hands it 2 or 4 rows): the first rows
    n = by_creator["num_samples"]
    assert n in (3 * 2 * 2, 3 * 2 * 4) and whole["num_samples"] == 40
    assert by_creator["loss"] == pytest.approx(float(np.mean((pred[:n, 0] - y[:n]) ** 2)), rel=1e-5)
    assert by_dataset["num_samples"] == 12
    assert by_dataset["validation_loss"] == pytest.approx(float(np.mean((pred[:12, 0] - y[:12]) ** 2)), rel=1e-5)


def subclassed_creator(config):
    """A subclassed Keras 3 model that its creator does not build (the reference's SimpleModel)."""
    import keras

    class Simple(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, inputs):
            return self.dense(inputs["item"])

    keras.utils.set_random_seed(0)
    model = Simple()
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_get_model_sample_input_builds_a_subclassed_model_before_setting_the_weights():
    """The reference's ray get_model(sample_input=): the model is called on the sample, then takes
    the Estimator's weights; set_weights=False leaves the creator's own."""
    from orca.tf import Estimator

    est = Estimator.from_keras(model_creator=subclassed_creator, verbose=0)
    sample = {"item": np.array([[1.0, 2.0]], np.float32)}
    kernel, bias = np.array([[0.5], [-1.0]], np.float32), np.array([0.25], np.float32)
    est.set_state({"weights": [kernel, bias]})
    model = est.get_model(sample_input=sample)
    np.testing.assert_allclose(np.asarray(model(sample)), [[0.5 - 2.0 + 0.25]], rtol=1e-6)
    untrained = est.get_model(set_weights=False, sample_input=sample)
    assert not np.allclose(untrained.get_weights()[0], kernel)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["model.h5", "model.keras"])
def test_from_keras_without_a_model_takes_the_one_load_reads(orca_context, tmp_path, name):
    """The reference's test_get_model: ``Estimator.from_keras()`` with no model, then ``load``."""
    from orca.core.plugin import NotFittedError
    from orca.tf import Estimator

    x = np.linspace(-1, 1, 8, dtype=np.float32)[:, None]
    saved = Estimator.from_keras(model_creator=reference_model_creator, workers_per_node=2, backend="bigdl",
                                 verbose=0)
    path = saved.save(str(tmp_path / name))  # (no worker: the creator's model, built on the driver)
    want = saved.get_model().get_weights()
    est = Estimator.from_keras(workers_per_node=2, backend="bigdl", verbose=0)
    for call in (est.get_model, lambda: est.predict(x), lambda: est.fit((x, x), epochs=1, batch_size=4)):
        with pytest.raises(NotFittedError, match="load"):
            call()
    try:
        est.load(path)
        got = est.get_model().get_weights()
        pred = est.predict(x, batch_size=4)  # the workers rebuild the loaded model
    finally:
        est.shutdown()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)
    np.testing.assert_allclose(pred[:, 0], x[:, 0] * want[0][0, 0] + want[1][0], rtol=1e-5, atol=1e-6)
