"""The reference guide's BigDL sample (section 5), imports aside, in a fresh interpreter: with
``init_orca_context`` before ``from orca.bigdl import Estimator`` (BigDL's jars come from the
installed package's entry point) and after it (the import registers them)."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

SAMPLE = """
from bigdl.dllib.nn.criterion import *
from bigdl.dllib.nn.layer import *
from bigdl.dllib.optim.optimizer import *
from orca.bigdl import Estimator

linear_model = Sequential().add(Linear(2, 2))
mse_criterion = MSECriterion()
est = Estimator.from_bigdl(model=linear_model, loss=mse_criterion, optimizer=Adam())

# read spark Dataframe
df = spark.read.parquet("data.parquet")

# distributed model training
est.fit(df, 1, batch_size=4)

#distributed model inference
result_df = est.predict(df)
"""

INIT = "from orca.core import init_orca_context\nspark = init_orca_context(cores=2).spark_session()\n"

CHECK = """
import json
import numpy as np
w, b = est.get_model().get_weights()
out = result_df.toPandas()
x = np.stack(out["features"].to_numpy())
print("RESULT " + json.dumps({"rows": len(out), "columns": list(out.columns),
    "max_err": float(np.abs(np.stack(out["prediction"].to_numpy()) - (x @ w.T + b)).max())}))
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("order", ["init_then_import", "import_then_init"])
def test_the_reference_bigdl_sample_runs_as_written_in_either_import_order(tmp_path, order):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2))
    pd.DataFrame({"features": list(x), "label": list(x @ np.array([[1.0, 2.0], [-1.0, 0.5]]))}).to_parquet(
        tmp_path / "data.parquet")
    head, body = SAMPLE.split("linear_model", 1)
    code = (INIT + head if order == "init_then_import" else head + INIT) + "linear_model" + body + CHECK
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=280)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    assert got["rows"] == 64 and got["columns"] == ["features", "label", "prediction"], got
    assert got["max_err"] < 1e-5, got  # the predictions are the trained model's own


@pytest.mark.timeout(120)
def test_a_dataframe_without_the_default_columns_names_them_and_the_fix(spark):
    from bigdl.dllib.nn.criterion import MSECriterion
    from bigdl.dllib.nn.layer import Linear, Sequential

    from orca.bigdl import Estimator

    est = Estimator.from_bigdl(model=Sequential().add(Linear(2, 1)), loss=MSECriterion())
    df = spark.createDataFrame(pd.DataFrame({"x": [[1.0, 2.0]] * 4, "y": [1.0] * 4}))
    with pytest.raises(ValueError, match=r"without a 'features' column, the default of feature_cols; give "
                                         r"feature_cols=\[\.\.\.\].*\['x', 'y'\]"):
        est.fit(df, 1, batch_size=4)
    with pytest.raises(ValueError, match="without a 'label' column, the default of label_cols"):
        est.fit(df, 1, batch_size=4, feature_cols=["x"])
