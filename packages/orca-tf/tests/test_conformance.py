"""orca-core's Estimator conformance suite, run against orca.tf's Keras Estimator on every backend."""

import numpy as np
import pytest
from conftest import linear_creator

from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import EstimatorConformance
from orca.tf import Estimator


class TestKerasConformance(EstimatorConformance, BadInputConformance):
    refuses_string_features = False  # Keras models may take text (a TextVectorization layer)
    #: CI runs the launcher-level tests on ray (orca-tf's default); the partition matrix on the
    #: spark launcher runs in test_graph_conformance.py (the graph Estimator's default backend)
    launcher_backends = ("ray",)
    partition_backends = ("ray",)

    @pytest.fixture(scope="class", params=["ray", "spark", "bigdl"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        return Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend=backend, workers_per_node=2,
                                    verbose=0)

    def single_process_predict(self, est, x):
        return est.get_model()(np.asarray(x, np.float32)).numpy()
