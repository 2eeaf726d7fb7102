"""orca.mxnet on real multi-process clusters on 127.0.0.1: a Spark standalone master + worker and a
two-node Ray cluster, each driven from a fresh interpreter."""

import json
import textwrap

import pytest

from orca.core.testing.clusters import run_python
from orca.core.testing.matrix import STANDALONE_COVERAGE, full_matrix_only

pytestmark = pytest.mark.timeout(600)

DRIVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from orca.core import init_orca_context, stop_orca_context
    from orca.mxnet import Estimator, create_config

    def model(config):
        from mxnet import gluon
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(1, in_units=4))
        return net

    def loss(config):
        from mxnet import gluon
        return gluon.loss.L2Loss()

    ctx = init_orca_context(**json.loads(sys.argv[1]))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
    est = Estimator.from_mxnet(config=create_config(optimizer_params={"learning_rate": 0.1}, seed=0),
                               model_creator=model, loss_creator=loss, backend=BACKEND, workers_per_node=WPN)
    hist = est.fit((x, y), epochs=10, batch_size=32)
    import mxnet as mx
    want = est.get_model()(mx.nd.array(x)).asnumpy()  # the trained model, run on the driver
    out = {"first": hist.history["train_loss"][0], "last": hist.history["train_loss"][-1],
           "digests": est.worker_weight_digests(), "workers": est.num_workers, "nodes": None,
           "max_err": float(abs(est.predict(x, batch_size=64).reshape(want.shape) - want).max())}
    if BACKEND == "ray":
        import cloudpickle, ray
        probe = cloudpickle.dumps(lambda r: ray.get_runtime_context().get_node_id())
        out["nodes"] = len(set(est._group.call(cloudpickle.loads(probe))))
    est.shutdown()
    stop_orca_context()
    print(json.dumps(out))
    """
)


def _check(out):
    assert out["workers"] == 2
    assert len(out["digests"]) == 2 and len(set(out["digests"])) == 1
    assert out["last"] < out["first"] * 0.05
    assert out["max_err"] < 1e-5  # the workers' predictions are the trained model's


@full_matrix_only(STANDALONE_COVERAGE)
def test_spark_backend_trains_on_a_standalone_cluster(spark_standalone_master):
    args = {"cluster_mode": "standalone", "master": spark_standalone_master, "cores": 2, "memory": "1g",
            "num_nodes": 1}
    code = DRIVER.replace("BACKEND", "'spark'").replace("WPN", "2").replace("sys.argv[1]", repr(json.dumps(args)))
    _check(run_python(code, timeout_s=500))


def test_ray_backend_trains_across_two_ray_nodes(ray_cluster_address, ray_cluster_env):
    args = {"runtime": "ray", "address": ray_cluster_address}
    code = DRIVER.replace("BACKEND", "'ray'").replace("WPN", "1").replace("sys.argv[1]", repr(json.dumps(args)))
    out = run_python(code, timeout_s=500, env=ray_cluster_env)
    _check(out)
    assert out["nodes"] == 2  # one worker on each Ray node
