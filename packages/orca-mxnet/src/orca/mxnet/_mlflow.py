"""The MLflow ``pyfunc`` loader of an orca-mxnet model (MLflow has no MXNet flavour).

:meth:`orca.mxnet.Estimator.save_mlflow_model` exports the trained Gluon block (a symbol JSON and
its parameters: data, no pickle) and names this module as the pyfunc ``loader_module``;
``mlflow.pyfunc.load_model(uri)`` then calls :func:`_load_pyfunc` on that folder, wherever
orca-mxnet is installed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

#: the file prefix ``HybridBlock.export`` writes: ``model-symbol.json`` and ``model-0000.params``
PREFIX = "model"


class GluonPredictor:
    """``predict(rows)`` of an exported Gluon block: one input (a 2-D array or a DataFrame of its
    columns), its first output as a numpy array."""

    def __init__(self, folder: str) -> None:
        from mxnet import gluon

        self.net = gluon.SymbolBlock.imports(os.path.join(folder, f"{PREFIX}-symbol.json"), ["data"],
                                             os.path.join(folder, f"{PREFIX}-0000.params"))

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> np.ndarray:
        import mxnet as mx

        x = model_input.to_numpy() if hasattr(model_input, "to_numpy") else np.asarray(model_input)
        if x.dtype == object:  # a DataFrame column of per-row arrays
            x = np.stack(x.reshape(-1))
        out = self.net(mx.nd.array(np.asarray(x, np.float32)))
        return (out[0] if isinstance(out, (list, tuple)) else out).asnumpy()


def _load_pyfunc(data_path: str) -> GluonPredictor:
    """MLflow's pyfunc entry point: ``data_path`` is the exported folder."""
    return GluonPredictor(data_path)
