"""orca-core's Estimator conformance suite, run against orca.tf on every backend.

The suite trains a fresh Estimator for every test that reads a trained one; here one trained
Estimator per backend serves all of them (they only read it; the save/load test shuts its
workers down, and a later use restarts them from the state kept on the driver)."""

import numpy as np
import pytest
from conftest import linear_creator

from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import EstimatorConformance
from orca.tf import Estimator


class TestKerasConformance(EstimatorConformance, BadInputConformance):
    refuses_string_features = False  # Keras models may take text (a TextVectorization layer)
    #: bigdl shares the spark launcher (it differs in the gradient transport only)
    launcher_backends = ("ray", "spark")
    #: the partition matrix on the spark launcher runs in test_graph_conformance.py (the graph
    #: Estimator's default backend): partitions reach the workers the same way (CI time)
    partition_backends = ("ray",)
    _trained = None

    @pytest.fixture(scope="class", params=["ray", "spark", "bigdl"])
    @classmethod
    def backend(cls, request):
        return request.param

    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, backend, data):
        est = Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend=backend, workers_per_node=2,
                                   verbose=0)
        est._conformance_history = est.fit(data["df"], epochs=cls.epochs, batch_size=cls.batch_size,
                                           feature_cols=["x"], label_cols=["y"])
        cls._trained = est
        yield est
        cls._trained = None
        est.shutdown()

    def make_estimator(self, backend):
        live = type(self)._trained
        if live is not None:  # one worker group at a time: a 2-core Ray holds two 1-CPU actors
            live.shutdown()
        return Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend=backend, workers_per_node=2,
                                    verbose=0)

    def single_process_predict(self, est, x):
        return est.get_model()(np.asarray(x, np.float32)).numpy()
