"""orca-bigdl is not built yet: its framework installs, the namespace imports, and the
missing Estimator fails with a clear message instead of a stand-in."""

import importlib

import pytest


def test_bigdl_dllib_imports_with_its_jars():
    import glob
    import os

    import bigdl.dllib
    import numpy as np
    import pyspark

    assert pyspark.__version__.startswith("3.5."), pyspark.__version__
    assert int(np.__version__.split(".")[0]) < 2, np.__version__  # numpy 2 breaks bigdl's Sample
    # init_nncontext needs both jars: dllib's own and bigdl-core's native bundle.
    dllib_dir = os.path.dirname(bigdl.dllib.__file__)
    site = os.path.dirname(os.path.dirname(dllib_dir))
    assert glob.glob(os.path.join(dllib_dir, "..", "share", "dllib", "lib", "*.jar")), dllib_dir
    assert glob.glob(os.path.join(site, "bigdl", "share", "core", "lib", "*.jar")), site


def test_pandas_and_pyarrow_work_with_this_numpy():
    # pyarrow 26 needs numpy 2 at import time and does not declare it: orca-bigdl pins pyarrow<26.
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    frame = pd.DataFrame({"x": np.arange(4, dtype=np.float32)})
    assert pa.Table.from_pandas(frame).to_pandas().equals(frame)


def test_orca_bigdl_imports_as_part_of_the_orca_namespace():
    import orca
    import orca.bigdl
    import orca.core

    # PEP 420: no distribution ships orca/__init__.py.
    assert getattr(orca, "__file__", None) is None
    assert orca.bigdl.__version__


def test_estimator_import_says_it_is_not_implemented_yet():
    with pytest.raises(ImportError, match=r"orca\.bigdl\.Estimator is not implemented yet"):
        from orca.bigdl import Estimator  # noqa: F401


@pytest.mark.parametrize("name", ["Estimator"])
def test_every_planned_name_raises_import_error(name):
    module = importlib.import_module("orca.bigdl")
    with pytest.raises(ImportError, match="not implemented yet"):
        getattr(module, name)


def test_unknown_attribute_is_a_plain_attribute_error():
    module = importlib.import_module("orca.bigdl")
    assert not hasattr(module, "no_such_thing")
