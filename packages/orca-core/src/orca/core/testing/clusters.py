"""Real multi-process clusters on 127.0.0.1 for tests, and helpers to check what is left.

Context managers start a real cluster from the installed engines and take it down,
process by process, on exit:

- :func:`spark_standalone_cluster` starts a Spark standalone master and one worker with
  pyspark's own ``bin/spark-class`` and yields a :class:`SparkStandaloneCluster`.
- :func:`spark_connect_server` starts a Spark Connect server (pyspark's
  ``sbin/start-connect-server.sh``) with a token, on ``local[N]`` or a standalone master, and
  yields a :class:`SparkConnectServer`.
- :func:`ray_cluster` starts a Ray head and a second Ray node with ``ray start`` and yields a
  :class:`RayCluster`.

For hosts with addresses of their own (a real network: what listens where, who reaches whom),
:mod:`orca.core.testing.hosts` makes hosts as Linux network namespaces
(:func:`~orca.core.testing.hosts.namespace_hosts`) and a Spark standalone cluster across them
(:func:`~orca.core.testing.hosts.spark_hosts_cluster`, built on this module's Spark helpers).

Other engineers and other test runs may run their own Spark and Ray on the same machine, so
nothing here stops processes by name (no ``ray stop``, no ``pkill java``): each cluster kills
exactly the process trees it started, plus any process whose command line names its private
temporary directory.

Tests that need an Orca context of their own (a cluster attach, an ``atexit`` check) run
their driver in a fresh interpreter with :func:`run_python`, so they never disturb the
session-wide context of the ``orca_context`` fixture.

Example (a framework package's test)::

    from orca.core.testing.clusters import run_python, spark_standalone_cluster

    def test_fit_on_standalone():
        with spark_standalone_cluster(cores=2, memory="1g") as cluster:
            out = run_python(DRIVER_CODE, env={"ORCA_MASTER": cluster.master_url})
        assert out["loss"] < 1.0
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orca.core._java import ensure_java
from orca.core._net import find_free_ports
from orca.core._procs import kill_pids, pid_alive, process_name, process_tree, processes_mentioning
from orca.core._ray_auth import auth_env, new_token
from orca.core._ray_node import RAY_START

HOST = "127.0.0.1"
__all__ = [
    "HOST", "RayCluster", "SparkConnectServer", "SparkStandaloneCluster", "context_processes", "kill_pids", "pid_alive", "process_name",
    "process_tree",
    "processes_mentioning", "pyspark_home", "ray_cluster", "ray_env", "run_python", "spark_connect_server", "spark_standalone_cluster",
]

def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _reap(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


# ----------------------------------------------------------------------------- spark


@dataclass
class SparkStandaloneCluster:
    """A running Spark standalone cluster started by :func:`spark_standalone_cluster`.

    Attributes:
        master_url: ``spark://127.0.0.1:<port>``, to pass as ``master=`` to
            ``init_orca_context(cluster_mode="standalone", ...)``.
        webui_url: the master's web UI; ``<webui_url>/json/`` describes workers and apps.
        cores: cores the worker offers.
        memory: memory the worker offers (``"1g"``).
        workdir: the private temporary directory (logs, executor work dirs).
        processes: the ``spark-class`` processes (master first, then the worker).
    """

    master_url: str
    webui_url: str
    cores: int
    memory: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def state(self) -> dict[str, Any]:
        """Return the master's JSON state (workers, alive workers, active and completed apps)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as resp:
            return dict(json.loads(resp.read().decode()))

    def pids(self) -> list[int]:
        """All live processes of this cluster: master, worker, executors and their Python workers."""
        out: list[int] = []
        for proc in self.processes:
            out.extend(process_tree(proc.pid))
        out.extend(processes_mentioning(str(self.workdir)))
        return list(dict.fromkeys(out))


def pyspark_home() -> Path:
    """The Spark distribution inside the installed pyspark wheel (holds ``bin/spark-class``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _spark_env(workdir: Path) -> dict[str, str]:
    ensure_java()
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(pyspark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_CONF_DIR": str(workdir / "conf"),
            "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_WORKER_DIR": str(workdir / "work"),
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    return env


@contextmanager
def spark_standalone_cluster(
    cores: int = 2, memory: str = "1g", *, workers: int = 1, timeout_s: float = 120.0
) -> Iterator[SparkStandaloneCluster]:
    """Start a Spark standalone master and ``workers`` workers on 127.0.0.1; kill all on exit.

    Every port is a free one (master RPC and web UI; the worker's are ephemeral) and the
    master's REST submission server (port 6066 by default) is off, so several clusters can
    run on one machine.

    Args:
        cores: cores each worker offers.
        memory: memory each worker offers, e.g. ``"1g"``.
        workers: Spark worker processes (each its own JVM, work dir and executors).
        timeout_s: how long to wait for the workers to register with the master.

    Yields:
        The running :class:`SparkStandaloneCluster`.

    Raises:
        RuntimeError: a process died or the worker did not register within ``timeout_s``
            (the message carries the end of both logs).

    Examples:
        >>> with spark_standalone_cluster(cores=2) as cluster:   # doctest: +SKIP
        ...     init_orca_context(cluster_mode="standalone", master=cluster.master_url)
    """
    workdir = Path(tempfile.mkdtemp(prefix="orca-spark-"))
    for sub in ("conf", "logs", "work"):
        (workdir / sub).mkdir()
    props = workdir / "conf" / "spark-defaults.conf"
    props.write_text(
        "spark.master.rest.enabled false\n"
        "spark.worker.cleanup.enabled false\n"
        f"spark.driver.host {HOST}\n"
    )
    env = _spark_env(workdir)
    spark_class = str(pyspark_home() / "bin" / "spark-class")
    port, webui_port = find_free_ports(2, HOST)
    cluster = SparkStandaloneCluster(
        master_url=f"spark://{HOST}:{port}",
        webui_url=f"http://{HOST}:{webui_port}",
        cores=cores,
        memory=memory,
        workdir=workdir,
    )
    commands = [
        ("master", [spark_class, "org.apache.spark.deploy.master.Master",
                    "--host", HOST, "--port", str(port), "--webui-port", str(webui_port),
                    "--properties-file", str(props)]),
        *[(f"worker{i}" if i else "worker",
           [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url,
            "--host", HOST, "--cores", str(cores), "--memory", memory,
            "--webui-port", "0", "--work-dir", str(workdir / "work" / str(i)),
            "--properties-file", str(props)]) for i in range(workers)],
    ]
    logs = [workdir / "logs" / f"{name}.log" for name, _ in commands]
    try:
        for (_, cmd), log_path in zip(commands, logs, strict=True):
            with open(log_path, "wb") as log_file:
                cluster.processes.append(
                    subprocess.Popen(
                        cmd, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                )
        _wait_for_spark_worker(cluster, logs, timeout_s, workers)
        yield cluster
    finally:
        kill_pids(cluster.pids())
        _reap(cluster.processes)
        shutil.rmtree(workdir, ignore_errors=True)


_MASTER_UI_BOUND = re.compile(r"Bound MasterWebUI to \S+, and started at (http://\S+)")


def _wait_for_spark_worker(
    cluster: SparkStandaloneCluster, logs: list[Path], timeout_s: float, workers: int = 1
) -> None:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for proc, log_path in zip(cluster.processes, logs, strict=False):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"Spark standalone process exited with {proc.returncode} "
                    f"({proc.args!r}):\n{_tail(log_path)}"
                )
        bound = _MASTER_UI_BOUND.search(_tail(logs[0], 100_000))
        if bound is not None and bound.group(1) != cluster.webui_url:
            # Spark moves a service to the next port when its own is taken: follow the log.
            cluster.webui_url = bound.group(1)
        try:
            state = cluster.state()
            alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) >= workers and all(w.get("cores") == cluster.cores for w in alive):
                return
        except (OSError, ValueError) as exc:  # the master UI is not up yet (or not yet bound)
            last_error = exc
        time.sleep(0.5)
    raise RuntimeError(
        f"no Spark worker registered with {cluster.master_url} within {timeout_s}s "
        f"(last error: {last_error}).\nmaster log:\n{_tail(logs[0])}\nworker log:\n{_tail(logs[1])}"
    )


# ----------------------------------------------------------------------------- spark connect


@dataclass
class SparkConnectServer:
    """A running Spark Connect server started by :func:`spark_connect_server`.

    Attributes:
        remote: the client URL with the server's token, ``sc://localhost:<port>/;token=...``, to
            pass as ``remote=`` to ``init_orca_context(cluster_mode="spark-connect", ...)`` (the
            host is ``localhost``: pyspark sends a token without TLS only there).
        port: the gRPC port on 127.0.0.1.
        master: the server's Spark master (``local[2]``, or a standalone ``spark://...``).
        workdir: the private temporary directory (logs, Spark's local dirs).
        process: the server's ``start-connect-server.sh --wait`` process.
    """

    remote: str
    port: int
    master: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def log(self, n: int = 4000) -> str:
        """The end of the server's log."""
        return _tail(self.workdir / "logs" / "connect-server.log", n)

    def pids(self) -> list[int]:
        """All live processes of this server: its JVM and the Python workers it started."""
        out = process_tree(self.process.pid) if self.process is not None else []
        out.extend(processes_mentioning(str(self.workdir)))
        return list(dict.fromkeys(out))


@contextmanager
def spark_connect_server(
    master: str = "local[2]", *, cores: int = 2, memory: str = "1g", num_nodes: int = 1,
    conf: Mapping[str, str] | None = None, timeout_s: float = 120.0,
) -> Iterator[SparkConnectServer]:
    """Start a Spark Connect server on 127.0.0.1 (a free port, a fresh token); kill it on exit.

    The server is pyspark's own ``sbin/start-connect-server.sh --wait`` (its Spark is Orca's
    configuration for ``master``: ``local[cores]``, or a standalone master with ``cores`` x
    ``num_nodes``), its Python workers run this interpreter, and clients must present the
    token (``SPARK_CONNECT_AUTHENTICATE_TOKEN``), which :attr:`SparkConnectServer.remote` carries.

    Args:
        master: ``local[N]`` or a standalone master URL (``spark://127.0.0.1:<port>``, e.g. of
            :func:`spark_standalone_cluster`).
        cores: cores of an executor on a standalone master.
        memory: executor memory on a standalone master (the server's driver memory otherwise).
        num_nodes: executors on a standalone master.
        conf: more Spark settings for the server.
        timeout_s: how long to wait for the server to listen.

    Yields:
        The running :class:`SparkConnectServer`.

    Raises:
        RuntimeError: the server exited or did not listen within ``timeout_s`` (with its log's end).

    Examples:
        >>> with spark_connect_server() as server:   # doctest: +SKIP
        ...     init_orca_context(cluster_mode="spark-connect", remote=server.remote)
    """
    from orca.core._spark_conf import build_spark_conf

    workdir = Path(tempfile.mkdtemp(prefix="orca-connect-"))
    for sub in ("conf", "logs", "work", "local"):
        (workdir / sub).mkdir()
    env = _spark_env(workdir)
    token = new_token()
    env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    env["SPARK_PID_DIR"] = str(workdir)
    (port,) = find_free_ports(1, HOST)
    if master.startswith("spark://"):
        entries = build_spark_conf("standalone", cores, memory, num_nodes, master=master, driver_host=HOST)
    else:
        entries = build_spark_conf("local", int(master[6:-1]) if master.startswith("local[") else cores, memory, 1)
        entries["spark.master"] = master
    entries.update({
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        "spark.local.dir": str(workdir / "local"),
        "spark.app.name": "orca-connect-test",
    })
    entries.update({str(k): str(v) for k, v in (conf or {}).items()})
    cmd = [str(pyspark_home() / "sbin" / "start-connect-server.sh"), "--wait"]
    for key, value in entries.items():
        cmd += ["--conf", f"{key}={value}"]
    server = SparkConnectServer(remote=f"sc://localhost:{port}/;token={token}", port=port,
                                master=entries["spark.master"], workdir=workdir)
    log_path = workdir / "logs" / "connect-server.log"
    try:
        with open(log_path, "wb") as log_file:
            server.process = subprocess.Popen(cmd, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log_file,
                                              stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not _port_open(HOST, port):
            if server.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {server.process.returncode}:\n"
                                   f"{server.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not listen on {HOST}:{port} in {timeout_s}s:\n"
                                   f"{server.log()}")
            time.sleep(0.5)
        yield server
    finally:
        kill_pids(server.pids())
        if server.process is not None:
            _reap([server.process])
        shutil.rmtree(workdir, ignore_errors=True)


# ----------------------------------------------------------------------------- ray


@dataclass
class RayCluster:
    """A running two-node Ray cluster started by :func:`ray_cluster`.

    Attributes:
        address: the GCS address ``127.0.0.1:<port>``, to pass as ``address=`` to
            ``init_orca_context(runtime="ray", ...)``.
        temp_dir: the cluster's private ``--temp-dir`` (sessions, logs, sockets).
        num_cpus: CPUs of the head and of the second node.
        env: the environment a driver attaching to this cluster should use.
        processes: the ``ray start --block`` processes (head first).
    """

    address: str
    temp_dir: Path
    num_cpus: tuple[int, int]
    env: dict[str, str] = field(default_factory=dict, repr=False)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def pids(self) -> list[int]:
        """All live processes of this cluster (GCS, raylets, agents, workers)."""
        out: list[int] = []
        for proc in self.processes:
            out.extend(process_tree(proc.pid))
        for pid in processes_mentioning(str(self.temp_dir)):
            out.extend(process_tree(pid))
        return list(dict.fromkeys(out))


def ray_env(temp_dir: Path | None = None, token: str | None = None) -> dict[str, str]:
    """The environment for Ray processes and drivers of a loopback test cluster.

    Token auth is on with ``token`` (a fresh one when not given), as Ray 2.60 has it by
    default: the driver and every node of the cluster share it.
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps every Ray server on 127.0.0.1 (with ``1``
    GCS, raylets and agents listen on all interfaces); this interpreter's ``bin`` comes first
    on ``PATH`` because Ray spawns ``python`` by name.
    """
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env.update(
        {
            **auth_env(token or new_token()),
            "ORCA_RAY_LOOPBACK": "1",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": bindir + os.pathsep + env.get("PATH", ""),
        }
    )
    if temp_dir is not None:
        env["RAY_TMPDIR"] = str(temp_dir)
        # Ray's autoscaler and dashboard metrics servers default to fixed ports.
        autoscaler_port, dashboard_port = find_free_ports(2, HOST)
        env["AUTOSCALER_METRIC_PORT"] = str(autoscaler_port)
        env["DASHBOARD_METRIC_PORT"] = str(dashboard_port)
    return env


@contextmanager
def ray_cluster(
    num_cpus_head: int = 1,
    num_cpus_worker: int = 1,
    *,
    object_store_mb: int = 128,
    timeout_s: float = 120.0,
    port: int | None = None,
) -> Iterator[RayCluster]:
    """Start a Ray head and a second Ray node on 127.0.0.1; kill both on exit.

    Each node is a ``ray start --block`` process with its own free ports and a private
    ``--temp-dir``, so it never clashes with another Ray on the machine. On exit the
    processes of this cluster are killed by PID (``ray stop`` would stop every Ray on the
    machine).

    Args:
        num_cpus_head: CPUs the head node offers.
        num_cpus_worker: CPUs the second node offers.
        object_store_mb: object store size of each node in MiB (Ray's minimum is 75).
        timeout_s: how long to wait for both nodes to be alive.
        port: the head's GCS port (default: a free one); code that attaches to a fixed address
            (the reference's tests: ``address="localhost:6379"``) needs its port.

    Yields:
        The running :class:`RayCluster`.

    Raises:
        RuntimeError: a node died or the two nodes were not alive within ``timeout_s``.
    """
    temp_dir = Path(tempfile.mkdtemp(prefix="orca-ray-"))
    env = ray_env(temp_dir)
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    # `ray start --address` refuses to add a node while RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    # (the setting that keeps Ray on loopback); lift that CLI check for our second node only.
    join_cmd = [sys.executable, "-c", RAY_START]
    # Every port is drawn in one call so that no two coincide: CI saw Ray refuse a head whose
    # dashboard agent had been handed the GCS port by a second, separate draw.
    (free_port, dashboard_port, client_port, *node_ports) = find_free_ports(7, HOST)
    port = free_port if port is None else port
    address = f"{HOST}:{port}"
    cluster = RayCluster(
        address=address, temp_dir=temp_dir, num_cpus=(num_cpus_head, num_cpus_worker), env=env
    )

    def node_args(num_cpus: int, agent_port: int, metrics_port: int) -> list[str]:
        # Every port Ray would otherwise take at a fixed default gets a free one.
        return [
            "--node-ip-address", HOST,
            "--num-cpus", str(num_cpus),
            "--object-store-memory", str(object_store_mb * 1024 * 1024),
            "--temp-dir", str(temp_dir),
            "--dashboard-agent-listen-port", str(agent_port),
            "--metrics-export-port", str(metrics_port),
            "--disable-usage-stats",
            "--block",
        ]

    commands = [
        ("head", [ray_bin, "start", "--head", "--port", str(port), "--include-dashboard=false",
                  "--dashboard-port", str(dashboard_port),
                  "--ray-client-server-port", str(client_port),
                  *node_args(num_cpus_head, *node_ports[:2])]),
        ("node", [*join_cmd, "start", "--address", address,
                  *node_args(num_cpus_worker, *node_ports[2:])]),
    ]
    logs = [temp_dir / f"{name}.log" for name, _ in commands]

    def start(cmd: list[str], log_path: Path) -> None:
        with open(log_path, "ab") as log_file:
            cluster.processes.append(subprocess.Popen(
                cmd, env=env, cwd=temp_dir, stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            ))

    try:
        start(commands[0][1], logs[0])
        _wait_for_ray_nodes(cluster, 1, logs, timeout_s)
        for attempt in (1, 2):
            start(commands[1][1], logs[1])
            try:
                _wait_for_ray_nodes(cluster, 2, logs, timeout_s)
                break
            except RuntimeError:
                node = cluster.processes[-1]
                if attempt == 2 or node.poll() is None or cluster.processes[0].poll() is not None:
                    raise
                # The second node gave up while the head lives ("timed out during startup" on a
                # busy machine): start it once more; what the first try left is killed on exit.
                cluster.processes.pop()
        yield cluster
    finally:
        kill_pids(cluster.pids())
        _reap(cluster.processes)
        shutil.rmtree(temp_dir, ignore_errors=True)


_COUNT_NODES = """
import json, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + float(sys.argv[3])
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= int(sys.argv[2]) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(json.dumps(len(alive)))
ray.shutdown()
"""


def _wait_for_ray_nodes(
    cluster: RayCluster, count: int, logs: list[Path], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    # Wait for the GCS port before connecting: ray.init on a closed port retries for long.
    while not _port_open(HOST, int(cluster.address.rsplit(":", 1)[1])):
        _check_alive(cluster, logs)
        if time.monotonic() > deadline:
            raise RuntimeError(f"Ray head did not open {cluster.address} in {timeout_s}s:\n"
                               f"{_tail(logs[0])}")
        time.sleep(0.5)
    if count == 1:
        return
    remaining = max(5.0, deadline - time.monotonic())
    # the count runs in a child while this loop watches the nodes: a `ray start` that gave up
    # ("timed out during startup") fails the wait at once, not when the whole timeout is over
    with subprocess.Popen([sys.executable, "-c", _COUNT_NODES, cluster.address, str(count), str(remaining)],
                          env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as counter:
        try:
            until = time.monotonic() + remaining + 60
            while counter.poll() is None:
                _check_alive(cluster, logs)
                if time.monotonic() > until:
                    raise RuntimeError(f"Ray cluster at {cluster.address} did not answer in {remaining + 60:.0f}s")
                time.sleep(0.5)
        finally:
            if counter.poll() is None:
                counter.kill()
        stdout, stderr = counter.communicate()
    _check_alive(cluster, logs)
    lines = stdout.strip().splitlines()
    alive = int(lines[-1]) if counter.returncode == 0 and lines else 0
    if alive < count:
        raise RuntimeError(
            f"{alive} of {count} Ray nodes alive at {cluster.address} after {timeout_s}s.\n"
            f"driver: {stderr[-2000:]}\n"
            + "\n".join(f"{p.name}:\n{_tail(p)}" for p in logs)
        )


def _check_alive(cluster: RayCluster, logs: list[Path]) -> None:
    for proc, log_path in zip(cluster.processes, logs, strict=False):
        if proc.poll() is not None:
            raise RuntimeError(
                f"'ray start' exited with {proc.returncode}:\n{_tail(log_path)}"
            )


def _port_open(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


# ----------------------------------------------------------------------------- drivers


def run_python(
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
) -> Any:
    """Run ``code`` in a fresh interpreter and return the JSON its last stdout line holds.

    Use it for a driver that needs an Orca context of its own (a cluster attach, an exit
    without ``stop_orca_context``) while the test session holds the shared local context.

    Args:
        code: Python source; it must ``print(json.dumps(result))`` as its last output line.
        env: extra environment variables for the child (on top of ``os.environ``, with
            ``SPARK_LOCAL_IP=127.0.0.1`` and ``PYSPARK_PYTHON`` set to this interpreter).
        timeout_s: the child is killed after this long.

    Returns:
        The decoded JSON value of the child's last stdout line.

    Raises:
        AssertionError: the child failed or printed no JSON (its stderr is in the message).
        subprocess.TimeoutExpired: the child ran longer than ``timeout_s``.
    """
    child_env = dict(os.environ)
    child_env.update({"SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable})
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env, capture_output=True, text=True, timeout=timeout_s,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"driver exited with {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
            f"stderr:\n{proc.stderr[-6000:]}"
        )
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise AssertionError(f"driver printed no JSON last line: {lines[-1]!r}") from exc


#: the repository's examples/ folder (the scripts users run first)
EXAMPLES = Path(__file__).resolve().parents[6] / "examples"


def quickstart_test(framework: str) -> Any:
    """A pytest test that runs ``examples/quickstart.py``'s job for ``framework`` (its ``run``) in
    the test session's Orca context and checks its result: all 512 rows predicted, their mean
    absolute error to the true ``y`` under 0.1. A package's test module binds it:
    ``test_the_quickstart_example_runs = quickstart_test("torch")``. (``nox -s install_check`` runs
    the same script as a user does, in environments installed from the built wheels.)"""
    import runpy

    import pytest

    @pytest.mark.timeout(300)
    def test(orca_context: Any) -> None:
        path = EXAMPLES / "quickstart.py"
        if not path.is_file():
            raise FileNotFoundError(f"no example {path}: the tests run from a checkout of the repository")
        out = runpy.run_path(str(path), run_name="quickstart")["run"](framework)
        assert out["ok"] and out["framework"] == framework and out["rows"] == 512, out
        assert out["mae"] < 0.1, out

    test.__doc__ = f"examples/quickstart.py's job for {framework} runs and predicts the true function."
    return test


def context_processes(ctx: Any) -> dict[str, str]:
    """The engine processes of this process's Orca context, ``{pid: name}``: its descendants (Spark's
    JVM, an embedded Ray's daemons) and the processes of the context's Ray temporary folder (Ray's
    daemons re-parent themselves). ``ctx`` may be None (descendants only)."""
    pids = process_tree(os.getpid())[1:]
    if ctx is not None and ctx._ray_temp_dir:
        for pid in processes_mentioning(ctx._ray_temp_dir):
            pids += process_tree(pid)
    return {str(p): process_name(p) for p in dict.fromkeys(pids)}
