"""Orca's engine across hosts with their own addresses: network namespaces joined by a bridge.

Each launcher gets one cluster, started and removed by a module fixture that runs one driver
(in a fresh interpreter) on it: the ``spark`` launcher on
:func:`orca.core.testing.hosts.spark_hosts_cluster` (the master and the driver on the bridge's
address, a one-core Spark worker in each of two namespace hosts), the ``ray`` launcher on
:func:`~orca.core.testing.hosts.ray_hosts_cluster` (a head with no CPUs on the bridge's address,
a one-CPU Ray node on each host). The toy framework of test_toy_framework.py stands for every
framework (the engine does the rendezvous and the waits).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orca.core._net import check_reachable
from orca.core.testing.clusters import run_python
from orca.core.testing.hosts import (
    NamespaceNet,
    namespaces_unavailable,
    ray_hosts_cluster,
    spark_hosts_cluster,
)

_WHY_NOT = namespaces_unavailable()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=f"no network namespaces here: {_WHY_NOT}")

TESTS = Path(__file__).resolve().parent

DRIVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    import numpy as np
    sys.path.insert(0, TESTS)
    from test_toy_framework import NUM_FEATURES, NumpyEstimator
    from orca.core import OrcaContext, init_orca_context, stop_orca_context
    from orca.core.data import XShards

    init_orca_context(cluster_mode="standalone", master=MASTER, cores=1, memory="512m", num_nodes=2,
                      driver_host=DRIVER_HOST, conf={"spark.ui.enabled": "false", "spark.executor.memory": "512m"})
    rng = np.random.default_rng(11)
    x = rng.normal(size=(40, NUM_FEATURES))
    y = x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5
    shards = XShards.from_list([{"x": x[:25], "y": y[:25, None]}, {"x": x[25:], "y": y[25:, None]}], backend="spark")
    listening = {}

    def snapshot(event):  # the hosts' listening sockets while the fit's workers run
        if event.get("event") == "epoch" and not listening:
            for ns in HOSTS:
                out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH"], capture_output=True, text=True)
                listening[ns] = [line.split()[3] for line in out.stdout.splitlines()]

    def estimator():
        est = NumpyEstimator.from_numpy(lr=0.1, backend="spark", workers_per_node=1)
        est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
        return est

    report = {"listening": listening}
    est = estimator()
    est.fit_listeners.append(snapshot)
    try:
        est.fit(shards, epochs=3, batch_size=40, shuffle=False)
        model = est.get_model()
        report["w"], report["b"] = model["w"].tolist(), float(model["b"][0])
        out = est.predict(shards)
        report["pred"] = np.concatenate([np.asarray(s["prediction"]).reshape(-1) for s in out.collect()]).tolist()
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    est.shutdown()

    # rows that travel inside the tasks (no block of another executor to fetch): the ranks start,
    # and the first peer they miss is each other
    cols = [f"x{i}" for i in range(NUM_FEATURES)]
    frame = {c: x[:, i] for i, c in enumerate(cols)}
    frame["y"] = y
    import pandas as pd
    df = OrcaContext.current().spark_session().createDataFrame(pd.DataFrame(frame))
    assert df.rdd.getNumPartitions() == 2
    # every packet between the two hosts dropped from now on (a bogus neighbour entry: a firewall
    # that drops silently); each host still reaches the driver
    def neigh(op, *extra):
        for ns, other in ((HOSTS[0], ADDRESSES[1]), (HOSTS[1], ADDRESSES[0])):
            subprocess.run(["ip", "-n", ns, "neigh", op, other, *extra, "dev", "eth0"], check=op == "replace")

    OrcaContext.current().settings.worker_start_timeout_s = START_S  # (read by the next Estimator)
    neigh("replace", "lladdr", "02:00:00:00:00:01", "nud", "permanent")
    t0 = time.monotonic()
    est = estimator()
    try:
        est.fit(df, epochs=1, batch_size=40, shuffle=False, feature_cols=cols, label_cols=["y"])
        report["cut_error"] = None
    except Exception as exc:
        report["cut_error"] = f"{type(exc).__name__}: {exc}"
    report["cut_seconds"] = time.monotonic() - t0
    neigh("del")
    est.shutdown()
    stop_orca_context()
    print(json.dumps(report))
    """
)

START_S = 8.0


#: what a host's own processes compute: its machine id, and the command of a Ray-on-Spark node there
ON_HOST = textwrap.dedent(
    """
    import json, sys
    from orca.core._net import machine_id
    from orca.core._ray_node import _node_command
    args = {"gcs": sys.argv[1] + ":6379", "num_cpus": 1, "memory": 1 << 30, "object_store_memory": 1 << 28,
            "key": "e1", "context": "c1", "loopback": False}
    print(json.dumps({"machine_id": machine_id(), "node_command": _node_command(args, "ray-temp")}))
    """
)


def _on_hosts(net: NamespaceNet) -> list[dict[str, Any]]:
    out = []
    for host in net.hosts:
        proc = subprocess.run(host.command([sys.executable, "-c", ON_HOST, net.driver_address]), capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out.append({"name": host.name, "address": host.address, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return out


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """One driver's run on two hosts with a Spark worker each (a driver's start and its executors'
    cost more than its calls): a fit, a prediction, then a fit with the hosts cut off from each
    other; and what each host's own processes compute. The cluster is gone when it returns."""
    with spark_hosts_cluster(2, cores=1, memory="1g") as cluster:
        net = cluster.net
        code = (DRIVER.replace("TESTS", repr(str(TESTS))).replace("MASTER", repr(cluster.master_url))
                .replace("DRIVER_HOST", repr(net.driver_address)).replace("START_S", repr(START_S))
                .replace("HOSTS", repr([h.name for h in net.hosts]))
                .replace("ADDRESSES", repr([h.address for h in net.hosts])))
        out = dict(run_python(code, env={"SPARK_LOCAL_IP": net.driver_address}, timeout_s=300))
        out["hosts"] = _on_hosts(net)
        return out


@pytest.mark.timeout(600)
def test_a_fit_across_two_hosts_ends_at_the_one_process_weights_and_predicts_every_row(
        report: dict[str, Any]) -> None:
    """Two ranks on two hosts train by full-batch gradient descent to the weights computed here in
    one process (to 1e-12) and predict every row."""
    assert "error" not in report, report["error"]
    w, b, pred = _one_process_fit()
    np.testing.assert_allclose(report["w"], w, atol=1e-12)
    np.testing.assert_allclose(report["b"], b, atol=1e-12)
    np.testing.assert_allclose(report["pred"], pred, atol=1e-9)


@pytest.mark.timeout(600)
def test_what_listens_on_a_host_while_it_trains_is_bound_to_its_own_address(report: dict[str, Any]) -> None:
    """Every socket listening on a host during the fit (the executor's, its Python workers') is
    bound to that host's address or its loopback, never to all interfaces."""
    for host in report["hosts"]:
        listening = report["listening"].get(host["name"])
        assert listening, f"nothing listened on {host['name']} during the fit: {report['listening']}"
        own = {host["address"], f"[::ffff:{host['address']}]", "127.0.0.1", "[::ffff:127.0.0.1]"}
        stray = [a for a in listening if a.rsplit(":", 1)[0] not in own]
        assert stray == [], f"{host['name']} ({host['address']}) listened beyond its address: {stray}"


@pytest.mark.timeout(600)
def test_ranks_whose_hosts_cannot_reach_each_other_fail_the_fit_within_worker_start_timeout_s(
        report: dict[str, Any]) -> None:
    """With every packet between the two hosts dropped (each still reaches the driver), the fit
    fails once a rank was stuck for worker_start_timeout_s (8 s), not after the worker timeout
    (600 s) or never: in the rendezvous, waiting for the other, or before it (a Spark executor
    fetches the job's broadcast from the other's); the error names the rank and what to check."""
    error = report["cut_error"] or ""
    assert error.startswith("TimeoutError: Orca worker rank"), report
    assert "could not meet its peers" in error or "never reported" in error, error
    assert f"worker_start_timeout_s={START_S:g}" in error, error
    assert "SPARK_LOCAL_IP" in error and "driver_host" in error, error
    assert START_S <= report["cut_seconds"] < START_S + 30, report["cut_seconds"]


@pytest.mark.timeout(60)
def test_a_rank_at_a_loopback_address_of_another_host_is_refused_before_any_connect(report: dict[str, Any]) -> None:
    """What each host's processes compute for the rendezvous: two hosts' machine ids differ, so a
    rank advertising 127.0.1.1 (a host whose name resolves to Debian's loopback entry) is an
    error naming the address and the fix; on one host, loopback is fine."""
    ids = [h["machine_id"] for h in report["hosts"]]
    assert ids[0] != ids[1] and all(ids)
    check_reachable(["127.0.1.1", "127.0.1.1"], [ids[0], ids[0]])  # one host: its own loopback
    with pytest.raises(ConnectionError) as info:
        check_reachable([report["hosts"][0]["address"], "127.0.1.1"], ids)
    msg = str(info.value)
    assert "rank 0" in msg and "rank 1" in msg and "127.0.1.1" in msg, msg
    assert "SPARK_LOCAL_IP" in msg and "driver_host=" in msg and "/etc/hosts" in msg, msg


@pytest.mark.timeout(60)
def test_a_ray_on_spark_node_on_a_host_is_started_at_the_address_its_head_reaches_it_at(
        report: dict[str, Any]) -> None:
    """Ray-on-Spark starts each executor's Ray node with --node-ip-address set to the host's address
    on its route to the head (the driver): Ray's own guess routes to 8.8.8.8, which these hosts,
    like many clusters, have no route to."""
    for host in report["hosts"]:
        cmd = host["node_command"]
        assert cmd[cmd.index("--node-ip-address") + 1] == host["address"], cmd


RAY_DRIVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, TESTS)
    from test_toy_framework import NUM_FEATURES, NumpyEstimator
    from orca.core import init_orca_context, stop_orca_context
    from orca.core._net import machine_id

    init_orca_context(runtime="ray", address=ADDRESS)
    rng = np.random.default_rng(11)
    x = rng.normal(size=(40, NUM_FEATURES))
    y = x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5
    est = NumpyEstimator.from_numpy(lr=0.1, backend="ray", workers_per_node=1)
    est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
    report = {}
    try:
        est.fit({"x": x, "y": y[:, None]}, epochs=3, batch_size=40, shuffle=False)
        model = est.get_model()
        report["w"], report["b"] = model["w"].tolist(), float(model["b"][0])
        report["pred"] = np.asarray(est.predict(x, batch_size=40)).reshape(-1).tolist()
        report["machines"] = est._group.call(lambda runner: machine_id())  # where each rank ran
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    est.shutdown()
    stop_orca_context()
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def ray_report() -> dict[str, Any]:
    """One driver's run on a Ray cluster of two hosts (a head with no CPUs on the driver's address,
    a 1-CPU node on each host), and each host's machine id."""
    with ray_hosts_cluster(2, cpus=1) as (cluster, net):
        code = RAY_DRIVER.replace("TESTS", repr(str(TESTS))).replace("ADDRESS", repr(cluster.address))
        out = dict(run_python(code, env=cluster.env, timeout_s=240))
        out["hosts"] = _on_hosts(net)
        return out


def _one_process_fit() -> tuple[np.ndarray, float, np.ndarray]:
    """The toy model's 3 full-batch gradient-descent steps on the drivers' 40 rows, by hand:
    weights, bias, predictions."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(40, 4))
    y = x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5
    w, b = np.zeros(4), 0.0
    for _ in range(3):
        err = x @ w + b - y
        w, b = w - 0.1 * 2 * x.T @ err / 40, b - 0.1 * 2 * err.mean()
    return w, b, x @ w + b


@pytest.mark.timeout(600)
def test_ray_actors_on_two_hosts_train_to_the_one_process_weights(ray_report: dict[str, Any]) -> None:
    """The ray launcher's two actors run one on each host (their machine ids are the hosts'), train
    to the weights computed in one process (to 1e-12) and predict every row."""
    assert "error" not in ray_report, ray_report["error"]
    assert sorted(ray_report["machines"]) == sorted(h["machine_id"] for h in ray_report["hosts"])
    w, b, pred = _one_process_fit()
    np.testing.assert_allclose(ray_report["w"], w, atol=1e-12)
    np.testing.assert_allclose(ray_report["b"], b, atol=1e-12)
    np.testing.assert_allclose(ray_report["pred"], pred, atol=1e-9)
