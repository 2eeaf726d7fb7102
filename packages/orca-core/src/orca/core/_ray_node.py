"""A Ray worker node on a Spark executor, and the keeper process that owns it.

``python -m orca.core._ray_node '<json>'`` is the *keeper*: it runs ``ray start --block``
for one Ray worker node (joining the head on the driver) and stays while three things hold:
the node's processes are up, the executor JVM it belongs to is alive, and the head's GCS
port answers. When any of them ends (``stop_orca_context`` shut the head down, the
executor was lost, the node failed) it kills the node's whole process tree and removes its
temporary directory, so nothing is left on the executor.

A Spark task starts the keeper with :func:`start_keeper_in_task` as a detached process and
returns at once: the executor's task slot is free again for Spark's own work (moving data
into Ray). The token of the context's Ray comes in the keeper's environment, never on
its command line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orca.core._procs import ancestor_named, kill_pids, pid_alive, process_tree, processes_mentioning

#: Ray node label naming the executor a node runs on (see :func:`executor_key`)
EXECUTOR_LABEL = "orca-executor"
#: Ray node label naming the Orca context that started the node
CONTEXT_LABEL = "orca-context"
#: prefix of every temporary directory of a context's Ray (``<prefix><context id>-...``)
TEMP_PREFIX = "orca-ray-"

# `ray start` run through this: on a loopback cluster (127.0.0.1, tests and single hosts),
# Ray's CLI refuses to join a node while RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (the setting
# that keeps every Ray server on 127.0.0.1) and rewrites 127.0.0.1 to the host's address.
RAY_START = """
import os, sys
if os.environ.get("ORCA_RAY_LOOPBACK") == "1":
    import ray._private.ray_constants as constants
    import ray._private.services as services
    constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv[0] = "ray"
sys.exit(main())
"""


def executor_key() -> str:
    """A name for the Spark executor this Python worker belongs to: host and executor JVM pid.

    Every Python worker of one executor gets the same key, so a task that moves data into Ray
    finds the Ray node started on its own executor. The value is a valid Ray label value.
    """
    jvm = ancestor_named("java")
    raw = f"{socket.gethostname()}-{jvm if jvm is not None else os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", raw)[-63:].strip("-_.") or "executor"


def _port_open(address: str, timeout_s: float = 2.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def start_keeper_in_task(config: dict[str, Any], auth: dict[str, str]) -> dict[str, Any]:
    """Start the keeper of this executor's Ray node, once per executor and context.

    Runs inside a Spark task. A second task of the same context on the same executor finds
    the lock file and starts nothing.

    Args:
        config: ``gcs`` (head address), ``context`` (id), ``num_cpus``, ``num_gpus``, ``memory``,
            ``object_store_memory`` (bytes), ``loopback`` (bool).
        auth: the Ray auth environment variables of the context.

    Returns:
        ``{"key": executor key, "started": bool, "pid": keeper pid or None}``.
    """
    key = executor_key()
    lock = Path(tempfile.gettempdir()) / f"{TEMP_PREFIX}{config['context']}-{key}.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return {"key": key, "started": False, "pid": None}
    jvm = ancestor_named("java")
    args = dict(config, key=key, watch_pid=jvm, lock=str(lock))
    env = dict(os.environ)
    env.update(auth)
    env.update({
        "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        "RAY_USAGE_STATS_ENABLED": "0",
        "ORCA_RAY_LOOPBACK": "1" if config.get("loopback") else "0",
    })
    if config.get("loopback"):
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    proc = subprocess.Popen(  # noqa: S603 - this interpreter and Orca's own module, no shell
        [sys.executable, "-m", "orca.core._ray_node", json.dumps(args)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, cwd=tempfile.gettempdir(),
    )
    os.write(fd, str(proc.pid).encode())
    os.close(fd)
    return {"key": key, "started": True, "pid": proc.pid}


def cleanup_in_task(context: str, grace_s: float = 10.0) -> int:
    """Tell this context's keepers on this host to end their nodes (SIGTERM: each ends its node's
    process tree and removes its files; on their own they notice the head is gone only after
    several missed polls), wait up to ``grace_s`` for them, then kill what is left. Runs in a
    Spark task; returns the count of processes that had to be killed."""
    marker = f"{TEMP_PREFIX}{context}-"
    keepers = set(processes_mentioning(marker)) & set(processes_mentioning("orca.core._ray_node"))
    for pid in keepers:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:  # ended meanwhile
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and processes_mentioning(marker):
        time.sleep(0.25)
    left = processes_mentioning(marker)
    pids = [p for pid in left for p in process_tree(pid)]
    kill_pids(pids)
    for path in Path(tempfile.gettempdir()).glob(f"{marker}*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(set(pids))


def _free_ports(loopback: bool, count: int) -> list[int]:
    """Distinct ports for the node's listeners, from below the ephemeral range (orca.core._net).

    One draw for all of them: two separate draws may hand out the same port, and Ray refuses
    to start a node whose components were given one port twice."""
    from orca.core._net import find_free_ports

    return find_free_ports(count, "127.0.0.1" if loopback else "")


def _node_command(args: dict[str, Any], temp_dir: str) -> list[str]:
    agent_port, metrics_port = _free_ports(bool(args.get("loopback")), 2)
    cmd = [
        sys.executable, "-c", RAY_START, "start", "--address", args["gcs"],
        "--num-cpus", str(int(args["num_cpus"])), "--num-gpus", str(int(args.get("num_gpus", 0))),
        "--memory", str(int(args["memory"])),
        "--object-store-memory", str(int(args["object_store_memory"])),
        "--temp-dir", temp_dir,
        "--labels", f"{EXECUTOR_LABEL}={args['key']},{CONTEXT_LABEL}={args['context']}",
        "--dashboard-agent-listen-port", str(agent_port),
        "--metrics-export-port", str(metrics_port),
        "--disable-usage-stats", "--block",
    ]
    if args.get("loopback"):
        cmd += ["--node-ip-address", "127.0.0.1"]
    else:  # the address the head reaches this host at (Ray's own guess routes to 8.8.8.8, which a
        # cluster without a default route has not, and may pick another interface than the head's)
        from orca.core._net import route_address

        address = route_address(args["gcs"].rsplit(":", 1)[0])
        if address is not None and not address.startswith("127."):
            cmd += ["--node-ip-address", address]
    return cmd


def keep(args: dict[str, Any], poll_s: float = 0.5, gcs_misses: int = 4) -> int:
    """Run one Ray worker node until the head, the executor or the node goes; then clean up."""
    temp_dir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{args['context']}-")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    with open(os.path.join(temp_dir, "node.log"), "wb") as log:
        node = subprocess.Popen(  # noqa: S603 - Ray's own CLI, no shell
            _node_command(args, temp_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=temp_dir)
    watch = args.get("watch_pid")
    misses, code = 0, 0
    try:
        while not stop:
            if node.poll() is not None:
                code = 1
                break
            if watch and not pid_alive(int(watch)):
                break
            misses = 0 if _port_open(args["gcs"]) else misses + 1
            if misses >= gcs_misses:
                break
            time.sleep(poll_s)
    finally:
        pids = process_tree(node.pid) + [p for q in processes_mentioning(temp_dir) for p in process_tree(q)]
        kill_pids([p for p in pids if p != os.getpid()])
        try:
            node.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(temp_dir, ignore_errors=True)
        if args.get("lock"):
            Path(args["lock"]).unlink(missing_ok=True)
    return code


if __name__ == "__main__":
    sys.exit(keep(json.loads(sys.argv[1])))
