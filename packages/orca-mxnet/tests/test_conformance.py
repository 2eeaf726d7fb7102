"""orca-core's Estimator conformance suite, run against orca.mxnet on both backends."""

import pytest
from conftest import linear_creator, plain_predict, softmax_loss

from orca.core.testing.bad_inputs import BadInputConformance, WrongKind
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
    supports_class_labels = True
    has_model_arguments = True
    supports_save_load = True
    model_suffix = ".params"

    @pytest.fixture(scope="class", params=["ray", "spark"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.05}, seed=0)
        return Estimator.from_mxnet(config=config, model_creator=linear_creator(), loss_creator=MSE(),
                                    backend=backend, workers_per_node=2)

    def make_classifier(self, backend):
        config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.05}, seed=0)
        return Estimator.from_mxnet(config=config, model_creator=linear_creator(n_out=3), loss_creator=softmax_loss,
                                    backend=backend, workers_per_node=2)

    def wrong_kind_arguments(self):
        def make(**wrong):
            def build(backend):
                args = {"config": create_config(seed=0), "model_creator": linear_creator(), "loss_creator": MSE(),
                        **wrong}
                return Estimator.from_mxnet(**args, backend=backend, workers_per_node=2)

            return build

        return {
            "model_creator": WrongKind(make(model_creator="net"), r"model_creator must be a function.*got str"),
            "loss_creator": WrongKind(make(loss_creator="l2"), r"loss_creator must be a function.*got str"),
            "model_creator_result": WrongKind(make(model_creator=lambda config: "net"),
                                              r"model_creator returned str; return a mxnet\.gluon\.Block", "worker"),
            "loss_creator_result": WrongKind(make(loss_creator=lambda config: "l2"),
                                             r"loss_creator returned str; return a gluon loss", "worker"),
        }

    def single_process_predict(self, est, x):
        return plain_predict(est.get_model(), x)
