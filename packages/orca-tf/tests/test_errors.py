"""Bad input is rejected on the driver within seconds, and nothing is left running."""


import numpy as np
import pytest
from conftest import linear_creator, regression

from orca.core.engine.errors import OrcaWorkerError
from orca.tf import Estimator

pytestmark = pytest.mark.timeout(180)


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend='mpi'"):
        Estimator.from_keras(model_creator=linear_creator(), backend="mpi")
    with pytest.raises(ValueError, match="horovod"):
        Estimator.from_keras(model_creator=linear_creator(), backend="horovod")


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


def test_a_tf_dataset_instance_is_rejected_with_the_fix():
    import tensorflow as tf

    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", verbose=0)
    with pytest.raises(TypeError, match="data creator"):
        est.fit(tf.data.Dataset.range(3), epochs=1)


def test_wrong_input_shape_fails_in_the_workers_with_one_clear_error(orca_context, backend):
    est = Estimator.from_keras(model_creator=linear_creator(), backend=backend, workers_per_node=2, verbose=0)
    try:
        with pytest.raises((OrcaWorkerError, ValueError), match="shape|incompatible|expected"):
            est.fit((np.zeros((8, 7), np.float32), np.zeros(8, np.float32)), epochs=1, batch_size=4)
    finally:
        est.shutdown()
    assert est._group is None or not est._group.started
