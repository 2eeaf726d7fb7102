"""OrcaContext: local Spark on loopback, lazy Ray, one context, nothing left behind, conf per mode.

Tests that need a context of their own (lazy start, stop, exit without stop, a failed start)
run their driver in a fresh interpreter (``run_python``), so they never touch the session's
shared ``orca_context``; each such driver runs once per module and several tests read its
report.
"""

from __future__ import annotations

import sys
import textwrap
import time
from typing import Any

import pytest

from orca.core import OrcaContext, OrcaSettings, init_orca_context
from orca.core._spark_conf import build_spark_conf
from orca.core.testing.clusters import pid_alive, process_name, run_python

# Shared by the drivers below: this process's own engine processes, by name.
_OUR_PROCESSES = """
import json, os, sys, time
from orca.core import OrcaContext, init_orca_context, stop_orca_context
from orca.core.testing.clusters import context_processes as ours


def names(pids):
    return sorted(set(pids.values()))
"""

ENGINES = {"java", "raylet", "gcs_server"}


def _driver(body: str) -> str:
    return _OUR_PROCESSES + textwrap.dedent(body)


# ----------------------------------------------------------------------------- in-process


@pytest.mark.timeout(120)
def test_local_spark_runs_a_job_on_local_2_bound_to_loopback(orca_context: OrcaContext) -> None:
    sc = orca_context.spark_session().sparkContext
    assert sc.master == "local[2]"
    assert sc.getConf().get("spark.driver.host") == "127.0.0.1"
    assert sc.getConf().get("spark.driver.bindAddress") == "127.0.0.1"
    assert sc.getConf().get("spark.pyspark.python") == sys.executable
    assert sc.parallelize(range(1000), 4).map(lambda x: x * 2).sum() == 999000


@pytest.mark.timeout(60)
def test_init_twice_returns_the_same_context(orca_context: OrcaContext) -> None:
    assert init_orca_context() is orca_context
    assert init_orca_context(cluster_mode="local", cores=2) is orca_context
    assert OrcaContext.active() is orca_context
    assert OrcaContext.get_spark_session() is orca_context.spark_session()


@pytest.mark.timeout(60)
def test_init_with_other_runtime_warns_and_returns_the_running_context(
    orca_context: OrcaContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="orca"):
        assert init_orca_context(runtime="ray") is orca_context
    assert "runtime='ray'" in caplog.text


@pytest.mark.timeout(60)
def test_settings_live_on_the_context_not_on_the_class(orca_context: OrcaContext) -> None:
    assert isinstance(orca_context.settings, OrcaSettings)
    assert orca_context.settings.worker_timeout_s == 180.0
    a, b = OrcaSettings(), OrcaSettings()
    a.shard_size = 7
    assert b.shard_size is None
    assert OrcaSettings().worker_timeout_s == 600.0


@pytest.mark.timeout(60)
def test_the_reference_class_assignment_sets_the_setting(orca_context: OrcaContext) -> None:
    """OrcaContext.<setting> = value (the reference's samples set log_output so, before init) reaches
    the running context and every context started after; a bad value is refused at once."""
    from orca.core import context

    before = dict(vars(orca_context.settings))
    try:
        OrcaContext.max_failures = 2
        OrcaContext.log_output = True
        assert orca_context.settings.max_failures == 2 and OrcaContext.max_failures == 2
        settings, _ = context._validate("local", 2, "2g", 1, "spark", None, {"worker_timeout_s": 30.0})
        assert settings.log_output is True and settings.max_failures == 2  # the next context's
        assert settings.worker_timeout_s == 30.0  # init_orca_context's own arguments win
        with pytest.raises(ValueError, match="max_failures must be a non-negative int"):
            OrcaContext.max_failures = -1
        with pytest.raises(ValueError, match="worker_timeout_s must be > 0"):
            OrcaContext.worker_timeout_s = "soon"
        with pytest.raises(AttributeError):
            OrcaContext.no_such_setting  # noqa: B018 - the read is the test
        with pytest.raises(ValueError, match="pandas_read_backend must be 'pandas' or 'spark'"):
            OrcaContext.pandas_read_backend = "dask"
        with pytest.raises(ValueError, match=r"worker_data_memory_mb must be >= 0 \(MB\), got -1"):
            OrcaContext.worker_data_memory_mb = -1
        with pytest.raises(ValueError, match=r"warm_workers_s must be >= 0 seconds \(0: no warm workers\), got -1"):
            context._validate("local", 2, "2g", 1, "spark", None, {"warm_workers_s": -1})
        with pytest.raises(ValueError, match="train_data_store must be 'DRAM', 'DISK_n'"):
            OrcaContext.train_data_store = "SSD"
    finally:
        context._class_settings.clear()
        for name, value in before.items():
            setattr(orca_context.settings, name, value)


# ----------------------------------------------------------------------------- bad arguments


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cluster_mode": "mesos"}, ValueError, "cluster_mode='mesos'"),
        ({"runtime": "dask"}, ValueError, "runtime='dask'"),
        ({"cluster_mode": "standalone"}, ValueError, "master='spark://host:port'"),
        ({"cluster_mode": "standalone", "master": "local[2]"}, ValueError, "got 'local[2]'"),
        (
            {"cluster_mode": "k8s-client", "master": "k8s://https://127.0.0.1:6443"},
            ValueError,
            "container_image",
        ),
        ({"cluster_mode": "k8s-client", "container_image": "orca:1"}, ValueError, "k8s://"),
        ({"memory": "lots"}, ValueError, "memory='lots'"),
        ({"cores": 0}, ValueError, "cores=0"),
        ({"worker_timeout_s": 0}, ValueError, "worker_timeout_s"),
        ({"workers_timeout": 5}, TypeError, "'workers_timeout'"),
    ],
)
def test_bad_arguments_fail_fast_before_anything_starts(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    import psutil

    before = OrcaContext.active()
    children = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(error) as info:
        init_orca_context(**kwargs)
    assert message in str(info.value)
    assert OrcaContext.active() is before
    started = [c.name() for c in psutil.Process().children(recursive=True) if c.pid not in children]
    assert started == [], f"refused arguments still started {started}"  # no JVM, no Ray: nothing began


# ----------------------------------------------------------------------------- conf per mode


def test_local_conf_binds_driver_to_loopback_with_this_interpreter() -> None:
    conf = build_spark_conf("local", 3, "1g", 1)
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.driver.memory"] == "1g"
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.ui.enabled"] == "false"


def test_standalone_conf_sizes_executors_from_cores_memory_and_num_nodes() -> None:
    conf = build_spark_conf("standalone", 2, "3g", 4, master="spark://10.0.0.1:7077")
    assert conf["spark.master"] == "spark://10.0.0.1:7077"
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.cores.max"] == "8"
    assert conf["spark.driver.memory"] == "2g"


def test_config_yarn_client_conf_ships_the_packed_python_env() -> None:
    conf = build_spark_conf(
        "yarn-client", 4, "8g", 3, penv_archive="hdfs:///envs/orca.tar.gz", driver_memory="4g"
    )
    assert conf["spark.master"] == "yarn"
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.executor.cores"] == "4"
    assert conf["spark.executor.memory"] == "8g"
    assert conf["spark.driver.memory"] == "4g"
    assert conf["spark.yarn.dist.archives"] == "hdfs:///envs/orca.tar.gz#orca_python_env"
    assert conf["spark.pyspark.python"] == "orca_python_env/bin/python"
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == "orca_python_env/bin/python"


def test_config_k8s_client_conf_names_master_image_and_namespace() -> None:
    conf = build_spark_conf(
        "k8s-client",
        2,
        "2g",
        5,
        master="k8s://https://10.0.0.1:6443",
        container_image="registry/orca:0.1",
        namespace="ml",
        driver_host="10.0.0.9",
    )
    assert conf["spark.master"] == "k8s://https://10.0.0.1:6443"
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.kubernetes.container.image"] == "registry/orca:0.1"
    assert conf["spark.kubernetes.namespace"] == "ml"
    assert conf["spark.executor.instances"] == "5"
    assert conf["spark.driver.host"] == "10.0.0.9"


def test_spark_submit_conf_adds_nothing_and_user_conf_wins() -> None:
    assert build_spark_conf("spark-submit", 1, "1g", 1) == {}
    conf = build_spark_conf("local", 2, "1g", 1, conf={"spark.ui.enabled": "true", "spark.x": 1})
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.x"] == "1"


# ----------------------------------------------------------------------------- own drivers

SPARK_RUNTIME_DRIVER = _driver(
    """
    report = {}
    ctx = init_orca_context(cores=2, memory="1g")
    report["ray_imported_after_init"] = "ray" in sys.modules
    report["after_init"] = names(ours(ctx))
    report["has_ray_after_init"] = ctx.has_ray
    runtime = ctx.ray_runtime()
    report["ray_nodes"] = runtime.num_nodes
    report["ray_address"] = runtime.address
    running = ours(ctx)
    report["running"] = running
    stop_orca_context()
    deadline = time.monotonic() + 10
    from orca.core.testing.clusters import pid_alive
    while time.monotonic() < deadline and any(pid_alive(int(p)) for p in running):
        time.sleep(0.2)
    report["left"] = {p: n for p, n in running.items() if pid_alive(int(p))}
    report["active_after_stop"] = OrcaContext.active() is not None
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def spark_runtime_report() -> dict[str, Any]:
    """One driver: init (Spark), then ask for Ray, then stop; what it saw at each step."""
    return dict(run_python(SPARK_RUNTIME_DRIVER, timeout_s=240))


@pytest.mark.timeout(300)
def test_spark_runtime_does_not_start_ray_until_asked(spark_runtime_report: dict[str, Any]) -> None:
    assert spark_runtime_report["ray_imported_after_init"] is False
    assert spark_runtime_report["has_ray_after_init"] is False
    assert "java" in spark_runtime_report["after_init"]
    assert not {"raylet", "gcs_server"} & set(spark_runtime_report["after_init"])


@pytest.mark.timeout(300)
def test_ray_started_on_demand_is_a_loopback_single_node(spark_runtime_report: dict[str, Any]) -> None:
    assert spark_runtime_report["ray_nodes"] == 1
    assert spark_runtime_report["ray_address"].startswith("127.0.0.1:")
    assert {"java", "raylet", "gcs_server"} <= set(spark_runtime_report["running"].values())


@pytest.mark.timeout(300)
def test_stop_leaves_no_java_raylet_or_gcs_server_of_ours(spark_runtime_report: dict[str, Any]) -> None:
    assert spark_runtime_report["left"] == {}
    assert spark_runtime_report["active_after_stop"] is False


RAY_RUNTIME_EXIT_DRIVER = _driver(
    """
    report = {}
    ctx = init_orca_context(runtime="ray", cores=2, memory="1g")
    report["has_spark_after_init"] = ctx.has_spark
    report["has_ray_after_init"] = ctx.has_ray
    report["after_init"] = names(ours(ctx))
    total = ctx.spark_session().sparkContext.parallelize(range(10), 2).sum()
    report["spark_sum"] = total
    report["running"] = ours(ctx)
    print(json.dumps(report), flush=True)
    # exit without stop_orca_context(): the atexit hook must clean up
    """
)


@pytest.fixture(scope="module")
def ray_runtime_exit_report() -> dict[str, Any]:
    """One driver: init (Ray), then ask for Spark, then exit without stopping."""
    report = dict(run_python(RAY_RUNTIME_EXIT_DRIVER, timeout_s=240))
    deadline = time.monotonic() + 15
    running = {int(p): n for p, n in report["running"].items()}
    while time.monotonic() < deadline and any(pid_alive(p) for p in running):
        time.sleep(0.2)
    report["left"] = {p: process_name(p) for p in running if pid_alive(p)}
    return report


@pytest.mark.timeout(300)
def test_ray_runtime_starts_ray_now_and_spark_lazily(ray_runtime_exit_report: dict[str, Any]) -> None:
    assert ray_runtime_exit_report["has_ray_after_init"] is True
    assert ray_runtime_exit_report["has_spark_after_init"] is False
    assert {"raylet", "gcs_server"} <= set(ray_runtime_exit_report["after_init"])
    assert "java" not in ray_runtime_exit_report["after_init"]
    assert ray_runtime_exit_report["spark_sum"] == 45
    assert ENGINES <= set(ray_runtime_exit_report["running"].values())


@pytest.mark.timeout(300)
def test_exit_without_stop_leaves_no_process_behind(ray_runtime_exit_report: dict[str, Any]) -> None:
    assert ray_runtime_exit_report["left"] == {}


FAILED_START_DRIVER = _driver(
    """
    report = {}
    try:
        init_orca_context(cores=2, conf={"spark.task.cpus": "3"})
    except Exception as exc:
        report["error"] = type(exc).__name__ + ": " + str(exc)[:300]
    report["active"] = OrcaContext.active() is not None
    deadline = time.monotonic() + 15  # poll: processes take a moment to exit
    while ours(None) and time.monotonic() < deadline:
        time.sleep(0.2)
    report["left"] = ours(None)
    print(json.dumps(report))
    """
)


@pytest.mark.timeout(300)
def test_context_that_fails_to_start_leaves_nothing_behind() -> None:
    report = run_python(FAILED_START_DRIVER, timeout_s=240)
    assert report["error"].startswith("RuntimeError: Spark did not start")
    assert "cpus per task = 3" in report["error"]
    assert report["active"] is False
    assert not ENGINES & set(report["left"].values())


@pytest.mark.timeout(120)
def test_config_spark_barrier_timeout_is_only_a_backstop_beyond_the_worker_timeout(orca_context):
    """The driver judges silence (the conformance suite's liveness tests run real stalls); Spark's
    own barrier wait must not cut off a slow but working peer first."""
    from orca.core.engine.liveness import backstop_s

    conf = orca_context.spark_session().sparkContext.getConf()
    timeout = orca_context.settings.worker_timeout_s
    assert conf.get("spark.barrier.sync.timeout") == f"{int(backstop_s(timeout))}s"
    assert backstop_s(timeout) >= 10 * timeout


def test_registered_jars_join_spark_jars_and_missing_ones_are_refused(tmp_path):
    from orca.core import context as ctx_mod

    jar = tmp_path / "engine.jar"
    jar.write_bytes(b"PK")
    try:
        ctx_mod.register_spark_jars("test-fw", [str(jar)])
        entries = {"spark.jars": "/opt/other.jar"}
        ctx_mod._add_registered_jars(entries)
        assert entries["spark.jars"] == f"/opt/other.jar,{jar}"
        assert "spark.driver.extraClassPath" not in entries  # never ahead of Spark's own jars
        ctx_mod._add_registered_jars(entries)
        assert entries["spark.jars"].count(str(jar)) == 1
        with pytest.raises(FileNotFoundError, match="missing.jar"):
            ctx_mod.register_spark_jars("test-fw", [str(tmp_path / "missing.jar")])
    finally:
        ctx_mod._REGISTERED_JARS.pop("test-fw", None)


@pytest.mark.parametrize(("args", "mode"), [
    ({}, "embedded"),                                                             # local: Ray on this machine
    ({"cluster_mode": "standalone"}, "on_spark"),  # a cluster: never the driver alone
    ({"cluster_mode": "yarn-client"}, "on_spark"),
    ({"cluster_mode": "standalone", "ray_on_driver": True}, "embedded"),
    ({"cluster_mode": "standalone", "init_ray_on_spark": True}, "on_spark"),
    ({"cluster_mode": "standalone", "address": "10.0.0.1:6379"}, "attached"),
    ({"address": "10.0.0.1:6379"}, "attached"),
])
def test_a_cluster_mode_runs_ray_on_the_executors_unless_told_otherwise(args: dict[str, Any], mode: str) -> None:
    """Which Ray a context would start (decided before anything starts): on a Spark cluster, Ray
    runs on the executors; the driver alone needs ``ray_on_driver=True``; ``address=`` attaches."""
    assert OrcaContext(**args).ray_mode() == mode


def test_workers_that_do_not_fit_the_ray_cluster_name_the_three_ways_to_give_it_cpus() -> None:
    """The error a user on a cluster meets when Ray has too few CPUs names each way out."""
    from orca.core.context import RayRuntime
    from orca.core.engine.ray_backend import RayWorkerGroup
    from orca.core.engine.runner import Runner

    group = RayWorkerGroup(Runner, {}, num_workers=2, threads=1, timeout_s=60)
    with pytest.raises(ValueError) as caught:
        group._check_room(RayRuntime("127.0.0.1:1", 1, (1,), False, ("n1",), "embedded"))
    msg = str(caught.value)
    assert "2 workers x 1 CPUs need more than the Ray cluster's 1 CPUs" in msg
    assert "embedded Ray" in msg
    for way in ("init_ray_on_spark=True", "ray_on_driver=True", "address='host:port'", "workers_per_node"):
        assert way in msg, (way, msg)


def test_a_ray_node_on_an_executor_offers_the_executors_cpus_and_gpus_together() -> None:
    """Ray-on-Spark: each executor's Ray node takes its CPUs from ``cores`` and its GPUs from the
    executors' ``spark.executor.resource.gpu.amount`` (the setting Spark schedules GPUs by);
    a fractional or negative amount is refused with the setting's name."""
    from pyspark import SparkConf

    from orca.core._ray_node import _node_command
    from orca.core._ray_spark import executor_gpus

    assert executor_gpus(SparkConf(loadDefaults=False)) == 0
    assert executor_gpus(SparkConf(loadDefaults=False).set("spark.executor.resource.gpu.amount", "2")) == 2
    for bad in ("0.5", "-1", "two"):
        with pytest.raises(ValueError, match="spark.executor.resource.gpu.amount"):
            executor_gpus(SparkConf(loadDefaults=False).set("spark.executor.resource.gpu.amount", bad))
    args = {"gcs": "127.0.0.1:6379", "num_cpus": 4, "num_gpus": 2, "memory": 2 << 30,
            "object_store_memory": 1 << 30, "key": "e1", "context": "c1", "loopback": True}
    cmd = _node_command(args, "ray-temp")
    assert cmd[cmd.index("--num-cpus") + 1] == "4" and cmd[cmd.index("--num-gpus") + 1] == "2", cmd
    ports = [int(cmd[cmd.index(flag) + 1]) for flag in ("--dashboard-agent-listen-port", "--metrics-export-port")]
    ephemeral_start = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    if ephemeral_start > 21000:  # (where the range leaves room below it)
        assert all(p < ephemeral_start for p in ports), ports  # no bind(0) of another process takes them


def test_the_ports_of_one_ray_node_differ_even_when_every_draw_picks_the_same_number(monkeypatch) -> None:
    """Ray refuses a node whose components share a port (CI saw a head's dashboard agent handed
    its GCS port); a node's ports come from one draw, so a random source that repeats itself
    cannot hand one port out twice."""
    from types import SimpleNamespace

    from orca.core import _net
    from orca.core._ray_node import _node_command

    monkeypatch.setattr(_net, "_RANDOM", SimpleNamespace(randrange=lambda lo, hi: lo + 7))
    args = {"gcs": "127.0.0.1:6379", "num_cpus": 1, "memory": 1 << 30,
            "object_store_memory": 1 << 28, "key": "e1", "context": "c1", "loopback": True}
    cmd = _node_command(args, "ray-temp")
    ports = [int(cmd[cmd.index(flag) + 1]) for flag in ("--dashboard-agent-listen-port", "--metrics-export-port")]
    assert len(set(ports)) == 2, ports
    assert len(set(_net.find_free_ports(5))) == 5


# ------------------------------------------------- Ray asked for up front: started alongside Spark

UP_FRONT_DRIVER = _driver(
    """
    import socket
    import psutil
    import ray  # imported ahead, so that the race below is the engines' starts, not this import
    from orca.core import _ray_spark, context
    from orca.core._jvm import gateway_process
    from orca.core._procs import pid_alive, processes_mentioning

    heads = []  # each Ray head the contexts started: its context, address, when it began and was up
    start_head = _ray_spark.RayOnSpark.start_head

    def recorded(self, host):
        began = time.time()
        gcs = start_head(self, host)
        heads.append({"context": self.context_id, "gcs": gcs, "began": began, "up": time.time()})
        return gcs

    _ray_spark.RayOnSpark.start_head = recorded
    spark_up = []
    start_spark = context.OrcaContext._start_spark

    def timed(self):
        session = start_spark(self)
        spark_up.append(time.time())
        return session

    context.OrcaContext._start_spark = timed

    def engines(context_id):
        pids = set(ours(None)) | {str(p) for p in processes_mentioning(f"orca-ray-{context_id}")}
        return {p: psutil.Process(int(p)).name() for p in pids if pid_alive(int(p))}

    def left(context_id):
        deadline = time.monotonic() + 15  # processes take a moment to exit
        while engines(context_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        return sorted(set(engines(context_id).values()))

    def answers(address):
        host, port = address.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return True
        except OSError:
            return False

    def failed_start(**kwargs):
        heads.clear()
        try:
            init_orca_context(cores=2, memory="1g", init_ray_on_spark=True, **kwargs)
            return {"error": None}
        except Exception as exc:
            head = heads[0] if heads else None
            return {"error": type(exc).__name__ + ": " + str(exc)[:600], "active": OrcaContext.active() is not None,
                    "head_was_up": head is not None, "head_answers": bool(head) and answers(head["gcs"]),
                    "jvm": gateway_process() is not None, "left": left(head["context"] if head else "-")}

    # Ray refuses to start a head while RAY_ADDRESS names a cluster to join (before it starts a process)
    os.environ["RAY_ADDRESS"] = "127.0.0.1:1"
    report = {"ray_fails": failed_start()}
    del os.environ["RAY_ADDRESS"]
    report["spark_fails"] = failed_start(conf={"spark.task.cpus": "3"})  # Spark refuses the conf
    heads.clear()
    sc = init_orca_context(cores=2, memory="1g", init_ray_on_spark=True)
    runtime = sc.ray_runtime()
    head = heads[0]
    gcs = [p for p, n in engines(head["context"]).items() if n == "gcs_server"]
    report["both"] = {
        "mode": runtime.mode, "worker_cpus": [c for _, c in runtime.worker_nodes], "nodes": runtime.num_nodes,
        "sum": sc.parallelize(range(10), 2).sum(),
        "ray_sum": ray.get(ray.remote(lambda: 1 + 1).remote()),
        "jvm_created": psutil.Process(gateway_process().pid).create_time(),
        "gcs_created": psutil.Process(int(gcs[0])).create_time(), "head_up": head["up"], "spark_up": spark_up[-1],
    }
    stop_orca_context()
    report["both"]["left"] = left(head["context"])
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def up_front_report() -> dict[str, Any]:
    """One driver, three ``init_orca_context(init_ray_on_spark=True)``: Ray's head fails, Spark
    fails, both start (then stop)."""
    return dict(run_python(UP_FRONT_DRIVER, timeout_s=240))


@pytest.mark.timeout(300)
def test_ray_asked_for_up_front_starts_its_head_while_the_jvm_starts(up_front_report: dict[str, Any]) -> None:
    """``init_ray_on_spark=True``: the Ray head's processes and the JVM start at the same time: the
    head's GCS server began before Spark's session was up and the JVM before the head was up (one
    after the other, the GCS server would begin after the session was up)."""
    both = up_front_report["both"]
    began = max(both["jvm_created"], both["gcs_created"])
    assert began < min(both["spark_up"], both["head_up"]), both
    assert both["mode"] == "on_spark" and both["nodes"] == 2 and both["worker_cpus"] == [2], both
    assert both["sum"] == 45 and both["ray_sum"] == 2
    assert both["left"] == []


@pytest.mark.timeout(300)
def test_a_ray_head_that_fails_beside_spark_raises_its_error_and_stops_spark(up_front_report: dict[str, Any]) -> None:
    failed = up_front_report["ray_fails"]
    assert failed["error"].startswith("RuntimeError: Ray did not start (Ray-on-Spark's head on the driver"), failed
    assert "ValueError: When connecting to an existing cluster, num_cpus" in failed["error"], failed
    assert failed["active"] is False and failed["jvm"] is False
    assert not ENGINES & set(failed["left"]), failed


@pytest.mark.timeout(300)
def test_a_spark_that_fails_beside_the_ray_head_raises_its_error_and_stops_the_head(
        up_front_report: dict[str, Any]) -> None:
    failed = up_front_report["spark_fails"]
    assert failed["error"].startswith("RuntimeError: Spark did not start"), failed
    assert "cpus per task = 3" in failed["error"]
    assert failed["head_was_up"] is True and failed["head_answers"] is False, failed  # it started, then stopped
    assert failed["active"] is False and failed["jvm"] is False
    assert not ENGINES & set(failed["left"]), failed
