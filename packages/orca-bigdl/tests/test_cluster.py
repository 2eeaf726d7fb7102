"""orca.bigdl on a real Spark standalone cluster (master + worker on 127.0.0.1): BigDL's jars reach
the executors through spark.jars and the model trains there."""

import textwrap

import pytest

from orca.core.testing.clusters import run_python

pytestmark = pytest.mark.timeout(600)


def test_fit_and_predict_on_a_standalone_cluster(spark_standalone_master):
    code = textwrap.dedent("""
        import json, sys
        import numpy as np, pandas as pd
        import orca.bigdl
        from orca.core import init_orca_context, stop_orca_context
        from bigdl.dllib.nn.layer import Linear, Sequential
        from bigdl.dllib.nn.criterion import MSECriterion
        from bigdl.dllib.optim.optimizer import SGD

        ctx = init_orca_context(cluster_mode="standalone", master=MASTER, cores=2, num_nodes=1, memory="1g")
        spark = ctx.spark_session()
        rng = np.random.default_rng(0)
        x = rng.normal(size=(256, 4)).astype(np.float32)
        y = (x @ np.array([1.5, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
        df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(2)
        est = orca.bigdl.Estimator.from_bigdl(model=Sequential().add(Linear(4, 1)), loss=MSECriterion(),
                                              optimizer=SGD(learningrate=0.1))
        hist = est.fit(df, epochs=8, batch_size=32, feature_cols=["x"], label_cols=["y"])
        out = est.predict(df, feature_cols=["x"]).toPandas()
        w, b = est.get_model().get_weights()
        pred = np.stack(out["prediction"].to_numpy()).reshape(-1)
        want = (np.stack(out["x"].to_numpy()) @ w.T + b).reshape(-1)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        stop_orca_context()
        print(json.dumps({"loss": hist.history["train_loss"], "w": w.reshape(-1).tolist(),
                          "max_err": float(np.abs(pred - want).max()), "executors": executors}))
    """).replace("MASTER", repr(spark_standalone_master))
    out = run_python(code, timeout_s=500)
    assert out["executors"] >= 1
    assert out["loss"][-1] < out["loss"][0] * 0.01
    assert max(abs(a - b) for a, b in zip(out["w"], [1.5, -2.0, 0.5, 3.0], strict=True)) < 0.05
    assert out["max_err"] < 1e-5
