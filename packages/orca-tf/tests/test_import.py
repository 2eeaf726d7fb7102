"""orca-tf is not built yet: its framework installs, the namespace imports, and the
missing Estimator fails with a clear message instead of a stand-in."""

import importlib

import pytest


def test_tensorflow_imports_and_computes():
    import tensorflow as tf

    assert tf.__version__.startswith("2.")
    assert float(tf.reduce_sum(tf.constant([1.0, 2.0, 3.0]))) == 6.0


def test_orca_tf_imports_as_part_of_the_orca_namespace():
    import orca
    import orca.core
    import orca.tf

    # PEP 420: no distribution ships orca/__init__.py.
    assert getattr(orca, "__file__", None) is None
    assert orca.tf.__version__


def test_estimator_import_says_it_is_not_implemented_yet():
    with pytest.raises(ImportError, match=r"orca\.tf\.Estimator is not implemented yet") as excinfo:
        from orca.tf import Estimator  # noqa: F401
    assert "#5" in str(excinfo.value)


@pytest.mark.parametrize("name", ["Estimator"])
def test_every_planned_name_raises_import_error(name):
    module = importlib.import_module("orca.tf")
    with pytest.raises(ImportError, match="not implemented yet"):
        getattr(module, name)


def test_unknown_attribute_is_a_plain_attribute_error():
    module = importlib.import_module("orca.tf")
    assert not hasattr(module, "no_such_thing")
