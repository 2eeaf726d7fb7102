"""Hosts as Linux network namespaces, for tests that need a real network between Orca's processes.

Every cluster of :mod:`orca.core.testing.clusters` runs its "hosts" on 127.0.0.1, where any
process reaches any other and a listener on all interfaces looks the same as one on loopback.
:func:`namespace_hosts` makes ``count`` hosts of one machine instead: each a network namespace
with its own loopback and one address of a private ``10.231.N.0/24``, joined by a bridge whose
address (``.1``) is the driver's, in the caller's namespace. A namespace has no other route,
so the hosts' traffic stays among the test's own addresses; loopback inside a host reaches that
host alone, as on real machines. :func:`spark_hosts_cluster` starts a Spark standalone master on
the bridge address and a Spark worker in each host, bound to the host's address.

It needs root (``CAP_NET_ADMIN``) and the ``ip`` tool; :func:`namespaces_unavailable` says why
they cannot be made, for a ``pytest.skip``. Names carry this process's pid (``orca-<pid>-<i>``,
bridge ``orbr<pid>``), the subnet is one no interface uses (chosen under a lock file, so
concurrent test runs take different ones), and everything is removed on exit, processes in the
namespaces first; what a killed test run left behind (names of a pid that no longer runs) is
removed by the next one.

Example::

    with spark_hosts_cluster(2) as cluster:
        out = run_python(DRIVER, env={"ORCA_MASTER": cluster.master_url,
                                      "ORCA_DRIVER_HOST": cluster.net.driver_address})
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orca.core._net import find_free_ports
from orca.core._procs import kill_pids, pid_alive, process_tree
from orca.core.testing.clusters import (
    RayCluster,
    SparkStandaloneCluster,
    _spark_env,
    _wait_for_ray_nodes,
    _wait_for_spark_worker,
    pyspark_home,
    ray_env,
)

__all__ = ["NamespaceHost", "NamespaceNet", "SparkHostsCluster", "namespace_hosts", "namespaces_unavailable",
           "ray_hosts_cluster", "spark_hosts_cluster"]

_PREFIX = "orca-"
_BRIDGE = "orbr"
_LOCK = Path(tempfile.gettempdir()) / "orca-netns.lock"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([shutil.which("ip") or "/usr/sbin/ip", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {out.stderr.strip()}")
    return out


@dataclass
class NamespaceHost:
    """One host: a network namespace with one address.

    Attributes:
        name: the namespace (``ip netns exec <name> ...`` runs a command on this host).
        address: the host's address on the test network.
    """

    name: str
    address: str

    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` as a command line that runs it on this host."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def pids(self) -> list[int]:
        """Every process on this host (in its namespace)."""
        out = _ip("netns", "pids", self.name, check=False)
        return [int(p) for p in out.stdout.split() if p.isdigit()]

    def listeners(self) -> list[tuple[str, int]]:
        """``(address, port)`` of every TCP socket listening on this host."""
        out = subprocess.run(self.command(["ss", "-ltnH"]), capture_output=True, text=True, timeout=30, check=True)
        found = []
        for line in out.stdout.splitlines():
            local = line.split()[3]  # State Recv-Q Send-Q Local:Port Peer:Port
            addr, port = local.rsplit(":", 1)
            found.append((addr.strip("[]"), int(port)))
        return found


@dataclass
class NamespaceNet:
    """The test network of :func:`namespace_hosts`.

    Attributes:
        bridge: the bridge joining the hosts, in the caller's namespace.
        driver_address: the bridge's address (``.1``): where the hosts reach the caller.
        hosts: the hosts (``.2``, ``.3``, ...).
    """

    bridge: str
    driver_address: str
    hosts: list[NamespaceHost] = field(default_factory=list)


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here (``None`` when they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if shutil.which("ip") is None or shutil.which("ss") is None:
        return "the `ip` and `ss` tools (iproute2) are not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_NET_ADMIN)"
    name = f"{_PREFIX}{os.getpid()}-probe"
    out = _ip("netns", "add", name, check=False)
    if out.returncode != 0:
        return f"`ip netns add` failed: {out.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def _remove_stale() -> None:
    """Remove namespaces and bridges of test runs whose process is gone (killed mid-test)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{_PREFIX}(\d+)-\w+", name)
        if m and not pid_alive(int(m.group(1))):
            _delete_namespace(name)
    for m in re.finditer(rf"\d+: ({_BRIDGE}(\d+))[:@]", _ip("-o", "link", "show", check=False).stdout):
        if not pid_alive(int(m.group(2))):
            _ip("link", "del", m.group(1), check=False)


def _delete_namespace(name: str) -> None:
    out = _ip("netns", "pids", name, check=False)
    kill_pids([int(p) for p in out.stdout.split() if p.isdigit()])
    _ip("netns", "del", name, check=False)
    with contextlib.suppress(OSError):
        shutil.rmtree(f"/etc/netns/{name}")


def _free_subnet() -> int:
    """A third octet ``N`` such that no interface has an address in 10.231.N.0/24."""
    used = set(re.findall(r"inet 10\.231\.(\d+)\.", _ip("-o", "-4", "addr", "show", check=False).stdout))
    free = [n for n in range(1, 255) if str(n) not in used]
    if not free:
        raise RuntimeError("every 10.231.N.0/24 is in use on this machine")
    return random.SystemRandom().choice(free)


@contextmanager
def namespace_hosts(count: int = 2) -> Iterator[NamespaceNet]:
    """Make ``count`` hosts as network namespaces joined by a bridge; remove them all on exit.

    Args:
        count: how many hosts (at most 250).

    Yields:
        The :class:`NamespaceNet`.

    Raises:
        RuntimeError: a namespace, link or address could not be made (see
            :func:`namespaces_unavailable` to skip where none can).
    """
    pid = os.getpid()
    _remove_stale()
    bridge = f"{_BRIDGE}{pid}"
    names = [f"{_PREFIX}{pid}-{i}" for i in range(count)]
    net: NamespaceNet | None = None
    try:
        with open(_LOCK, "a") as lock:  # concurrent runs pick their subnets one at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnet = _free_subnet()
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"10.231.{subnet}.1/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
        net = NamespaceNet(bridge, f"10.231.{subnet}.1")
        for i, name in enumerate(names):
            address = f"10.231.{subnet}.{i + 2}"
            _ip("netns", "add", name)
            outside = f"orv{pid}x{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            net.hosts.append(NamespaceHost(name, address))
        yield net
    finally:
        for name in names:
            _delete_namespace(name)
        _ip("link", "del", bridge, check=False)


# ----------------------------------------------------------------------------- spark


@dataclass
class SparkHostsCluster:
    """A Spark standalone cluster over namespace hosts (see :func:`spark_hosts_cluster`).

    Attributes:
        master_url: ``spark://<driver address>:<port>``.
        net: the hosts; worker ``i`` runs on ``net.hosts[i]``.
        workdir: logs and work directories.
        processes: the master, then one worker per host.
    """

    master_url: str
    net: NamespaceNet
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)


@contextmanager
def spark_hosts_cluster(count: int = 2, cores: int = 1, memory: str = "1g", *,
                        timeout_s: float = 120.0) -> Iterator[SparkHostsCluster]:
    """A Spark standalone master on the driver's address and one worker in each of ``count``
    namespace hosts, each bound to its host's address; all removed on exit.

    Args:
        count: hosts (one Spark worker each).
        cores: cores each worker offers.
        memory: memory each worker offers.
        timeout_s: how long to wait for the workers to register.

    Yields:
        The running :class:`SparkHostsCluster`.
    """
    with namespace_hosts(count) as net:
        workdir = Path(tempfile.mkdtemp(prefix="orca-spark-hosts-"))
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for sub in ("conf", "logs", "work"):
                (workdir / sub).mkdir()
            props = workdir / "conf" / "spark-defaults.conf"
            props.write_text("spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n")
            spark_class = str(pyspark_home() / "bin" / "spark-class")
            port, webui_port = find_free_ports(2, net.driver_address)
            master_url = f"spark://{net.driver_address}:{port}"
            commands: list[tuple[list[str], str]] = [
                ([spark_class, "org.apache.spark.deploy.master.Master", "--host", net.driver_address, "--port",
                  str(port), "--webui-port", str(webui_port), "--properties-file", str(props)], net.driver_address)]
            for i, host in enumerate(net.hosts):
                commands.append((host.command(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", host.address,
                     "--cores", str(cores), "--memory", memory, "--webui-port", "0", "--work-dir",
                     str(workdir / "work" / str(i)), "--properties-file", str(props)]), host.address))
            logs = [workdir / "logs" / f"{n}.log" for n in ["master", *[f"worker{i}" for i in range(count)]]]
            for (cmd, address), log_path in zip(commands, logs, strict=True):
                env = dict(_spark_env(workdir), SPARK_LOCAL_IP=address, SPARK_LOCAL_HOSTNAME=address,
                           SPARK_PUBLIC_DNS=address)
                with open(log_path, "wb") as log_file:
                    procs.append(subprocess.Popen(cmd, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                                                  stdout=log_file, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
            view = SparkStandaloneCluster(master_url, f"http://{net.driver_address}:{webui_port}", cores, memory,
                                          workdir, procs)
            _wait_for_spark_worker(view, logs, timeout_s, count)
            yield SparkHostsCluster(master_url, net, workdir, procs)
        finally:
            for proc in procs:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            kill_pids([p for proc in procs for p in process_tree(proc.pid)])
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            shutil.rmtree(workdir, ignore_errors=True)



# ----------------------------------------------------------------------------- ray


@contextmanager
def ray_hosts_cluster(count: int = 2, cpus: int = 1, *, object_store_mb: int = 128,
                      timeout_s: float = 120.0) -> Iterator[tuple[RayCluster, NamespaceNet]]:
    """A Ray head with no CPUs on the driver's address and a Ray node of ``cpus`` CPUs in each of
    ``count`` namespace hosts, at the host's address; all removed on exit.

    Ray binds several of its servers on all interfaces unless it runs on loopback only: here
    "all" is the host's own loopback and address.

    Yields:
        ``(cluster, net)``: the :class:`~orca.core.testing.clusters.RayCluster` (its ``address`` and
        ``env`` for a driver) and the hosts.
    """
    with namespace_hosts(count) as net:
        temp_dir = Path(tempfile.mkdtemp(prefix="orca-ray-hosts-"))
        env = ray_env(temp_dir)
        env["ORCA_RAY_LOOPBACK"] = "0"
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        port, dashboard_port, client_port, *node_ports = find_free_ports(3 + 2 * (count + 1), net.driver_address)
        cluster = RayCluster(address=f"{net.driver_address}:{port}", temp_dir=temp_dir,
                             num_cpus=(0, cpus), env=env)

        def node_args(address: str, num_cpus: int, i: int) -> list[str]:
            return ["--node-ip-address", address, "--num-cpus", str(num_cpus),
                    "--object-store-memory", str(object_store_mb << 20), "--temp-dir", str(temp_dir),
                    "--dashboard-agent-listen-port", str(node_ports[2 * i]),
                    "--metrics-export-port", str(node_ports[2 * i + 1]), "--disable-usage-stats", "--block"]

        commands = [[ray_bin, "start", "--head", "--port", str(port), "--include-dashboard=false",
                     "--dashboard-port", str(dashboard_port), "--ray-client-server-port", str(client_port),
                     *node_args(net.driver_address, 0, 0)]]
        commands += [host.command([ray_bin, "start", "--address", cluster.address,
                                   *node_args(host.address, cpus, i + 1)]) for i, host in enumerate(net.hosts)]
        logs = [temp_dir / f"node{i}.log" for i in range(len(commands))]

        def start(i: int) -> subprocess.Popen[bytes]:
            with open(logs[i], "ab") as log_file:
                return subprocess.Popen(commands[i], env=env, cwd=temp_dir, stdin=subprocess.DEVNULL,
                                        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)

        try:
            cluster.processes.append(start(0))
            _wait_for_ray_nodes(cluster, 1, logs[:1], timeout_s)
            cluster.processes += [start(i) for i in range(1, len(commands))]
            try:
                _wait_for_ray_nodes(cluster, count + 1, logs, timeout_s)
            except RuntimeError:
                # a node that gave up while the head lives ("timed out during startup" on a busy
                # machine, as ray_cluster sees it too): start it once more
                if cluster.processes[0].poll() is not None:
                    raise
                for i, proc in enumerate(cluster.processes):
                    if i and proc.poll() is not None:
                        cluster.processes[i] = start(i)
                _wait_for_ray_nodes(cluster, count + 1, logs, timeout_s)
            yield cluster, net
        finally:
            kill_pids(cluster.pids())
            for proc in cluster.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            shutil.rmtree(temp_dir, ignore_errors=True)
