import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pytest_plugins = ["orca.core.testing.fixtures"]


@pytest.fixture(params=["ray", "spark"])
def backend(request):
    """Every behaviour is checked on both strategy backends."""
    return request.param


@pytest.fixture(params=["ray", "spark", "bigdl"])
def all_backends(request):
    """The tests that pin exact numbers also run on the bigdl backend (orca.core.sync: the same steps,
    another all-reduce)."""
    return request.param


def linear_creator(lr=0.1, n_in=4, metrics=("mae",)):
    """A compiled Keras 3 linear model with plain SGD."""

    def create(config):
        import keras

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((n_in,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(config.get("lr", lr)), loss="mse", metrics=list(metrics))
        return model

    return create


def legacy_linear_creator(lr=0.1, n_in=4):
    """The same model in tf_keras (Keras 2)."""

    def create(config):
        import tf_keras as keras

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((n_in,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(config.get("lr", lr)), loss="mse", metrics=["mae"])
        return model

    return create


def regression(rows=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5, 3.0], np.float32) + 0.25).astype(np.float32)
    return x, y


def pytest_collection_modifyitems(session, config, items):
    """Models and callbacks defined in test modules travel to the workers by value."""
    import sys

    import cloudpickle

    for name in {item.module.__name__ for item in items} | {__name__}:
        cloudpickle.register_pickle_by_value(sys.modules[name])
