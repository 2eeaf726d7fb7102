import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

pytest_plugins = ["orca.core.testing.fixtures"]


def _has_horovod() -> bool:
    try:
        return importlib.util.find_spec("horovod.torch") is not None
    except ImportError:
        return False


#: the horovod backend where Horovod is built (the horovod nox session, ``-m horovod``)
HOROVOD = ["horovod"] if _has_horovod() else []


@pytest.fixture(params=["ray", "spark"])
def backend(request):
    """Every behaviour is checked on both torch.distributed backends (the bigdl one shares their
    code but for the gradient sync: it runs the tests that pin numbers, see all_backends)."""
    return request.param


@pytest.fixture(params=["bigdl", "ray", "spark", *HOROVOD])
def all_backends(request):
    """The tests that pin exact numbers run on every backend (horovod where Horovod is built)."""
    return request.param


def sgd(lr):
    return lambda model, config: torch.optim.SGD(model.parameters(), lr=lr)


class LinearNet(nn.Module):
    def __init__(self, n_in=4):
        super().__init__()
        self.fc = nn.Linear(n_in, 1)

    def forward(self, x):
        return self.fc(x)


class TwoHeads(nn.Module):
    """A two-output model: a score (one value per row) and three class scores."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 3)

    def forward(self, x):
        return self.a(x), self.b(x)


def predict_plain(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(x, np.float32))).numpy()


def pytest_configure(config):
    config.addinivalue_line("markers", "horovod: runs on the horovod backend (the horovod nox session: -m horovod)")


def pytest_collection_modifyitems(session, config, items):
    """Models and callbacks defined in test modules travel to the workers by value; a test
    parametrized with the horovod backend is marked ``horovod``."""
    import sys

    import cloudpickle

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "horovod" in params.values():
            item.add_marker(pytest.mark.horovod)

    for name in {item.module.__name__ for item in items} | {__name__}:
        cloudpickle.register_pickle_by_value(sys.modules[name])
