"""orca-core's Estimator conformance suite, run against orca.mxnet on both backends."""

import pytest
from conftest import linear_creator, plain_predict

from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import EstimatorConformance
from orca.mxnet import Estimator, create_config


class MSE:
    """The conformance suite checks val_loss against the mean squared error: Gluon's L2Loss is half of it."""

    def __call__(self, config):
        from mxnet import gluon

        class Squared(gluon.loss.Loss):
            def __init__(self):
                super().__init__(weight=1.0, batch_axis=0)

            def hybrid_forward(self, F, pred, label):
                label = label.reshape(pred.shape)
                return F.mean(F.square(pred - label), axis=self._batch_axis, exclude=True)

        return Squared()


class TestMXNetConformance(EstimatorConformance, BadInputConformance):
    #: CI runs the launcher-level tests on ray (orca-mxnet's default) and the partition matrix on spark
    launcher_backends = ("ray",)
    partition_backends = ("spark",)

    @pytest.fixture(scope="class", params=["ray", "spark"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.05}, seed=0)
        return Estimator.from_mxnet(config=config, model_creator=linear_creator(), loss_creator=MSE(),
                                    backend=backend, workers_per_node=2)

    def single_process_predict(self, est, x):
        return plain_predict(est.get_model(), x)
