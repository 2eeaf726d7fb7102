"""orca-core's Estimator conformance suite (behaviour, liveness, recovery from killed workers) and
its bad-input matrix, run against the TF1 graph Estimator, ``Estimator.from_graph``, on its default
backend."""


import numpy as np
import pytest
import tensorflow as tf

from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import EstimatorConformance
from orca.tf import Estimator

v1 = tf.compat.v1


def linear_graph():
    """The suite's 4-input linear regression as a tf.compat.v1 graph."""
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, (None, 4), name="x")
        y = v1.placeholder(tf.float32, (None,), name="y")
        w = v1.get_variable("w", (4, 1), initializer=v1.zeros_initializer())
        b = v1.get_variable("b", (1,), initializer=v1.zeros_initializer())
        pred = tf.identity((tf.matmul(x, w) + b)[:, 0], name="pred")
        loss = tf.reduce_mean((pred - y) ** 2)
    return x, y, pred, loss


class TestGraphConformance(EstimatorConformance, BadInputConformance):
    #: the launcher-level tests (a slow fit, a stalled worker, recovery after a kill) run for the Keras
    #: Estimator (test_conformance.py); the graph runner's part of them (its state) is checked by the
    #: save/load, failing-call and killed-worker tests here (CI time; ORCA_FULL_MATRIX=1 runs them too)
    launcher_backends = ()
    #: the partition matrix on the spark launcher runs here (the Keras suite runs it on ray)
    partition_backends = ("spark",)
    #: the share-on-disk test runs for the Keras Estimator on the same launcher (bigdl; CI time)
    spill_backends = ()
    #: the bad-input matrix: its driver-side cases run here (the worker-side ones, on the shared
    #: engine, run for the Keras Estimator on ray in CI; ORCA_FULL_MATRIX=1 runs them here too)
    supports_data_creator = True  # f(config, batch_size) returning a batched tf.data.Dataset
    supports_save_load = True
    model_suffix = ""  # save/load take a TF checkpoint prefix: <prefix>.index, .data-*, .meta

    @pytest.fixture(scope="class", params=["spark"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        x, y, pred, loss = linear_graph()
        return Estimator.from_graph(inputs=x, outputs=pred, labels=y, loss=loss,
                                    optimizer=v1.train.GradientDescentOptimizer(0.05), backend=backend,
                                    workers_per_node=2, verbose=0)

    def model_files(self, path):
        """load reads the checkpoint's index first (then the .data-* it points to)."""
        return [path + ".index"]

    def single_process_predict(self, est, x):
        """The trained variables in plain numpy: ``x @ w + b``."""
        model = est.get_model()
        return np.asarray(x, np.float32) @ model["w"][:, 0] + model["b"][0]
