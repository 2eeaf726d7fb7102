"""Orca from a Spark Connect client: a real Connect server (pyspark's ``start-connect-server.sh``
on ``local[2]``, 127.0.0.1, a token) and a client process that has no classic session; the
toy framework (``test_toy_framework.NumpyEstimator``) fits, evaluates and predicts through it
and must give the numbers a classic ``local[2]`` session gives.

One server and one client run serve the whole module: the client runs every step once and prints
what each test checks (measured on the shared 2-core machine at a load of ~20: the server's start
~25 s, the client ~35 s, of which its first fit ~20 s: the server's Python workers start and import).
The standalone cluster and the recovery run only under ``ORCA_FULL_MATRIX=1``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orca.core.testing.clusters import (
    processes_mentioning,
    pyspark_home,
    run_python,
    spark_connect_server,
    spark_standalone_cluster,
)
from orca.core.testing.conformance import NUM_FEATURES, TRUE_B, TRUE_W
from orca.core.testing.matrix import skip_unless_full_matrix

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    # pyspark 3.5's wheel has the script but not the server's jar (spark-connect is a package there)
    pytest.mark.skipif(not any((pyspark_home() / "jars").glob("spark-connect_*.jar")),
                       reason="this pyspark ships no Spark Connect server (pyspark >= 4 does)"),
]

TESTS = Path(__file__).resolve().parent
ROWS = 96
FIT = {"epochs": 2, "batch_size": 16, "feature_cols": ["x"], "label_cols": ["y"], "shuffle": False}


def frame(spark: Any) -> Any:
    """The same DataFrame on a classic and a Connect session: rows computed from ``id`` on a range of
    two partitions (one per worker, so neither session repartitions)."""
    from pyspark.sql import functions as F

    xs = [F.sin(F.col("id") * (0.37 * (i + 1))) for i in range(NUM_FEATURES)]
    y = sum((F.lit(float(w)) * x for w, x in zip(TRUE_W, xs, strict=True)), F.lit(TRUE_B))
    return spark.range(0, ROWS, 1, 2).select("id", F.array(*xs).alias("x"), y.alias("y"))


def run_all(spark: Any, est: Any) -> dict[str, Any]:
    """What both sessions compute: fit's history and weights, evaluate's metrics, predict's column."""
    df = frame(spark)
    t0 = time.monotonic()
    history = est.fit(df, **FIT)
    state = est.get_model()
    t1 = time.monotonic()
    metrics = est.evaluate(df, batch_size=32, feature_cols=["x"], label_cols=["y"])
    t2 = time.monotonic()
    pred = est.predict(df, batch_size=32, feature_cols=["x"])
    rows = pred.orderBy("id").select("id", "prediction").collect()
    t3 = time.monotonic()
    return {"loss": [float(v) for v in history.history["loss"]], "w": state["w"].tolist(),
            "b": state["b"].tolist(), "metrics": {k: float(v) for k, v in metrics.items()},
            "pred_type": type(pred).__module__ + "." + type(pred).__name__, "pred_columns": pred.columns,
            "pred": [float(r["prediction"][0]) for r in rows], "ids": [int(r["id"]) for r in rows],
            "seconds": {"fit": t1 - t0, "evaluate": t2 - t1, "predict": t3 - t2}}


CLIENT = f"""
import json, os, sys, time
T0 = time.monotonic()
sys.path.insert(0, {str(TESTS)!r})
from orca.core import OrcaContext, init_orca_context, stop_orca_context
from test_spark_connect import FIT, frame, run_all
from test_toy_framework import NumpyEstimator

ctx = init_orca_context(cluster_mode="spark-connect", remote=os.environ["ORCA_TEST_REMOTE"],
                        worker_timeout_s=120.0)
spark = ctx.spark_session()
T1 = time.monotonic()
out = {{"session": type(spark).__module__, "classic_jvm": __import__("pyspark").SparkContext._jvm is not None}}
est = NumpyEstimator.from_numpy(lr=0.05, backend="spark")
out.update(run_all(spark, est))
if os.environ.get("ORCA_TEST_ONLY_RUN"):
    stop_orca_context()
    print(json.dumps(out))
    sys.exit(0)

def error_of(call):
    try:
        call()
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
    return None

import numpy as np
x = np.zeros((8, 4), np.float32)
out["numpy_fit"] = error_of(lambda: NumpyEstimator.from_numpy(backend="spark").fit((x, x[:, 0]), epochs=1,
                                                                                     batch_size=4))
out["missing_column"] = error_of(lambda: est.fit(frame(spark), epochs=1, batch_size=8, feature_cols=["nope"],
                                                 label_cols=["y"]))
out["spark_context"] = error_of(OrcaContext.get_spark_context)
out["ray_on_spark"] = error_of(ctx.ray_runtime)
T2 = time.monotonic()

import tempfile
from orca.core.testing.failures import KillOnce
markers = tempfile.mkdtemp()
lost = NumpyEstimator.from_numpy(lr=0.05, backend="spark")
out["lost_worker"] = error_of(lambda: lost.fit(frame(spark), callbacks=[KillOnce(os.path.join(markers, "a"), rank=1,
                                                                                 epoch=0, step=1)], **FIT))
out["lost_killed"] = os.path.exists(os.path.join(markers, "a"))
if os.environ.get("ORCA_FULL_MATRIX") == "1":  # (the same recovery path as a classic session's: CI runs that one)
    again = NumpyEstimator.from_numpy(lr=0.05, backend="spark")
    out["recovered"] = error_of(lambda: again.fit(frame(spark), callbacks=[KillOnce(os.path.join(markers, "b"),
                                                                                   rank=1, epoch=1, step=1)],
                                                  max_failures=1, **FIT))
    out["recovered_killed"] = os.path.exists(os.path.join(markers, "b"))
    out["recovered_w"] = again.get_model()["w"].tolist() if out["recovered"] is None else None
__import__("shutil").rmtree(markers, ignore_errors=True)
out["client_seconds"] = {{"start": T1 - T0, "steps_and_errors": T2 - T1, "lost_workers": time.monotonic() - T2}}
stop_orca_context()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def connect_run() -> dict[str, Any]:
    """The client's results, from a client process of its own against a fresh server."""
    with spark_connect_server("local[2]") as server:
        run = dict(run_python(CLIENT, env={"ORCA_TEST_REMOTE": server.remote}, timeout_s=240))
    return {**run, "server_workdir": str(server.workdir)}


@pytest.fixture(scope="module")
def classic_run(orca_context: Any) -> dict[str, Any]:
    """The same steps on the test session's classic ``local[2]`` context."""
    sys.path.insert(0, str(TESTS))
    from test_toy_framework import NumpyEstimator

    est = NumpyEstimator.from_numpy(lr=0.05, backend="spark")
    return run_all(orca_context.spark_session(), est)


@pytest.mark.timeout(300)
def test_connect_client_has_no_classic_session_or_jvm(connect_run: dict[str, Any]) -> None:
    assert connect_run["session"] == "pyspark.sql.connect.session"
    assert connect_run["classic_jvm"] is False


@pytest.mark.timeout(300)
def test_connect_fit_trains_the_classic_sessions_weights_exactly(connect_run: dict[str, Any],
                                                                  classic_run: dict[str, Any]) -> None:
    assert len(connect_run["loss"]) == 2 and connect_run["loss"][1] < connect_run["loss"][0]
    np.testing.assert_allclose(connect_run["loss"], classic_run["loss"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(connect_run["w"], classic_run["w"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(connect_run["b"], classic_run["b"], rtol=0, atol=1e-12)


@pytest.mark.timeout(300)
def test_connect_evaluate_gives_the_classic_metrics(connect_run: dict[str, Any],
                                                   classic_run: dict[str, Any]) -> None:
    assert set(connect_run["metrics"]) == set(classic_run["metrics"]) and "val_loss" in connect_run["metrics"]
    assert connect_run["metrics"]["num_samples"] == ROWS
    for key, value in classic_run["metrics"].items():
        assert connect_run["metrics"][key] == pytest.approx(value, rel=0, abs=1e-9), key


@pytest.mark.timeout(300)
def test_connect_predict_returns_a_connect_dataframe_with_the_classic_predictions(
        connect_run: dict[str, Any], classic_run: dict[str, Any]) -> None:
    assert connect_run["pred_type"] == "pyspark.sql.connect.dataframe.DataFrame"
    assert connect_run["pred_columns"] == ["id", "x", "y", "prediction"]
    assert connect_run["ids"] == list(range(ROWS))
    np.testing.assert_allclose(connect_run["pred"], classic_run["pred"], rtol=0, atol=1e-6)


@pytest.mark.timeout(300)
def test_connect_refuses_inputs_only_a_classic_session_reads(connect_run: dict[str, Any]) -> None:
    message = connect_run["numpy_fit"]
    assert message is not None and message.startswith("TypeError: on Spark Connect"), message
    assert "pass a DataFrame" in message


@pytest.mark.timeout(300)
def test_connect_bad_dataframe_input_gets_the_classic_error(connect_run: dict[str, Any]) -> None:
    message = connect_run["missing_column"]
    assert message is not None and message.startswith("ValueError:"), message
    assert "'nope' not found" in message and "['id', 'x', 'y']" in message


@pytest.mark.timeout(300)
def test_connect_context_says_what_needs_a_classic_session(connect_run: dict[str, Any]) -> None:
    assert "sparkContext" in connect_run["spark_context"], connect_run["spark_context"]
    ray = connect_run["ray_on_spark"]
    assert ray is not None and ray.startswith("ValueError: Ray-on-Spark needs a classic Spark session"), ray
    assert "address='host:port'" in ray


@pytest.mark.timeout(300)
def test_connect_fit_that_loses_a_worker_fails_clearly(connect_run: dict[str, Any]) -> None:
    assert connect_run["lost_killed"], "the worker was never killed"
    message = connect_run["lost_worker"]
    assert message is not None and message.startswith("WorkerLostError:"), message
    assert "max_failures" in message or "was lost" in message, message


@pytest.mark.timeout(300)
def test_connect_fit_with_max_failures_recovers_to_the_same_weights(connect_run: dict[str, Any],
                                                                    classic_run: dict[str, Any]) -> None:
    skip_unless_full_matrix("test_connect_fit_that_loses_a_worker_fails_clearly (Connect) and the conformance "
                            "suite's recovery tests (classic)")
    assert connect_run["recovered_killed"], "the worker was never killed"
    assert connect_run["recovered"] is None, connect_run["recovered"]
    np.testing.assert_allclose(connect_run["recovered_w"], classic_run["w"], rtol=0, atol=1e-12)


@pytest.mark.timeout(600)
def test_connect_on_a_standalone_master_with_two_workers_trains_the_classic_weights(
        classic_run: dict[str, Any]) -> None:
    skip_unless_full_matrix("test_connect_fit_trains_the_classic_sessions_weights_exactly")
    with spark_standalone_cluster(cores=1, memory="1g", workers=2) as cluster, \
            spark_connect_server(cluster.master_url, cores=1, num_nodes=2) as server:
        run = run_python(CLIENT, env={"ORCA_TEST_REMOTE": server.remote, "ORCA_TEST_ONLY_RUN": "1"}, timeout_s=400)
    np.testing.assert_allclose(run["w"], classic_run["w"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(run["pred"], classic_run["pred"], rtol=0, atol=1e-6)
    assert run["metrics"] == pytest.approx(classic_run["metrics"], rel=0, abs=1e-9)


@pytest.mark.timeout(300)
def test_connect_server_helper_leaves_no_process_behind(connect_run: dict[str, Any]) -> None:
    assert processes_mentioning(connect_run["server_workdir"]) == []
    assert not Path(connect_run["server_workdir"]).exists()


def test_connect_mode_checks_its_remote_before_starting() -> None:
    from orca.core import init_orca_context

    with pytest.raises(ValueError, match=r"remote='http://x' is not a Spark Connect URL"):
        init_orca_context(cluster_mode="spark-connect", remote="http://x")
