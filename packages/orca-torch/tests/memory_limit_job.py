"""A torch fit under Spark's address-space limit on its Python workers, on shares larger than
the limit (see orca.core.testing.memory_limit); run by test_memory_limit.py and by
benchmarks/memory_limit.py, in its own process:

    python memory_limit_job.py OUT.json --limit-mb 1300 --share-mb 1400 --workers 2 --backends spark,bigdl
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from torch import nn

from orca.core.testing import memory_limit as ml


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(ml.WIDTH, 1)


def fit_one(backend: str, df: Any, callback: Any, workers: int) -> dict[str, Any]:
    """Fit a linear model with SGD, no shuffle, one epoch; its weight and bias."""
    from orca.torch import Estimator

    model = _model()
    est = Estimator.from_torch(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=ml.LR),
                               loss=nn.MSELoss(), backend=backend, workers_per_node=workers)
    try:
        est.fit(df, epochs=1, batch_size=ml.BATCH, feature_cols=["features"], label_cols=["label"],
                shuffle=False, callbacks=[callback])
        trained = est.get_model()
    finally:
        est.shutdown()
    return {"weight": trained.weight.detach().numpy().ravel().tolist(), "bias": float(trained.bias.detach()[0])}


def replay(rows_per_part: int, workers: int) -> tuple[np.ndarray, float]:
    """The weight and bias of one process taking the same SGD steps on the same global batches."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=ml.LR)
    for x, y in ml.global_batches(rows_per_part, workers):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y)[:, None]).backward()
        opt.step()
    return model.weight.detach().numpy().ravel(), float(model.bias.detach()[0])


if __name__ == "__main__":
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ml.run(fit_one)
