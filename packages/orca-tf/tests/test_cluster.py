"""orca.tf on a real multi-process cluster on this machine: a two-node Ray cluster (one worker per
node). The driver runs in its own interpreter, since the test session holds the local context."""

import pytest

from orca.core.testing.clusters import run_python

pytestmark = pytest.mark.timeout(600)

DRIVER = r'''
import json, os, numpy as np
from orca.core import init_orca_context, stop_orca_context
from orca.tf import Estimator

def creator(config):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model

ctx = init_orca_context(runtime="ray", address=os.environ["ORCA_RAY_ADDRESS"])
rng = np.random.default_rng(0)
x = rng.normal(size=(200, 4)).astype(np.float32)
y = (x @ np.array([1, -2, 0.5, 3], np.float32)).astype(np.float32)
est = Estimator.from_keras(model_creator=creator, backend="ray", verbose=0)
hist = est.fit((x, y), epochs=5, batch_size=20)
digests = est.worker_weight_digests()
pred = est.predict(x)
want = est.get_model()(x).numpy()
import cloudpickle, ray
probe = cloudpickle.dumps(lambda r: ray.get_runtime_context().get_node_id())
nodes = len({ray.get(a.call.remote(probe)) for a in est._ray.actors})
est.shutdown()
stop_orca_context()
print(json.dumps({"loss": hist.history["loss"], "workers": len(digests), "same": len(set(digests)) == 1,
                  "max_err": float(np.abs(pred - want).max()), "n": hist[-1]["num_samples"], "nodes": nodes}))
'''


def test_ray_backend_trains_across_two_ray_nodes(ray_cluster_address, ray_cluster_env):
    env = dict(ray_cluster_env, ORCA_RAY_ADDRESS=ray_cluster_address)
    out = run_python(DRIVER, env=env, timeout_s=500)
    assert out["n"] == 200 and out["workers"] == 2 and out["same"]
    assert out["nodes"] == 2
    assert out["loss"][-1] < 0.05 * out["loss"][0]
    assert out["max_err"] < 1e-5
