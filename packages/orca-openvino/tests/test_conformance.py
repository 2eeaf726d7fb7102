"""orca-core's Estimator conformance suite against orca.openvino (inference only) on both backends."""

import pytest
from conftest import F32, linear_model, reference

from orca.core.testing.bad_inputs import BadInputConformance, WrongKind
from orca.core.testing.conformance import EstimatorConformance
from orca.openvino import Estimator


class TestOpenVINOConformance(EstimatorConformance, BadInputConformance):
    supports_fit = False
    supports_save = False  # IR is an .xml + .bin pair; save/load has its own test
    has_model_arguments = True
    supports_save_load = True
    model_suffix = ".xml"  # the .bin goes beside it; load reads both

    @pytest.fixture(scope="class", params=["spark", "ray"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        return Estimator.from_openvino(model_path=linear_model(), config=F32, backend=backend, workers_per_node=2)

    def wrong_kind_arguments(self):
        def build(backend):
            return Estimator.from_openvino(model_path=3, config=F32, backend=backend, workers_per_node=2)

        return {"model_path": WrongKind(build, r"model_path must be a path to an IR \.xml / ONNX file or an ov\.Model"
                                               r".*int")}

    def single_process_predict(self, est, x):
        return reference(est.get_model(), x)[0]
