"""End-to-end checks of the ``ray`` backend on Ray-on-Spark, shared by the framework packages.

A test starts a Spark standalone cluster (a master and two 1-core workers on 127.0.0.1) and
runs a driver script in a fresh interpreter with :func:`run_on_ray_on_spark`. The driver
script uses :class:`DriverRun` for everything that is not framework code: the Orca context
(Ray worker nodes start on the executors on first use), a classification DataFrame, what the
fit did on the cluster (where the actors ran, where their data came from) and the
predictions against the trained model on the driver. :func:`check_ray_on_spark_fit` then
asserts what must hold for every framework.

Example (a framework's driver script, run with ``run_on_ray_on_spark(DRIVER)``)::

    from orca.core.testing.ray_on_spark import DriverRun
    run = DriverRun.start()
    est = Estimator.from_keras(model_creator=creator, workers_per_node=1)   # backend "ray"
    run.fitted(est, est.fit(run.df, epochs=4, batch_size=64, feature_cols=["x"], label_cols=["y"]))
    pred = est.predict(run.df, feature_cols=["x"]).toPandas()
    run.finish(est, pred, est.get_model()(run.features(pred)).numpy()[:, 0])
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core.testing.clusters import processes_mentioning, run_python, spark_standalone_cluster

#: rows of the classification data: 4 partitions of ~72 KB each, so they live in plasma
ROWS = 8000
#: features per row
FEATURES = 8


@dataclass
class DriverRun:
    """The framework-independent half of a Ray-on-Spark driver script.

    Attributes:
        ctx: the Orca context (standalone, ``cores=1`` per executor, ``num_nodes=2``).
        df: ``ROWS`` rows, ``x`` (``FEATURES`` floats) and ``y`` (0/1, linearly separable), in
            4 partitions.
        x: the features of ``df`` as one float32 matrix, in the order they were generated.
        y: the labels of ``df`` (float32), in the same order.
        facts: what the run measured so far (printed as JSON by :meth:`finish`).
    """

    ctx: Any
    df: Any
    x: np.ndarray
    y: np.ndarray
    facts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, **context_args: Any) -> DriverRun:
        """Start the context on ``$ORCA_MASTER`` and build the data (``context_args`` override the
        context's settings, e.g. ``worker_timeout_s=20``)."""
        import pandas as pd

        from orca.core import init_orca_context

        args = dict(cluster_mode="standalone", master=os.environ["ORCA_MASTER"], cores=1, num_nodes=2,
                    memory="1g", object_store_memory=100 * 2**20)
        ctx = init_orca_context(**{**args, **context_args})
        rng = np.random.default_rng(0)
        x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
        y = (x @ rng.normal(size=FEATURES).astype(np.float32) > 0).astype(np.float32)
        df = ctx.spark_session().createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(4)
        return cls(ctx, df, x, y, {"context": ctx.context_id})

    @staticmethod
    def features(pred: Any) -> np.ndarray:
        """The ``x`` column of a predicted pandas frame as one float32 matrix."""
        return np.stack(pred["x"].to_numpy()).astype(np.float32)

    def cluster_facts(self, est: Any) -> dict[str, Any]:
        """Where ``est``'s actors run: their Ray nodes and those of the executors."""
        import cloudpickle
        import ray

        # a function defined here travels by value: the actors need not import this module
        probe = cloudpickle.loads(cloudpickle.dumps(lambda r: ray.get_runtime_context().get_node_id()))
        labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}
        return {"actor_nodes": est._group.call(probe),
                "executor_nodes": [n for n, lab in labels.items() if "orca-executor" in lab]}

    def fitted(self, est: Any, hist: Any) -> None:
        """Record what the fit did on the cluster: samples, the Ray runtime, the actors' nodes and
        the placement of their data (rows and bytes read on their own node or across nodes)."""
        runtime = self.ctx.ray_runtime()
        placement = est._group.last_placement
        self.facts.update(self.cluster_facts(est))
        self.facts.update({
            "mode": runtime.mode, "auth": runtime.auth, "cpus": list(runtime.cpus_per_node),
            "n": hist[-1]["num_samples"], "loss": [h["train_loss"] for h in hist],
            "placed": placement.actor_nodes, "remote_rows": placement.remote_rows,
            "local_rows": placement.local_rows, "min_remote_rows": placement.min_remote_rows(),
            "crossed_bytes": placement.crossed_bytes, "total_bytes": placement.total_bytes,
        })

    def predicted(self, pred: Any, want: Any, **extra: Any) -> None:
        """Compare the cluster's predictions (``pred``: a pandas frame with ``x``, ``y`` and
        ``prediction``) with ``want`` (the trained model run on the driver); record the facts."""
        got = np.asarray([np.asarray(p).reshape(-1)[0] for p in pred["prediction"].to_numpy()], np.float64)
        want = np.asarray(want, np.float64).reshape(-1)
        labels = pred["y"].to_numpy() > 0.5
        self.facts.update(extra)
        self.facts.update({"rows": len(got), "acc": float(((got > 0.5) == labels).mean()),
                           "max_err": float(np.abs(got - want).max())})

    def finish(self, est: Any, pred: Any, want: Any, **extra: Any) -> None:
        """:meth:`predicted`, then shut everything down and print the facts as the script's JSON result."""
        from orca.core import stop_orca_context

        self.predicted(pred, want, **extra)
        est.shutdown()
        stop_orca_context()
        print(json.dumps(self.facts))


def run_on_ray_on_spark(driver: str, *, env: dict[str, str] | None = None, timeout_s: float = 300.0,
                        workers: int = 2) -> dict[str, Any]:
    """Run ``driver`` against a fresh Spark standalone cluster of 2 cores: two 1-core workers, or
    with ``workers=1`` one worker offering both (2 executors of 1 core on one worker, as a user's
    ``cores=1, num_nodes=2`` on a one-machine cluster gets).

    Returns:
        The driver's JSON result, plus ``left``: the processes of the driver's Ray-on-Spark
        (keepers, Ray nodes) still alive after the driver ended (there should be none).
    """
    if workers not in (1, 2):
        raise ValueError(f"workers={workers}: 1 (one 2-core worker) or 2 (two 1-core workers)")
    with spark_standalone_cluster(cores=2 // workers, memory=f"{2 // workers}g", workers=workers) as cluster:
        out = run_python(driver, env={"ORCA_MASTER": cluster.master_url, **(env or {})}, timeout_s=timeout_s)
        out["left"] = processes_mentioning(f"orca-ray-{out['context']}")
    return dict(out)


def check_ray_on_spark_fit(out: dict[str, Any], min_acc: float = 0.95, max_err: float = 1e-5) -> None:
    """Assert what a ``DriverRun`` fit must show on any framework: Ray on the executors with
    auth on, one actor on each executor's node, local-first data, all rows trained and
    predicted, the model learned, predictions equal to the driver's model, nothing left."""
    assert out["mode"] == "on_spark" and out["auth"] is True, out
    assert sorted(out["cpus"]) == [0, 1, 1], out  # the head on the driver has no CPU: no worker runs there
    assert out["n"] == ROWS and out["rows"] == ROWS, out
    # one actor on each executor's Ray node, where the placement put it
    assert sorted(out["actor_nodes"]) == sorted(out["executor_nodes"]) and len(set(out["actor_nodes"])) == 2, out
    assert out["placed"] == out["actor_nodes"], out
    # local first: only what a node lacks crosses nodes
    assert out["local_rows"] + out["remote_rows"] == ROWS, out
    assert out["remote_rows"] == out["min_remote_rows"] < ROWS, out
    assert 0 <= out["crossed_bytes"] < out["total_bytes"], out
    assert out["loss"][-1] < out["loss"][0], out
    assert out["acc"] > min_acc, out
    assert out["max_err"] < max_err, out
    assert out["left"] == [], out  # the keepers and their Ray nodes ended with the context
