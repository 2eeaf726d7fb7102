"""Real failures for tests: find and kill the processes that run an Estimator's workers."""

from __future__ import annotations

import os
import signal
from typing import Any


def spark_python_workers() -> list[int]:
    """Pids of the Spark Python workers this process started (through its Spark JVM, or the JVMs of
    a test cluster it started): each ``pyspark.daemon`` and its forks, never another process's."""
    import psutil

    pids = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "pyspark.daemon" in cmd or "pyspark/daemon.py" in cmd:
            pids.append(proc.pid)
    return sorted(set(pids))


def worker_pids(est: Any) -> list[int]:
    """Pids of the processes hosting ``est``'s runners: its Ray actors by rank, or (for launchers
    without long-lived workers) the Spark Python workers."""
    group = getattr(est, "_group", None)
    if group is not None and group.started:
        return list(group.call(lambda runner: os.getpid()))
    return spark_python_workers()


def kill_one_worker(est: Any, rank: int = -1) -> int:
    """SIGKILL one process hosting ``est``'s workers (the last rank by default); returns its pid."""
    pids = worker_pids(est)
    if not pids:
        raise RuntimeError("no worker process to kill")
    pid = pids[rank]
    os.kill(pid, signal.SIGKILL)
    return pid
