"""orca.tf's default (ray) backend on a real Spark standalone cluster (a master and two 1-core
workers on 127.0.0.1): Ray-on-Spark starts a Ray worker node on each executor and the Keras
workers train and predict there (Ray-on-Spark asked for with ``init_ray_on_spark=True``, which
failed inside Ray's own ``setup_ray_cluster`` before Orca started its Ray nodes itself) (scaffolding shared with orca-torch: orca.core.testing.ray_on_spark)."""

import pytest

from orca.core.testing.matrix import skip_unless_full_matrix
from orca.core.testing.ray_on_spark import check_ray_on_spark_fit, run_on_ray_on_spark

DRIVER = r'''
from orca.core.testing.ray_on_spark import DriverRun
from orca.tf import Estimator

def creator(config):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy")
    return model

run = DriverRun.start(init_ray_on_spark=True)  # asked for explicitly (the default in a cluster mode too)
est = Estimator.from_keras(model_creator=creator, workers_per_node=1, verbose=0)  # the default backend: ray
assert est.backend == "ray"
run.fitted(est, est.fit(run.df, epochs=4, batch_size=64, feature_cols=["x"], label_cols=["y"]))
pred = est.predict(run.df, feature_cols=["x"]).toPandas()
run.finish(est, pred, est.get_model()(run.features(pred)).numpy()[:, 0])
'''


@pytest.mark.timeout(600)
def test_default_ray_backend_runs_on_ray_nodes_started_on_the_spark_executors():
    # the engine path (Ray nodes on the executors, actors placed there, a lost executor) is the
    # same for every framework: orca-torch's test runs it in CI; this package's Ray-launcher and
    # cluster tests (test_cluster.py) run its runner on a real two-node Ray
    skip_unless_full_matrix("orca-torch's test_ray_on_spark.py")
    check_ray_on_spark_fit(run_on_ray_on_spark(DRIVER, timeout_s=540))
