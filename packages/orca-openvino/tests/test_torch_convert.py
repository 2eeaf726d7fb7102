"""A model converted from a torch module with ``ov.convert_model`` predicts like the plain runtime and
like torch itself (torch==2.13.0 CPU is in this session only for this)."""

import numpy as np
import openvino as ov
import pandas as pd
import pytest
import torch
from conftest import F32, reference

from orca.openvino import Estimator

pytestmark = pytest.mark.timeout(300)


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 3)

    def forward(self, a, b):
        h = self.body(a)
        return torch.relu(h) + b, h.sum(1, keepdim=True)


@pytest.fixture(scope="module")
def converted():
    torch.manual_seed(0)
    module = TwoHeads().eval()
    model = ov.convert_model(module, example_input=(torch.zeros(2, 4), torch.zeros(2, 3)))
    return module, model


def test_converted_torch_module_on_arrays_and_a_dataframe(backend, converted, spark):
    module, model = converted
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(21, 4)).astype(np.float32), rng.normal(size=(21, 3)).astype(np.float32)
    want = reference(model, [a, b])
    with torch.no_grad():
        torch_out = [t.numpy() for t in module(torch.from_numpy(a), torch.from_numpy(b))]
    est = Estimator.from_openvino(model_path=model, config=F32, backend=backend)
    try:
        got = est.predict([a, b], batch_size=4)
        for g, w, t in zip(got, want, torch_out, strict=True):
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
            np.testing.assert_allclose(g, t, atol=1e-5, rtol=1e-5)
        df = spark.createDataFrame(pd.DataFrame({"i": np.arange(21), "a": list(a), "b": list(b)})).repartition(2)
        out = est.predict(df, feature_cols=["a", "b"], output_cols=["relu", "total"]).toPandas().sort_values("i")
        np.testing.assert_allclose(np.stack(out["relu"].to_numpy()), want[0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.stack(out["total"].to_numpy()).reshape(-1), want[1].reshape(-1), atol=1e-5, rtol=0)
    finally:
        est.shutdown()
