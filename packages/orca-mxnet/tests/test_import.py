"""orca-mxnet is not built yet: its framework installs, the namespace imports, and the
missing Estimator fails with a clear message instead of a stand-in."""

import importlib

import pytest


def test_mxnet_imports_and_computes_with_numpy_1_23():
    import mxnet as mx
    import numpy as np

    # mxnet 1.9.1 uses np.bool, which numpy 1.24 removed: this env must keep numpy < 1.24.
    assert np.__version__.startswith("1.23."), np.__version__
    assert mx.nd.array([1.0, 2.0, 3.0]).sum().asscalar() == 6.0


def test_pandas_and_pyarrow_work_with_this_numpy():
    # pyarrow 26 needs numpy 2 at import time and does not declare it: orca-mxnet pins pyarrow<26.
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    frame = pd.DataFrame({"x": np.arange(4, dtype=np.float32)})
    assert pa.Table.from_pandas(frame).to_pandas().equals(frame)


def test_orca_mxnet_imports_as_part_of_the_orca_namespace():
    import orca
    import orca.core
    import orca.mxnet

    # PEP 420: no distribution ships orca/__init__.py.
    assert getattr(orca, "__file__", None) is None
    assert orca.mxnet.__version__


def test_estimator_import_says_it_is_not_implemented_yet():
    with pytest.raises(ImportError, match=r"orca\.mxnet\.Estimator is not implemented yet"):
        from orca.mxnet import Estimator  # noqa: F401


@pytest.mark.parametrize("name", ["Estimator", "create_config"])
def test_every_planned_name_raises_import_error(name):
    module = importlib.import_module("orca.mxnet")
    with pytest.raises(ImportError, match="not implemented yet"):
        getattr(module, name)


def test_unknown_attribute_is_a_plain_attribute_error():
    module = importlib.import_module("orca.mxnet")
    assert not hasattr(module, "no_such_thing")
