"""orca.mxnet's default (ray) backend on a real Spark standalone cluster laid out as a user's
one-machine cluster often is: a master and ONE worker offering 2 cores on 127.0.0.1, and
``init_orca_context(cluster_mode="standalone", cores=1, num_nodes=2)``, i.e. two 1-core
executors on that worker. Ray-on-Spark starts a Ray worker node on each executor (two on one
host) and the Gluon workers train and predict there (scaffolding shared with orca-torch and
orca-tf, which run two 1-core workers: orca.core.testing.ray_on_spark)."""

import pytest

from orca.core.testing.matrix import skip_unless_full_matrix
from orca.core.testing.ray_on_spark import check_ray_on_spark_fit, run_on_ray_on_spark

DRIVER = r'''
import mxnet as mx
from orca.core.testing.ray_on_spark import DriverRun
from orca.mxnet import Estimator, create_config

def model(config):
    from mxnet import gluon
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(1, in_units=8, activation="sigmoid"))
    return net

def loss(config):
    from mxnet import gluon
    return gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True)

run = DriverRun.start()
est = Estimator.from_mxnet(config=create_config(optimizer="adam", optimizer_params={"learning_rate": 0.05}, seed=0),
                           model_creator=model, loss_creator=loss, workers_per_node=1)  # the default backend: ray
assert est.backend == "ray"
run.fitted(est, est.fit(run.df, epochs=4, batch_size=64, feature_cols=["x"], label_cols=["y"]))
pred = est.predict(run.df, feature_cols=["x"]).toPandas()
run.finish(est, pred, est.get_model()(mx.nd.array(run.features(pred))).asnumpy()[:, 0])
'''


@pytest.mark.timeout(600)
def test_default_ray_backend_runs_on_ray_nodes_started_on_the_spark_executors():
    # the engine path (Ray nodes on the executors, actors placed there, a lost executor) is the
    # same for every framework: orca-torch's test runs it in CI; this package's Ray-launcher and
    # cluster tests (test_cluster.py) run its runner on a real two-node Ray
    skip_unless_full_matrix("orca-torch's test_ray_on_spark.py")
    check_ray_on_spark_fit(run_on_ray_on_spark(DRIVER, timeout_s=540, workers=1))
