"""The mxnet environment: numpy 1.23 (mxnet 1.9.1 uses np.bool), a pyarrow that imports with it,
and orca.mxnet as part of the orca namespace."""


def test_mxnet_imports_and_computes_with_numpy_1_23():
    import mxnet as mx
    import numpy as np

    assert np.__version__.startswith("1.23."), np.__version__
    assert mx.nd.array([1.0, 2.0, 3.0]).sum().asscalar() == 6.0


def test_pandas_and_pyarrow_work_with_this_numpy():
    # pyarrow 26 needs numpy 2 at import time and does not declare it: orca-mxnet pins pyarrow<26.
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    frame = pd.DataFrame({"x": np.arange(4, dtype=np.float32)})
    assert pa.Table.from_pandas(frame).to_pandas().equals(frame)


def test_orca_mxnet_is_part_of_the_orca_namespace():
    import orca
    import orca.core
    import orca.mxnet

    assert getattr(orca, "__file__", None) is None  # PEP 420: no distribution ships orca/__init__.py
    assert orca.mxnet.Estimator.from_mxnet and orca.mxnet.create_config
