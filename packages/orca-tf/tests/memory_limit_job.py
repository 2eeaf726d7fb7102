"""A Keras fit under Spark's address-space limit on its Python workers, on shares larger than
the limit (see orca.core.testing.memory_limit); run by benchmarks/memory_limit.py in its own
process:

    python memory_limit_job.py OUT.json --limit-mb 3000 --share-mb 3100 --workers 2 --backends bigdl
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from orca.core.testing import memory_limit as ml


def model_creator(config: dict[str, Any]) -> Any:
    """A linear model, zero-initialized (the same start everywhere), SGD on the mean squared error."""
    import keras

    model = keras.Sequential([keras.Input((ml.WIDTH,)), keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(ml.LR), loss="mse")
    return model


def fit_one(backend: str, df: Any, callback: Any, workers: int) -> dict[str, Any]:
    """Fit with no shuffle, one epoch; the kernel and bias."""
    from orca.tf import Estimator

    est = Estimator.from_keras(model_creator=model_creator, backend=backend, workers_per_node=workers)
    try:
        est.fit(df, epochs=1, batch_size=ml.BATCH, feature_cols=["features"], label_cols=["label"],
                shuffle=False, callbacks=[callback])
        kernel, bias = est.get_model().get_weights()
    finally:
        est.shutdown()
    return {"weight": np.asarray(kernel).ravel().tolist(), "bias": float(np.asarray(bias)[0])}


def replay(rows_per_part: int, workers: int) -> tuple[np.ndarray, float]:
    """The kernel and bias of one process taking the same SGD steps on the same global batches."""
    model = model_creator({})
    for x, y in ml.global_batches(rows_per_part, workers):
        model.train_on_batch(x, y[:, None])
    kernel, bias = model.get_weights()
    return np.asarray(kernel).ravel(), float(np.asarray(bias)[0])


if __name__ == "__main__":
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ml.run(fit_one)
