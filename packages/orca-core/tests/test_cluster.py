"""init_orca_context attaches to real clusters on this machine and runs XShards jobs there.

The clusters come from the session fixtures ``spark_standalone_master`` and
``ray_cluster_handle``; each driver runs in a fresh interpreter (the test session already
holds the shared local context).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orca.core.testing.clusters import RayCluster, pid_alive, pyspark_home, run_python

STANDALONE_DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    from orca.core import init_orca_context, stop_orca_context
    from orca.core.data import XShards
    from orca.core.testing.clusters import process_tree, process_name

    ctx = init_orca_context(
        cluster_mode="standalone", master=sys.argv[1], cores=1, memory="512m", num_nodes=2,
        driver_host="127.0.0.1", conf={"spark.ui.enabled": "false"},
    )
    sc = ctx.spark_session().sparkContext
    deadline = time.monotonic() + 90
    while sc._jsc.sc().getExecutorIds().size() < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    num_executors = int(sc._jsc.sc().getExecutorIds().size())

    def executor_jvm(_):
        # The nearest java ancestor of this Python worker: the JVM that ran the task.
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{ppid}/comm") as f:
                if f.read().strip() == "java":
                    return ppid
            pid = ppid
        return -1

    task_jvms = sc.parallelize(range(8), 8).map(executor_jvm).distinct().collect()
    from pyspark import SparkContext
    driver_jvm = SparkContext._gateway.proc.pid
    shards = XShards.partition({"x": np.arange(1000, dtype=np.int64)}, num_shards=4)
    partial = shards.transform_shard(lambda s: int(s["x"].sum())).collect()
    report = {
        "master": sc.master,
        "num_executors": num_executors,
        "task_jvms": task_jvms,
        "driver_jvm": driver_jvm,
        "num_partitions": shards.num_partitions(),
        "partial_sums": partial,
        "rdd_sum": sc.parallelize(range(1000), 4).sum(),
    }
    ours = process_tree(os.getpid())[1:]
    stop_orca_context()
    deadline = time.monotonic() + 15  # poll: the JVM takes a moment to exit
    while time.monotonic() < deadline and any(process_name(p) == "java" and os.path.exists(f"/proc/{p}") for p in ours):
        time.sleep(0.2)
    report["java_left"] = [p for p in ours if process_name(p) == "java" and os.path.exists(f"/proc/{p}")]
    print(json.dumps(report))
    """
)


@pytest.mark.timeout(420)
def test_standalone_attach_runs_an_xshards_job_on_two_executors(spark_standalone_master: str) -> None:
    report = run_python(STANDALONE_DRIVER.replace("sys.argv[1]", repr(spark_standalone_master)), timeout_s=360)
    assert report["master"] == spark_standalone_master
    assert report["num_executors"] == 2
    assert report["task_jvms"] and -1 not in report["task_jvms"]
    assert report["driver_jvm"] not in report["task_jvms"]  # tasks ran in executor JVMs
    assert report["num_partitions"] == 4
    assert sum(report["partial_sums"]) == 499500 and len(report["partial_sums"]) == 4
    assert report["rdd_sum"] == 499500
    assert report["java_left"] == []


RAY_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from orca.core import init_orca_context, stop_orca_context
    from orca.core.data import XShards

    ctx = init_orca_context(runtime="ray", address=sys.argv[1])
    import ray

    runtime = ctx.ray_runtime()

    @ray.remote(num_cpus=1)
    def where(i):
        time.sleep(0.5)
        return ray.get_runtime_context().get_node_id()

    nodes = ray.get([where.options(scheduling_strategy="SPREAD").remote(i) for i in range(6)])
    shards = XShards.partition({"x": np.arange(100, dtype=np.int64)}, num_shards=4, backend="ray")
    partial = shards.transform_shard(lambda s: int(s["x"].sum())).collect()
    report = {
        "num_nodes": runtime.num_nodes,
        "cpus_per_node": list(runtime.cpus_per_node),
        "address": runtime.address,
        "task_nodes": sorted(set(nodes)),
        "alive_nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]),
        "has_spark": ctx.has_spark,
        "partial_sums": partial,
    }
    stop_orca_context()
    report["connected_after_stop"] = ray.is_initialized()
    print(json.dumps(report))
    """
)


@pytest.mark.timeout(420)
def test_ray_attach_runs_tasks_on_both_nodes(ray_cluster_handle: RayCluster) -> None:
    cluster = ray_cluster_handle
    code = RAY_DRIVER.replace("sys.argv[1]", repr(cluster.address))
    report = run_python(code, env=cluster.env, timeout_s=360)
    assert report["num_nodes"] == 2
    assert report["cpus_per_node"] == [1, 1]
    assert report["address"] == cluster.address
    assert len(report["task_nodes"]) == 2
    assert report["task_nodes"] == report["alive_nodes"]
    assert report["has_spark"] is False
    assert sum(report["partial_sums"]) == 4950
    assert report["connected_after_stop"] is False
    # Stopping an attached context disconnects; the cluster keeps running.
    assert all(pid_alive(p.pid) for p in cluster.processes)


SUBMITTED_APP = textwrap.dedent(
    """
    import json
    from pyspark.sql import SparkSession
    from orca.core import init_orca_context, stop_orca_context

    ctx = init_orca_context(cluster_mode="spark-submit")
    session = ctx.spark_session()
    sc = session.sparkContext
    report = {
        "same_session": session is SparkSession.getActiveSession(),
        "master": sc.master,
        "app_name": sc.appName,
        "sum": sc.parallelize(range(100), 2).sum(),
    }
    stop_orca_context()
    report["still_running_after_stop"] = not sc._jsc.sc().isStopped()
    print(json.dumps(report))
    """
)


@pytest.mark.timeout(300)
def test_spark_submit_mode_attaches_to_the_submitted_session(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(SUBMITTED_APP)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    out = subprocess.run(
        [str(pyspark_home() / "bin" / "spark-submit"), "--master", "local[1]", "--name", "submitted",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1", str(app)],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {
        "same_session": True,
        "master": "local[1]",
        "app_name": "submitted",
        "sum": 4950,
        "still_running_after_stop": True,
    }
