"""orca-core's Estimator conformance suite, run against orca.torch on all three backends."""

import pytest
import torch
from conftest import LinearNet, predict_plain, sgd
from torch import nn

from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import EstimatorConformance
from orca.torch import Estimator


class TestTorchConformance(EstimatorConformance, BadInputConformance):
    #: CI runs the launcher-level tests on the spark launcher and the partition matrix on ray;
    #: torch on ray also loses and recovers a worker in test_ray_on_spark.py
    launcher_backends = ("spark",)
    partition_backends = ("ray",)

    @pytest.fixture(scope="class", params=["bigdl", "ray", "spark"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        torch.manual_seed(0)
        return Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.05), loss=nn.MSELoss(), backend=backend,
                                    workers_per_node=2)

    def single_process_predict(self, est, x):
        return predict_plain(est.get_model(), x)
