"""Bad input gets a clear error on the driver, before BigDL starts training."""

import textwrap

import numpy as np
import pandas as pd
import pytest
from conftest import linear

from orca.core.testing.clusters import run_python

pytestmark = pytest.mark.timeout(300)


def _est(**kw):
    from bigdl.dllib.nn.criterion import MSECriterion

    from orca.bigdl import Estimator

    return Estimator.from_bigdl(model=kw.pop("model", None) or linear(), loss=MSECriterion(), **kw)


def test_bad_arguments_at_construction():
    from orca.bigdl import Estimator

    with pytest.raises(TypeError, match="bigdl.dllib model"):
        Estimator.from_bigdl(model="net")
    with pytest.raises(TypeError, match="BigDL criterion"):
        Estimator.from_bigdl(model=linear(), loss=lambda p, y: 0)
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        Estimator.from_bigdl(model=linear(), metrics=["f1"])


def test_bad_data_fails_on_the_driver(spark, regression):
    x, y = regression
    frame = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y}))
    est = _est()
    with pytest.raises(ValueError, match="multiple of the 2 workers.*multiple of it: 32"):
        est.fit(frame, epochs=1, batch_size=31, feature_cols=["x"], label_cols=["y"])
    with pytest.raises(ValueError, match="nope"):
        est.fit(frame, epochs=1, batch_size=32, feature_cols=["nope"], label_cols=["y"])
    with pytest.raises(TypeError, match="not supported"):
        est.fit("data.csv", epochs=1)
    with pytest.raises(ValueError, match=r"no rows.*df\.count\(\) > 0"):
        est.fit(frame.limit(0), epochs=1, batch_size=32, feature_cols=["x"], label_cols=["y"])
    with pytest.raises(ValueError, match="checkpoint_trigger needs model_dir"):
        from bigdl.dllib.optim.optimizer import EveryEpoch

        est.fit(frame, epochs=1, batch_size=32, feature_cols=["x"], label_cols=["y"], checkpoint_trigger=EveryEpoch())


def test_a_shape_the_model_cannot_take_is_one_clear_error(spark):
    frame = spark.createDataFrame(pd.DataFrame({"x": list(np.zeros((32, 7), np.float32)), "y": np.zeros(32)}))
    with pytest.raises(RuntimeError, match="BigDL's training failed"):
        _est().fit(frame, epochs=1, batch_size=32, feature_cols=["x"], label_cols=["y"])


def test_a_session_orca_did_not_start_is_named_with_the_fix():
    """Spark started by the user without BigDL's jars (as spark-submit would) and attached to with
    cluster_mode="spark-submit": importing orca.bigdl warns, and the engine refuses to start, both
    saying how to give Spark the jars (not py4j's "'JavaPackage' object is not callable")."""
    code = textwrap.dedent("""
        import json, warnings
        from pyspark.sql import SparkSession
        from orca.core import init_orca_context, stop_orca_context
        SparkSession.builder.master("local[2]").config("spark.driver.host", "127.0.0.1").getOrCreate()
        init_orca_context(cluster_mode="spark-submit")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import orca.bigdl
        from orca.bigdl._engine import ensure_engine
        try:
            ensure_engine()
            error = None
        except RuntimeError as exc:
            error = str(exc)
        stop_orca_context()
        print(json.dumps({"warnings": [str(w.message) for w in caught], "error": error}))
    """)
    out = run_python(code, timeout_s=240)
    fix = "Orca did not start it (spark-submit, or a session that was already running)"
    assert any(fix in w for w in out["warnings"]), out
    assert fix in (out["error"] or "") and "orca.bigdl.bigdl_jars()" in out["error"], out
