"""orca.torch on real multi-process clusters on this machine: a Spark standalone master +
worker (spark and bigdl backends) and a two-node Ray cluster (ray backend). Each driver runs in its
own interpreter, since the test session already holds the local context."""

import pytest

from orca.core.testing.clusters import run_python

pytestmark = pytest.mark.timeout(600)

DRIVER = r'''
import json, os, numpy as np, torch
from torch import nn
from orca.core import init_orca_context, stop_orca_context
from orca.torch import Estimator

kinds = os.environ["ORCA_TEST_KINDS"].split(",")
if kinds != ["ray"]:
    ctx = init_orca_context(cluster_mode="standalone", master=os.environ["ORCA_MASTER"], cores=2, num_nodes=1,
                            memory="1g")
else:
    ctx = init_orca_context(runtime="ray", address=os.environ["ORCA_RAY_ADDRESS"])
spark = ctx.spark_session()
import pandas as pd
rng = np.random.default_rng(0)
x = rng.normal(size=(200, 4)).astype(np.float32)
y = (x @ np.array([1, -2, 0.5, 3], np.float32)).astype(np.float32)
df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(3)
out = {}
for kind in kinds:  # one driver (one context) for the backends that share a cluster
    torch.manual_seed(0)
    est = Estimator.from_torch(model=nn.Linear(4, 1), optimizer=lambda m, c: torch.optim.SGD(m.parameters(), lr=0.1),
                               loss=nn.MSELoss(), backend=kind, workers_per_node=1 if kind == "ray" else 2)
    hist = est.fit(df, epochs=5, batch_size=20, feature_cols=["x"], label_cols=["y"])
    digests = est.worker_weight_digests()
    pred = est.predict(df, feature_cols=["x"]).toPandas()
    model = est.get_model()
    with torch.no_grad():
        want = model(torch.from_numpy(np.stack(pred["x"].to_numpy()))).numpy()[:, 0]
    nodes = None
    if kind == "ray":
        import ray
        nodes = len(set(est._group.call(lambda r: ray.get_runtime_context().get_node_id())))
    est.shutdown()
    out[kind] = {"loss": hist.history["train_loss"], "workers": len(digests), "same": len(set(digests)) == 1,
                 "max_err": float(np.abs(np.stack(pred["prediction"].to_numpy())[:, 0] - want).max()), "n": hist[-1]["num_samples"],
                 "nodes": nodes}
stop_orca_context()
print(json.dumps(out))
'''


def test_spark_and_bigdl_backends_train_on_a_standalone_cluster(spark_standalone_master):
    both = run_python(DRIVER, env={"ORCA_TEST_KINDS": "spark,bigdl", "ORCA_MASTER": spark_standalone_master},
                      timeout_s=500)
    assert sorted(both) == ["bigdl", "spark"], both
    for out in both.values():
        assert out["n"] == 200 and out["workers"] == 2 and out["same"], both
        assert out["loss"][-1] < 0.05 * out["loss"][0], both
        assert out["max_err"] < 1e-5, both


def test_ray_backend_trains_across_two_ray_nodes(ray_cluster_address, ray_cluster_env):
    env = dict(ray_cluster_env, ORCA_TEST_KINDS="ray", ORCA_RAY_ADDRESS=ray_cluster_address)
    out = run_python(DRIVER, env=env, timeout_s=500)["ray"]
    assert out["n"] == 200 and out["workers"] == 2 and out["same"]
    assert out["nodes"] == 2  # one worker per Ray node
    assert out["loss"][-1] < 0.05 * out["loss"][0]
    assert out["max_err"] < 1e-5
