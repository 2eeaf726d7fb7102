"""orca.torch from a Spark Connect client (no classic session, no JVM in the client): the ``spark``
and ``bigdl`` backends fit a Connect DataFrame on a real Connect server's executors to the exact
SGD weight of the same global batches, evaluate it and predict a Connect DataFrame.

One server (pyspark's ``start-connect-server.sh``, ``local[2]`` on 127.0.0.1, a token) and one
client process serve the module; orca-core's ``test_spark_connect.py`` covers the launcher itself
(classic-equal numbers, refusals, a lost worker).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orca.core.testing.clusters import pyspark_home, run_python, spark_connect_server

pytestmark = pytest.mark.skipif(not any((pyspark_home() / "jars").glob("spark-connect_*.jar")),
                                reason="this pyspark ships no Spark Connect server (pyspark >= 4 does)")

BACKENDS = ("spark", "bigdl")

CLIENT = """
import json, os
import torch
from torch import nn
from pyspark.sql import functions as F
from orca.core import init_orca_context, stop_orca_context
from orca.torch import Estimator

ctx = init_orca_context(cluster_mode="spark-connect", remote=os.environ["ORCA_TEST_REMOTE"], worker_timeout_s=120.0)
spark = ctx.spark_session()
# ids 0-3 on partition 0 (worker 0), 4-7 on partition 1 (worker 1): x = (id + 1) / 8, y = 2x
xs = ((F.col("id") + 1) / 8).cast("float")
df = spark.range(0, 8, 1, 2).select("id", xs.alias("xs"), F.array(xs).alias("x"), F.array((2 * xs).cast("float")).alias("y"))

def model():
    m = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        m.weight.fill_(0.5)
    return m

out = {"session": type(spark).__module__}
for backend in os.environ["ORCA_TEST_BACKENDS"].split(","):
    est = Estimator.from_torch(model=model(), optimizer=lambda m, config: torch.optim.SGD(m.parameters(), lr=0.1),
                               loss=nn.MSELoss(), backend=backend, workers_per_node=2)
    est.fit(df, epochs=2, batch_size=4, feature_cols=["x"], label_cols=["y"], shuffle=False)
    metrics = est.evaluate(df, batch_size=4, feature_cols=["x"], label_cols=["y"])
    pred = est.predict(df, batch_size=4, feature_cols=["x"])
    rows = pred.orderBy("id").select("xs", "prediction").collect()
    out[backend] = {"w": float(est.get_model().weight.item()), "metrics": {k: float(v) for k, v in metrics.items()},
                    "pred_type": type(pred).__module__, "x": [float(r["xs"]) for r in rows],
                    "pred": [float(r["prediction"][0]) for r in rows]}
    est.shutdown()
stop_orca_context()
print(json.dumps(out))
"""


def expected_sgd_weight(x: np.ndarray, y: np.ndarray, w: float, lr: float, batches: list[list[int]]) -> float:
    for idx in batches:
        xb, yb = x[idx], y[idx]
        w = w - lr * float(np.mean(2 * (w * xb - yb) * xb))
    return w


@pytest.fixture(scope="module")
def connect_run() -> dict[str, Any]:
    with spark_connect_server("local[2]") as server:
        return dict(run_python(CLIENT, env={"ORCA_TEST_REMOTE": server.remote,
                                            "ORCA_TEST_BACKENDS": ",".join(BACKENDS)}, timeout_s=400))


@pytest.mark.timeout(500)
@pytest.mark.parametrize("backend", BACKENDS)
def test_connect_fit_is_exact_sgd_and_evaluate_and_predict_follow(connect_run: dict[str, Any], backend: str) -> None:
    assert connect_run["session"] == "pyspark.sql.connect.session"
    run = connect_run[backend]
    x = (np.arange(1, 9, dtype=np.float64) / 8).astype(np.float32).astype(np.float64)
    y = (2 * x.astype(np.float32)).astype(np.float64)
    # worker 0 holds rows 0-3 and worker 1 rows 4-7; step s takes 2 rows from each
    want = expected_sgd_weight(x, y, 0.5, 0.1, [[0, 1, 4, 5], [2, 3, 6, 7]] * 2)
    assert run["w"] == pytest.approx(want, abs=1e-6)
    assert run["pred_type"] == "pyspark.sql.connect.dataframe"
    np.testing.assert_allclose(run["pred"], np.asarray(run["x"]) * run["w"], rtol=1e-6)
    mse = float(np.mean((run["w"] * x - y) ** 2))
    loss = next(v for k, v in run["metrics"].items() if "loss" in k)
    assert loss == pytest.approx(mse, rel=1e-4)
