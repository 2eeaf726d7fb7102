"""orca-core's Estimator conformance suite, run against orca.tf on both backends."""

import numpy as np
from conftest import linear_creator

from orca.core.testing.conformance import EstimatorConformance
from orca.tf import Estimator


class TestKerasConformance(EstimatorConformance):
    def make_estimator(self, backend):
        return Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend=backend, workers_per_node=2,
                                    verbose=0)

    def single_process_predict(self, est, x):
        return est.get_model()(np.asarray(x, np.float32)).numpy()
