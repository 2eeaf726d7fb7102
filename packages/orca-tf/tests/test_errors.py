"""Bad input is rejected on the driver within seconds, and nothing is left running."""


import numpy as np
import pytest
from conftest import linear_creator, regression

from orca.core.engine.errors import OrcaWorkerError
from orca.tf import Estimator

pytestmark = pytest.mark.timeout(180)


def test_model_creator_must_be_a_function():
    with pytest.raises(TypeError, match="model_creator"):
        Estimator.from_keras(model_creator="model")


@pytest.mark.parametrize("bad, kind, match", [
    (lambda df: dict(data=df, feature_cols=["nope"], label_cols=["y"]), ValueError, "nope"),
    (lambda df: dict(data=(np.zeros((0, 4), np.float32), np.zeros(0, np.float32))), ValueError, "empty"),
    (lambda df: dict(data=(np.zeros((4, 4)), np.array(["a"] * 4))), TypeError, "not numeric"),
    (lambda df: dict(data=df, feature_cols=["x"]), ValueError, "label_cols"),
])
def test_bad_data_fails_on_the_driver_fast(spark, bad, kind, match):
    import pandas as pd

    x, y = regression(rows=8)
    df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y}))
    est = Estimator.from_keras(model_creator=linear_creator(), backend="ray", workers_per_node=2, verbose=0)
    with pytest.raises(kind, match=match):  # (bounded by the module's pytest-timeout, never asserted as time)
        est.fit(epochs=1, batch_size=4, **bad(df))
    assert est._group is None or not est._group.started  # refused on the driver: no worker started


def test_a_tf_dataset_that_cannot_travel_is_refused_with_the_fix():
    """A pipeline calling Python cannot be shipped as a graph; dict elements and an endless
    repeat are refused too, each on the driver with what to do instead."""
    import tensorflow as tf

    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", verbose=0)
    x = np.zeros((6, 4), np.float32)
    calls_python = tf.data.Dataset.from_tensor_slices(x).map(lambda a: tf.py_function(lambda t: t, [a], tf.float32))
    with pytest.raises(TypeError, match="py_function.*data creator"):
        est.fit(calls_python, epochs=1)
    with pytest.raises(TypeError, match="dicts.*tuples"):
        est.fit(tf.data.Dataset.from_tensor_slices({"x": x, "y": x[:, 0]}), epochs=1)
    with pytest.raises(ValueError, match="infinite.*repeat"):
        est.fit(tf.data.Dataset.from_tensor_slices((x, x[:, 0])).repeat(), epochs=1)
    assert est._group is None


def test_wrong_input_shape_fails_in_the_workers_with_one_clear_error(orca_context, backend):
    est = Estimator.from_keras(model_creator=linear_creator(), backend=backend, workers_per_node=2, verbose=0)
    try:
        with pytest.raises((OrcaWorkerError, ValueError), match="shape|incompatible|expected"):
            est.fit((np.zeros((8, 7), np.float32), np.zeros(8, np.float32)), epochs=1, batch_size=4)
    finally:
        est.shutdown()
    assert est._group is None or not est._group.started
