"""orca.openvino on real multi-process clusters on this machine: a Spark standalone master + worker
(DataFrame on the executors, numpy in Spark tasks) and a two-node Ray cluster (numpy and XShards in
one actor per node). Each driver runs in its own interpreter: the session holds the local context."""

import pytest
from conftest import linear_model, save_ir

from orca.core.testing.clusters import run_python
from orca.core.testing.matrix import STANDALONE_COVERAGE, full_matrix_only

pytestmark = pytest.mark.timeout(240)

DRIVER = r'''
import json, os, numpy as np, pandas as pd, openvino as ov
from orca.core import init_orca_context, stop_orca_context
from orca.core.data import XShards
from orca.openvino import Estimator

kind, path = os.environ["ORCA_TEST_KIND"], os.environ["ORCA_TEST_IR"]
f32 = {"INFERENCE_PRECISION_HINT": "f32"}
if kind == "spark":
    ctx = init_orca_context(cluster_mode="standalone", master=os.environ["ORCA_MASTER"], cores=2, num_nodes=1,
                            memory="1g")
else:
    ctx = init_orca_context(runtime="ray", address=os.environ["ORCA_RAY_ADDRESS"])
x = np.random.default_rng(0).normal(size=(101, 4)).astype(np.float32)
compiled = ov.Core().compile_model(path, "CPU", f32)
want = compiled(x, share_inputs=False)[0]
est = Estimator.from_openvino(model_path=path, backend=kind, config=f32)
errs = {"array": float(np.abs(est.predict(x, batch_size=8) - want).max())}
nodes = None
if kind == "spark":
    df = ctx.spark_session().createDataFrame(pd.DataFrame({"i": np.arange(101), "x": list(x)})).repartition(3)
    out = est.predict(df, feature_cols=["x"], batch_size=16).toPandas().sort_values("i")
    errs["dataframe"] = float(np.abs(np.stack(out["prediction"].to_numpy()) - want).max())  # a DenseVector a row
else:
    import cloudpickle, ray
    shards = est.predict(XShards.partition({"x": x}, num_shards=3), batch_size=8).collect()
    errs["xshards"] = float(np.abs(np.concatenate([s["prediction"] for s in shards]) - want).max())
    probe = cloudpickle.dumps(lambda r: ray.get_runtime_context().get_node_id())
    nodes = len(set(est._group.call(cloudpickle.loads(probe))))
est.shutdown()
stop_orca_context()
print(json.dumps({"errs": errs, "nodes": nodes}))
'''


@pytest.fixture(scope="module")
def ir_path(tmp_path_factory):
    return save_ir(linear_model(), tmp_path_factory.mktemp("cluster"))


@full_matrix_only(STANDALONE_COVERAGE)
def test_dataframe_and_arrays_on_a_spark_standalone_cluster(spark_standalone_master, ir_path):
    out = run_python(DRIVER, env={"ORCA_TEST_KIND": "spark", "ORCA_MASTER": spark_standalone_master,
                                  "ORCA_TEST_IR": ir_path}, timeout_s=200)
    assert set(out["errs"]) == {"array", "dataframe"}
    assert max(out["errs"].values()) < 1e-5


def test_arrays_and_xshards_on_actors_across_two_ray_nodes(ray_cluster_address, ray_cluster_env, ir_path):
    env = dict(ray_cluster_env, ORCA_TEST_KIND="ray", ORCA_RAY_ADDRESS=ray_cluster_address, ORCA_TEST_IR=ir_path)
    out = run_python(DRIVER, env=env, timeout_s=200)
    assert set(out["errs"]) == {"array", "xshards"}
    assert max(out["errs"].values()) < 1e-5
    assert out["nodes"] == 2  # one actor per Ray node
