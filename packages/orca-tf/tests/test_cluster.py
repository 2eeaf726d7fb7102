"""orca.tf on real multi-process clusters on this machine: a Spark standalone master + worker
(spark backend, two barrier tasks) and a two-node Ray cluster (ray backend, one worker per node).
Each driver runs in its own interpreter, since the test session already holds the local context."""

import pytest

from orca.core.testing.clusters import run_python
from orca.core.testing.matrix import STANDALONE_COVERAGE, full_matrix_only

pytestmark = pytest.mark.timeout(600)

DRIVER = r'''
import json, os, numpy as np
import pandas as pd
from orca.core import init_orca_context, stop_orca_context
from orca.tf import Estimator

def creator(config):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model

kind = os.environ["ORCA_TEST_KIND"]
if kind == "spark":
    ctx = init_orca_context(cluster_mode="standalone", master=os.environ["ORCA_MASTER"], cores=2, num_nodes=1,
                            memory="1g")
else:
    ctx = init_orca_context(runtime="ray", address=os.environ["ORCA_RAY_ADDRESS"])
rng = np.random.default_rng(0)
x = rng.normal(size=(200, 4)).astype(np.float32)
y = (x @ np.array([1, -2, 0.5, 3], np.float32)).astype(np.float32)
est = Estimator.from_keras(model_creator=creator, backend=kind, workers_per_node=2 if kind == "spark" else 1,
                           verbose=0)
nodes = None
if kind == "spark":
    df = ctx.spark_session().createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(3)
    hist = est.fit(df, epochs=5, batch_size=20, feature_cols=["x"], label_cols=["y"])
    out = est.predict(df, feature_cols=["x"]).toPandas()
    xs, pred = np.stack(out["x"].to_numpy()).astype(np.float32), np.stack(out["prediction"].to_numpy())[:, 0]
else:
    hist = est.fit((x, y), epochs=5, batch_size=20)
    xs, pred = x, est.predict(x)[:, 0]
    import cloudpickle, ray
    probe = cloudpickle.dumps(lambda r: ray.get_runtime_context().get_node_id())
    nodes = len(set(est._group.call(cloudpickle.loads(probe))))
digests = est.worker_weight_digests()
want = est.get_model()(xs).numpy()[:, 0]
est.shutdown()
stop_orca_context()
print(json.dumps({"loss": hist.history["loss"], "workers": len(digests), "same": len(set(digests)) == 1,
                  "max_err": float(np.abs(pred - want).max()), "rows": len(pred), "n": hist[-1]["num_samples"],
                  "nodes": nodes}))
'''


@full_matrix_only(STANDALONE_COVERAGE)
def test_spark_backend_trains_on_a_standalone_cluster(spark_standalone_master):
    out = run_python(DRIVER, env={"ORCA_TEST_KIND": "spark", "ORCA_MASTER": spark_standalone_master}, timeout_s=500)
    assert out["n"] == 200 and out["rows"] == 200
    assert out["workers"] == 2 and out["same"]  # two barrier tasks, bit-identical weights
    assert out["loss"][-1] < 0.05 * out["loss"][0]
    assert out["max_err"] < 1e-5


def test_ray_backend_trains_across_two_ray_nodes(ray_cluster_address, ray_cluster_env):
    env = dict(ray_cluster_env, ORCA_TEST_KIND="ray", ORCA_RAY_ADDRESS=ray_cluster_address)
    out = run_python(DRIVER, env=env, timeout_s=500)
    assert out["n"] == 200 and out["rows"] == 200 and out["workers"] == 2 and out["same"]
    assert out["nodes"] == 2  # one worker per Ray node
    assert out["loss"][-1] < 0.05 * out["loss"][0]
    assert out["max_err"] < 1e-5
