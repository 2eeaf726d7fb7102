"""The ray backend on a real Spark standalone cluster (a master and two workers on 127.0.0.1):
Ray-on-Spark starts a Ray worker node on each executor, the actors run there and read their
own node's partitions first; Ray's token auth stays on. The driver runs in its own interpreter."""

import pytest

from orca.core.testing.clusters import processes_mentioning, run_python, spark_standalone_cluster

DRIVER = r'''
import json, os, numpy as np, pandas as pd, torch, ray
from torch import nn
from orca.core import init_orca_context, stop_orca_context
from orca.torch import Estimator

ctx = init_orca_context(cluster_mode="standalone", master=os.environ["ORCA_MASTER"], cores=1, num_nodes=2,
                        memory="1g", object_store_memory=100 * 2**20)
spark = ctx.spark_session()
rng = np.random.default_rng(0)
x = rng.normal(size=(8000, 8)).astype(np.float32)   # 4 partitions of ~72 KB: objects in plasma
y = (x @ rng.normal(size=8).astype(np.float32) > 0).astype(np.float32)
df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(4)
torch.manual_seed(0)
est = Estimator.from_torch(model=nn.Sequential(nn.Linear(8, 1), nn.Sigmoid()), loss=nn.BCELoss(),
                           optimizer=lambda m, c: torch.optim.Adam(m.parameters(), lr=0.05), backend="ray",
                           workers_per_node=1)
hist = est.fit(df, epochs=4, batch_size=64, feature_cols=["x"], label_cols=["y"])
placement = est._group.last_placement
actor_nodes = est._group.call(lambda r: ray.get_runtime_context().get_node_id())
runtime = ctx.ray_runtime()
labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}
pred = est.predict(df, feature_cols=["x"]).toPandas()
with torch.no_grad():
    want = est.get_model()(torch.from_numpy(np.stack(pred["x"].to_numpy()))).numpy()[:, 0]
acc = float(((pred["prediction"].to_numpy() > 0.5) == (pred["y"].to_numpy() > 0.5)).mean())
context_id = ctx.context_id
est.shutdown()
stop_orca_context()
print(json.dumps({
    "mode": runtime.mode, "auth": runtime.auth, "cpus": list(runtime.cpus_per_node), "n": hist[-1]["num_samples"],
    "actor_nodes": actor_nodes, "executor_nodes": [n for n, l in labels.items() if "orca-executor" in l],
    "placed": placement.actor_nodes, "remote_rows": placement.remote_rows, "local_rows": placement.local_rows,
    "min_remote_rows": placement.min_remote_rows(), "crossed_bytes": placement.crossed_bytes,
    "total_bytes": placement.total_bytes, "acc": acc,
    "max_err": float(np.abs(pred["prediction"].to_numpy() - want).max()), "context": context_id}))
'''


@pytest.mark.timeout(600)
def test_ray_backend_runs_on_ray_nodes_started_on_the_spark_executors():
    with spark_standalone_cluster(cores=1, memory="1g", workers=2) as cluster:
        out = run_python(DRIVER, env={"ORCA_MASTER": cluster.master_url}, timeout_s=540)
        left = processes_mentioning(f"orca-ray-{out['context']}")
    assert out["mode"] == "on_spark" and out["auth"] is True
    assert sorted(out["cpus"]) == [0, 1, 1]  # the head on the driver has no CPU: no worker runs there
    assert out["n"] == 8000
    # one actor on each executor's Ray node, where the placement put it
    assert sorted(out["actor_nodes"]) == sorted(out["executor_nodes"]) and len(set(out["actor_nodes"])) == 2
    assert out["placed"] == out["actor_nodes"]
    # local first: only what a node lacks crosses nodes
    assert out["local_rows"] + out["remote_rows"] == 8000
    assert out["remote_rows"] == out["min_remote_rows"] < 8000
    assert 0 <= out["crossed_bytes"] < out["total_bytes"]
    assert out["acc"] > 0.95
    assert out["max_err"] < 1e-6
    assert left == []  # the keepers and their Ray nodes ended with the context
