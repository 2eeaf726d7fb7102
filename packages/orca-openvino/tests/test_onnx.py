"""An ONNX file (built with the onnx package: no exporter needed) predicts like the plain runtime
reading the same file."""

import numpy as np
import onnx
import pandas as pd
import pytest
from conftest import F32, reference
from onnx import TensorProto, helper, numpy_helper

from orca.openvino import Estimator

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    """``relu(x[?, 5] @ W + b)`` -> ``y[?, 3]``."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(5, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_an_onnx_file_predicts_like_the_plain_runtime(onnx_path, backend, spark):
    x = np.random.default_rng(3).normal(size=(23, 5)).astype(np.float32)
    want = reference(onnx_path, x)[0]
    est = Estimator.from_openvino(model_path=onnx_path, config=F32, backend=backend)
    try:
        np.testing.assert_allclose(est.predict(x, batch_size=4), want, atol=1e-5, rtol=0)
        df = spark.createDataFrame(pd.DataFrame({"i": np.arange(23), "x": list(x)})).repartition(3)
        out = est.predict(df, feature_cols=["x"]).toPandas().sort_values("i")
        np.testing.assert_allclose(np.stack(out["prediction"].to_numpy()), want, atol=1e-5, rtol=0)
    finally:
        est.shutdown()
