"""orca-core's bad-input matrix against the BigDL Estimator: the mistakes users make with every
Orca Estimator give the same clear errors here, though BigDL trains in its own JVM engine."""

import pytest
from conftest import linear

from orca.core.testing.bad_inputs import BadInputConformance, WrongKind


def _estimator(**wrong):
    from bigdl.dllib.nn.criterion import MSECriterion
    from bigdl.dllib.optim.optimizer import SGD

    from orca.bigdl import Estimator

    args = {"model": linear(), "loss": MSECriterion(), "optimizer": SGD(learningrate=0.05), **wrong}
    return Estimator.from_bigdl(**args)


class TestBigDLBadInputs(BadInputConformance):
    supports_data_creator = False  # BigDL reads DataFrames, XShards and arrays
    has_model_arguments = True
    # BigDL trains in its own engine: none of Orca's workers, their fit options or checkpoint files
    supports_engine_fit_options = False
    supports_workers_per_node = False
    supports_checkpoints = False
    refuses_mixed_validation_kinds = False  # each is turned into a DataFrame of its own
    supports_backend_argument = False  # from_bigdl takes no backend: BigDL's engine is the one
    supports_save_load = True
    batch_size_above_rows_trains = False  # BigDL's engine trains on full batches only: refused on the driver

    @pytest.fixture(scope="class", params=["bigdl"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        return _estimator()

    def wrong_kind_arguments(self):
        return {
            "model": WrongKind(lambda b: _estimator(model="net"), r"model must be a bigdl\.dllib model.*got str"),
            "loss": WrongKind(lambda b: _estimator(loss="mse"), r"loss must be a BigDL criterion.*got str"),
            "optimizer": WrongKind(lambda b: _estimator(optimizer="sgd"), r"optimizer must be a BigDL optim method.*got str"),
        }
