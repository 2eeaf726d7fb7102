import numpy as np
import pytest

import orca.bigdl  # noqa: F401 - registers BigDL's jars before the session's Spark starts

pytest_plugins = ["orca.core.testing.fixtures"]

TRUE_W = np.array([1.5, -2.0, 0.5, 3.0], np.float32)


@pytest.fixture(scope="session", autouse=True)
def _orca_first(orca_context):
    """Orca's Spark session starts before any BigDL object: a BigDL layer built first would create a
    SparkContext of BigDL's own, without Orca's settings."""
    return orca_context


@pytest.fixture(scope="session")
def regression():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    return x, (x @ TRUE_W + 0.25).astype(np.float32)


def linear(n_in=4, n_out=1, zero=False):
    from bigdl.dllib.nn.layer import Linear, Sequential

    model = Sequential().add(Linear(n_in, n_out))
    if zero:
        model.set_weights([np.zeros((n_out, n_in), np.float32), np.zeros(n_out, np.float32)])
    return model


def plain_predict(model, x):
    w, b = model.get_weights()
    return x @ w.T + b
