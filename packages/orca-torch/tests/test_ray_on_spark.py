"""The ray backend on a real Spark standalone cluster (a master and two workers on 127.0.0.1):
Ray-on-Spark starts a Ray worker node on each executor, the actors run there and read their
own node's partitions first; Ray's token auth stays on. The driver runs in its own interpreter
(the scaffolding is shared with orca-tf and orca-mxnet: orca.core.testing.ray_on_spark)."""

import pytest

from orca.core.testing.ray_on_spark import check_ray_on_spark_fit, run_on_ray_on_spark

LOST_DRIVER = r'''
import json, os, sys, tempfile, time
import numpy as np, torch
from torch import nn
from orca.core.engine.errors import WorkerLostError
from orca.core.testing.failures import KillExecutorOnce
from orca.core.testing.ray_on_spark import DriverRun
from orca.torch import Estimator

TIMEOUT_S = 20
run = DriverRun.start(worker_timeout_s=TIMEOUT_S)
fit = dict(batch_size=64, feature_cols=["x"], label_cols=["y"])
marks = tempfile.mkdtemp()

# 0. a plain fit and predict on the Ray nodes started on the executors (one cluster for all three parts)
torch.manual_seed(0)
est = Estimator.from_torch(model=nn.Sequential(nn.Linear(8, 1), nn.Sigmoid()), loss=nn.BCELoss(),
                           optimizer=lambda m, c: torch.optim.Adam(m.parameters(), lr=0.05), backend="ray",
                           workers_per_node=1)
run.fitted(est, est.fit(run.df, epochs=4, batch_size=64, feature_cols=["x"], label_cols=["y"]))
pred = est.predict(run.df, feature_cols=["x"]).toPandas()
with torch.no_grad():
    want = est.get_model()(torch.from_numpy(run.features(pred))).numpy()[:, 0]
run.predicted(pred, want)
est.shutdown()

def estimator():
    torch.manual_seed(0)
    return Estimator.from_torch(model=nn.Sequential(nn.Linear(8, 1), nn.Sigmoid()), loss=nn.BCELoss(),
                                optimizer=lambda m, c: torch.optim.SGD(m.parameters(), lr=0.05), backend="ray",
                                workers_per_node=1)

def killed_at(name):
    pid, at = open(os.path.join(marks, name)).read().split()
    return int(pid), float(at)

def probe(est):
    with torch.no_grad():
        return est.get_model()(torch.from_numpy(run.x[:256])).numpy()[:, 0]

out = {}
# 1. max_failures=0: the executor under rank 1 is killed in epoch 2; the fit fails at once and keeps epoch 1's model
est = estimator()
est.fit(run.df, epochs=1, **fit)
before = probe(est)
try:
    est.fit(run.df, epochs=3, callbacks=[KillExecutorOnce(os.path.join(marks, "a"), epoch=1, step=5)],
            max_failures=0, **fit)
    out["error"] = None
except (WorkerLostError, TimeoutError) as exc:
    out["error"], out["error_type"] = str(exc), type(exc).__name__
    out["failed_after_s"] = time.time() - killed_at("a")[1]
out["same_after_failure"] = bool(np.array_equal(probe(est), before))
# the context still serves calls: Spark's replacement executor gets a Ray node, two workers again
out["evaluated"] = est.evaluate(run.df, **fit)["num_samples"]
out["workers_after_failure"] = len(set(run.cluster_facts(est)["actor_nodes"]))
est.shutdown()

# 2. max_failures=1: the same loss mid-fit restarts from the last epoch and ends as an uninterrupted run (numpy
# data this time: a DataFrame's rows go to the ranks by where Spark computed them, which differs between runs)
results = []
for kill in (True, False):
    est = estimator()
    cbs = [KillExecutorOnce(os.path.join(marks, "b"), epoch=1, step=5)] if kill else []
    hist = est.fit((run.x, run.y), epochs=2, batch_size=64, callbacks=cbs, max_failures=1)
    results.append(probe(est))
    if kill:
        out["restarts"] = [r["epoch"] for r in hist.restarts]
        out["epochs"] = [h["epoch"] for h in hist]
        out["recovered_n"] = hist[-1]["num_samples"]
        out["nodes_after_restart"] = len(set(run.cluster_facts(est)["actor_nodes"]))
        out["recovered_acc"] = float(((est.predict(run.x, batch_size=256)[:, 0] > 0.5) == (run.y > 0.5)).mean())
    est.shutdown()
out["recovered_err"] = float(np.abs(results[0] - results[1]).max())
out["pids_killed"] = [killed_at("a")[0], killed_at("b")[0]]
import shutil; shutil.rmtree(marks)
from orca.core import stop_orca_context
stop_orca_context()
print(json.dumps({**run.facts, **out}))
'''


@pytest.mark.timeout(600)
def test_ray_backend_on_the_spark_executors_fits_predicts_and_survives_a_lost_executor():
    """One standalone cluster, three parts. 0: the ray backend runs on Ray nodes started on the
    Spark executors (auth on, local-first data, predictions equal the driver's model). Then the
    Spark executor JVM under rank 1 is SIGKILLed mid-fit (its keeper then ends its Ray node and the
    actor on it). 1, max_failures=0: a WorkerLostError naming the rank within worker_timeout_s,
    the model of the last fit kept, and the next call runs on two nodes again (Spark replaces the
    executor and Orca starts a Ray node on it). 2, max_failures=1: the fit resumes from the last
    epoch on the replacement node and ends with an uninterrupted run's weights."""
    out = run_on_ray_on_spark(LOST_DRIVER, timeout_s=540)
    check_ray_on_spark_fit(out, max_err=1e-6)
    assert out["error_type"] == "WorkerLostError" and "rank 1" in out["error"], out
    assert out["failed_after_s"] < 20 + 5, out
    assert out["same_after_failure"] and out["workers_after_failure"] == 2 and out["evaluated"] == 8000, out
    assert out["restarts"] == [2] and out["epochs"] == [1, 2] and out["recovered_n"] == 8000, out
    assert out["nodes_after_restart"] == 2 and out["recovered_acc"] > 0.9, out
    assert out["recovered_err"] < 1e-5, out
    assert len(set(out["pids_killed"])) == 2 and out["left"] == [], out
