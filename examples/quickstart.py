"""The smallest whole job for each framework: fit (or load) a linear model, predict a Spark DataFrame.

One script, one ``--framework`` (``torch``, ``tf``, ``mxnet``, ``bigdl``, ``openvino``): it starts
Orca locally (Spark on 127.0.0.1, 2 cores), builds a DataFrame of 512 rows ``y = x @ w + 0.25``,
trains the framework's linear model data-parallel on 2 workers (OpenVINO, inference only, builds
the exact model instead), predicts the DataFrame and checks that the predictions are close to the
true ``y``. Only the framework's package and its framework are needed, so this is also what
``nox -s install_check`` runs in each environment installed from the built wheels by name.

    python examples/quickstart.py --framework torch
    python examples/quickstart.py --framework tf --backend spark

It prints one line of JSON and exits with status 1 if the predictions are off.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

TRUE_W = np.array([1.5, -2.0, 0.5, 3.0], np.float32)
TOLERANCE = 0.1  # mean absolute error of the predictions against the true y


def torch_estimator(backend: str) -> Any:
    import torch
    from torch import nn

    from orca.torch import Estimator

    def model_creator(config: dict[str, Any]) -> nn.Module:
        torch.manual_seed(0)
        return nn.Linear(4, 1)

    return Estimator.from_torch(model=model_creator,
                                optimizer=lambda model, config: torch.optim.SGD(model.parameters(), lr=0.1),
                                loss=nn.MSELoss(), backend=backend or "spark", workers_per_node=2, use_tqdm=False)


def tf_estimator(backend: str) -> Any:
    from orca.tf import Estimator

    def model_creator(config: dict[str, Any]) -> Any:
        import keras

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model

    return Estimator.from_keras(model_creator=model_creator, backend=backend or "spark", workers_per_node=2,
                                verbose=0)


def mxnet_estimator(backend: str) -> Any:
    from orca.mxnet import Estimator, create_config

    def model_creator(config: dict[str, Any]) -> Any:
        from mxnet import gluon

        net = gluon.nn.Dense(1, in_units=4)
        return net

    def loss_creator(config: dict[str, Any]) -> Any:
        from mxnet import gluon

        return gluon.loss.L2Loss()

    config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.2}, seed=0)
    return Estimator.from_mxnet(config=config, model_creator=model_creator, loss_creator=loss_creator,
                                backend=backend or "spark", workers_per_node=2)


def bigdl_estimator(backend: str) -> Any:
    from bigdl.dllib.nn.criterion import MSECriterion
    from bigdl.dllib.nn.layer import Linear, Sequential
    from bigdl.dllib.optim.optimizer import SGD

    from orca.bigdl import Estimator

    return Estimator.from_bigdl(model=Sequential().add(Linear(4, 1)), loss=MSECriterion(),
                                optimizer=SGD(learningrate=0.1))


def openvino_estimator(backend: str) -> Any:
    import openvino as ov
    from openvino import opset13 as ops

    from orca.openvino import Estimator

    x = ops.parameter([-1, 4], np.float32, name="x")
    y = ops.add(ops.matmul(x, ops.constant(TRUE_W.reshape(4, 1)), False, False), ops.constant(np.float32(0.25)))
    path = os.path.join(tempfile.mkdtemp(prefix="orca-quickstart-"), "linear.xml")
    ov.save_model(ov.Model([y], [x], "linear"), path, compress_to_fp16=False)
    return Estimator.from_openvino(model_path=path, backend=backend or "spark", workers_per_node=2)


ESTIMATORS = {"torch": torch_estimator, "tf": tf_estimator, "mxnet": mxnet_estimator,
              "bigdl": bigdl_estimator, "openvino": openvino_estimator}


def run(framework: str, backend: str = "", epochs: int = 20) -> dict[str, Any]:
    """The whole job for ``framework``; returns its result (``ok``: predictions within TOLERANCE).
    It starts a local Orca context and stops it at the end, unless one is running already (then it
    runs there and leaves it running)."""
    import pandas as pd

    if framework == "bigdl":
        import orca.bigdl  # noqa: F401 - registers BigDL's jars before Orca's Spark starts
    from orca.core import OrcaContext, init_orca_context, stop_orca_context

    t0 = time.perf_counter()
    owned = OrcaContext.active() is None
    ctx = init_orca_context(cluster_mode="local", cores=2, memory="2g")
    try:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(512, 4)).astype(np.float32)
        y = (x @ TRUE_W + 0.25).astype(np.float32)
        df = ctx.spark_session().createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(2)
        est = ESTIMATORS[framework](backend)
        history = None
        if framework != "openvino":
            history = est.fit(df, epochs=epochs, batch_size=32, feature_cols=["x"], label_cols=["y"])
        out = est.predict(df, feature_cols=["x"]).toPandas()
        pred = np.stack(out["prediction"].to_numpy()).reshape(-1)
        mae = float(np.abs(pred - out["y"].to_numpy()).mean())
        est.shutdown()
    finally:
        if owned:
            stop_orca_context()
    return {"framework": framework, "backend": backend or "spark", "rows": int(len(out)),
            "mae": round(mae, 5), "final_loss": None if history is None else float(history[-1]["loss"]),
            "seconds": round(time.perf_counter() - t0, 1), "ok": mae < TOLERANCE and len(out) == len(x)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(ESTIMATORS), required=True)
    parser.add_argument("--backend", default="", help="the Estimator's backend (default: spark)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    result = run(args.framework, args.backend, args.epochs)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
