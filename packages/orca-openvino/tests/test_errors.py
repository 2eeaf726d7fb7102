"""Bad input is a clear error on the driver, within seconds, with no worker left running."""

import time

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pandas as pd
import pytest

from orca.core.data import XShards
from orca.openvino import Estimator

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def est(backend, linear_ir, orca_context):
    est = Estimator.from_openvino(model_path=linear_ir, backend=backend)
    t0 = time.monotonic()
    yield est
    assert time.monotonic() - t0 < 30  # each error comes back in seconds
    assert est._group is None or not est._group.started  # and no worker was started for it
    est.shutdown()


def test_missing_model_path_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such.xml"):
        Estimator.from_openvino(model_path=str(tmp_path / "no-such.xml"))


def test_ir_without_its_weights_file_is_refused(tmp_path, linear_ir):
    import shutil

    xml = tmp_path / "lonely.xml"
    shutil.copy(linear_ir, xml)
    with pytest.raises(FileNotFoundError, match=r"lonely\.bin"):
        Estimator.from_openvino(model_path=str(xml))


def test_a_file_openvino_cannot_read_is_a_value_error(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="OpenVINO cannot read it"):
        Estimator.from_openvino(model_path=str(bad))


def test_model_path_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="model_path"):
        Estimator.from_openvino(model_path=42)


def test_fit_and_evaluate_say_the_estimator_is_inference_only(linear_ir):
    est = Estimator.from_openvino(model_path=linear_ir)
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(NotImplementedError, match="inference-only"):
        est.fit(x)
    with pytest.raises(NotImplementedError, match="inference-only"):
        est.evaluate(x)


def test_wrong_row_shape_is_refused_on_the_driver(est):
    with pytest.raises(ValueError, match=r"input 'x' takes rows of shape \[4\].*got rows of shape \[5\]"):
        est.predict(np.zeros((8, 5), np.float32))
    with pytest.raises(ValueError, match="rows of shape"):
        est.predict(np.zeros((8, 4, 1), np.float32))


def test_wrong_dtype_is_refused_on_the_driver(est, tmp_path):
    with pytest.raises(TypeError, match="input 'x' takes float32 values, got an array of <U"):
        est.predict(np.array([["a", "b", "c", "d"]]))
    ids = ops.parameter([-1, 3], np.int64, name="ids")
    int_model = Estimator.from_openvino(model_path=ov.Model([ops.multiply(ids, ids)], [ids], "square"),
                                        backend=est.backend)
    with pytest.raises(TypeError, match="input 'ids' takes int64 values, got an array of float32"):
        int_model.predict(np.zeros((2, 3), np.float32))
    # float64 feeds a float32 input and int32 an int64 one (same-kind casts)
    np.testing.assert_array_equal(int_model.predict(np.full((2, 3), 3, np.int32)), np.full((2, 3), 9))
    int_model.shutdown()


def test_wrong_number_of_inputs_and_unknown_input_names(est, two_io_ir):
    with pytest.raises(ValueError, match=r"takes 1 input\(s\) \['x'\], got 2 array"):
        est.predict([np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)])
    two = Estimator.from_openvino(model_path=two_io_ir, backend=est.backend)
    with pytest.raises(ValueError, match=r"input_cols=\['a', 'c'\] must name each model input once"):
        two.predict([np.zeros((2, 3), np.float32), np.zeros((2, 2, 3), np.float32)], input_cols=["a", "c"])


def test_xshards_with_a_wrong_shape_are_refused_before_any_work(est):
    shards = XShards.partition({"x": np.zeros((6, 7), np.float32)}, num_shards=2)
    with pytest.raises(ValueError, match=r"data: input 'x' takes rows of shape \[4\]"):
        est.predict(shards)


def test_dataframe_errors_name_the_column_or_the_shape(est, spark):
    df = spark.createDataFrame(pd.DataFrame({"x": list(np.zeros((4, 3), np.float32)), "s": ["a"] * 4}))
    with pytest.raises(ValueError, match="feature column 'nope' not found"):
        est.predict(df, feature_cols=["nope"])
    with pytest.raises(TypeError, match="column 's' has type string"):
        est.predict(df, feature_cols=["s"])
    with pytest.raises(ValueError, match=r"takes rows of shape \[4\].*got rows of shape \[3\]"):
        est.predict(df, feature_cols=["x"])


def test_bad_config_is_refused(tmp_path, linear_ir):
    with pytest.raises(ValueError, match=r"config\['num_requests'\] must be a positive int"):
        Estimator.from_openvino(model_path=linear_ir, config={"num_requests": 0})
    with pytest.raises(TypeError, match="config must be a dict"):
        Estimator.from_openvino(model_path=linear_ir, config=[1])
