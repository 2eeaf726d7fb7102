"""orca-core's Estimator conformance suite, run against orca.tf's Keras Estimator on every backend."""

import numpy as np
import pytest
from conftest import linear_creator

from orca.core.testing.bad_inputs import BadInputConformance, WrongKind
from orca.core.testing.conformance import EstimatorConformance
from orca.tf import Estimator


def classifier_creator(config):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class TestKerasConformance(EstimatorConformance, BadInputConformance):
    refuses_string_features = False  # Keras models may take text (a TextVectorization layer)
    #: CI runs the launcher-level tests on bigdl (the Spark launcher with orca.core.sync: a Keras rank
    #: runs in the reused Spark worker, which keeps TensorFlow imported across calls, where each failed
    #: call on ray restarts both actors and imports TensorFlow again, ~12 CPU-s a case: issue #35) and
    #: the partition matrix on ray (orca-tf's default backend); the graph Estimator's partition matrix
    #: runs on the spark launcher in test_graph_conformance.py
    launcher_backends = ("bigdl",)
    partition_backends = ("ray",)
    spill_backends = ("bigdl",)  # the Spark launcher (the ray one runs in torch's and mxnet's CI)
    #: each liveness/recovery test starts fresh Keras workers (TF's start: 15-90 s a test on 2 cores);
    #: in CI the toy framework (both launchers), torch (spark) and mxnet (ray) run them for the
    #: shared engine; ORCA_FULL_MATRIX=1 (the GitHub workflow) runs Keras's too
    liveness_backends = ()
    supports_class_labels = True
    has_model_arguments = True
    supports_save_load = True
    model_suffix = ".keras"

    @pytest.fixture(scope="class", params=["ray", "spark", "bigdl"])
    @classmethod
    def backend(cls, request):
        return request.param

    def make_estimator(self, backend):
        return Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend=backend, workers_per_node=2,
                                    verbose=0)

    def make_classifier(self, backend):
        return Estimator.from_keras(model_creator=classifier_creator, backend=backend, workers_per_node=2, verbose=0)

    def wrong_kind_arguments(self):
        def make(**wrong):
            def build(backend):
                return Estimator.from_keras(**{"model_creator": linear_creator(lr=0.05), **wrong}, backend=backend,
                                            workers_per_node=2, verbose=0)

            return build

        return {
            "model_creator": WrongKind(make(model_creator="nope"), r"model_creator must be a function.*got str"),
            "keras_model": WrongKind(make(model_creator=None, keras_model="nope"),
                                     r"keras_model must be a compiled keras\.Model.*got str"),
            "model_creator_result": WrongKind(make(model_creator=lambda config: "nope"),
                                              r"the model creator returned str; return a compiled keras\.Model",
                                              "worker"),
        }

    def single_process_predict(self, est, x):
        return est.get_model()(np.asarray(x, np.float32)).numpy()
