"""Real failures for tests: find and kill the processes that run an Estimator's workers."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from orca.core.engine.callbacks import Callback


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



def executor_pid_of_node(labels: dict[str, Any]) -> int:
    """The pid of the Spark executor JVM that started a Ray-on-Spark node with these labels
    (its ``orca-executor`` label is ``<host>-<executor pid>``)."""
    from orca.core._ray_node import EXECUTOR_LABEL

    key = labels.get(EXECUTOR_LABEL)
    if isinstance(key, list):  # some Ray calls give each label as a list of values
        key = key[0] if key else None
    if not key:
        raise RuntimeError(f"no Spark executor started the Ray node with labels {labels!r}")
    return int(str(key).rsplit("-", 1)[1])


class KillOnce(Callback):
    """SIGKILLs its own worker process (rank ``rank``) after step ``step`` of epoch ``epoch``
    (0-based), once: ``marker`` is a file it creates first, so a restarted fit goes through."""

    def __init__(self, marker: str, rank: int = 1, epoch: int = 1, step: int = 1) -> None:
        self.marker, self.kill_rank, self.kill_epoch, self.step = marker, rank, epoch, step
        self.epoch = -1

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def _claim(self, step: int, note: str = "") -> bool:
        """True the first time rank ``kill_rank`` reaches the step (``note`` goes into the marker)."""
        if (self.rank, self.epoch, step) != (self.kill_rank, self.kill_epoch, self.step):
            return False
        try:
            with open(self.marker, "x") as f:
                f.write(note)
        except FileExistsError:
            return False
        return True

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        if self._claim(step):
            os.kill(os.getpid(), signal.SIGKILL)


class KillExecutorOnce(KillOnce):
    """On Ray-on-Spark: rank ``rank`` SIGKILLs the Spark executor JVM its Ray node runs on after
    step ``step`` of epoch ``epoch`` (0-based), once (``marker`` is a file it creates first), and
    then waits: the node's keeper ends the node and this worker with it, as when an executor is
    lost. ``marker`` holds the killed pid and the time of the kill."""

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        import ray

        if (self.rank, self.epoch, step) != (self.kill_rank, self.kill_epoch, self.step):
            return
        pid = executor_pid_of_node(ray.get_runtime_context().get_node_labels())
        if self._claim(step, f"{pid} {time.time()}"):
            os.kill(pid, signal.SIGKILL)
            time.sleep(3600)  # the keeper ends this process with its node
