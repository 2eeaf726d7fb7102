"""Liveness, not wall clock: the driver fails a call when a worker goes *silent*.

Every worker sends a heartbeat to the driver as it makes progress: a training step, a
validation or prediction batch, the end of an epoch, the end of its data loading. A beat
is sent at most every :data:`BEAT_S` seconds (a step costs one clock read otherwise), over
the call's :class:`~orca.core.engine.progress.ProgressServer` connection (authenticated by
the call's token).

On the driver, :class:`Liveness` records when each rank was last heard of (by the driver's
clock: no skew between hosts). A call waits as long as every rank keeps beating, however
long the fit; a rank silent for ``worker_timeout_s`` (stuck in a callback, a dead-locked
collective, a wedged data read) fails the call with an error naming the rank, its host and
pid, and what it was doing, and the launcher stops every worker of the call.

Worker-side waits (the sync layer, gloo, Spark's barrier) are only a backstop for a lost
driver (:func:`backstop_s`): a rank waiting for a slow peer is not silent by itself; the
driver judges the peer.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

#: the shortest interval between two heartbeats of one worker
BEAT_S = 0.25
#: phases of a worker's start-up (process start, imports, data, rendezvous, and the first step,
#: which builds or compiles what frameworks build lazily) and of its end (state, digest, a child
#: process stopping): bounded by the start-up timeout
STARTING = frozenset({"starting", "started", "loaded its data", "in the first training step", "finishing"})
#: phases in which a rank waits for the others (a step's collective, the epoch's merge): such a
#: rank is not to blame while another rank still makes progress
WAITING = frozenset({"in a training step", "in the first training step", "merging the epoch"})


def backstop_s(worker_timeout_s: float) -> float:
    """How long a worker itself waits on a peer before giving up: long, because the driver
    watches liveness and stops a group whose member went silent; this only ends waits whose
    driver is gone."""
    return max(3600.0, 10.0 * float(worker_timeout_s))


class Liveness:
    """The driver's record of when each rank of one call was last heard of.

    Args:
        num_workers: ranks in the call.
        timeout_s: the longest silence allowed once a rank works (``worker_timeout_s``).
        start_s: the longest a rank may take to start (``worker_start_timeout_s``; at least
            ``timeout_s``).
    """

    def __init__(self, num_workers: int, timeout_s: float, start_s: float = 0.0) -> None:
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.start_s = max(float(start_s), self.timeout_s)
        self._lock = threading.Lock()
        self.restart()

    def restart(self) -> None:
        """Start the clock of every rank now (a call begins: starting up counts as progress)."""
        now = time.monotonic()
        with self._lock:
            self._seen = {r: now for r in range(self.num_workers)}
            self._info: dict[int, dict[str, Any]] = {r: {"phase": "starting"} for r in range(self.num_workers)}
            self._pids: dict[int, Any] = {}
            #: ranks whose worker process started again within the call (a re-run task)
            self.restarted: list[int] = []

    def seen(self, rank: int, info: dict[str, Any]) -> None:
        """Rank ``rank`` made progress (``info``: host, pid, phase, epoch, step)."""
        if not isinstance(rank, int) or not 0 <= rank < self.num_workers:
            return
        with self._lock:
            self._seen[rank] = time.monotonic()
            pid = (info.get("host"), info.get("pid"))
            if self._pids.setdefault(rank, pid) != pid and rank not in self.restarted:
                self.restarted.append(rank)
            self._info[rank].update({k: v for k, v in info.items() if k in ("host", "pid", "phase", "epoch", "step")})

    def silent(self) -> str | None:
        """A message naming the rank that stopped the call, or ``None`` while the call may go on.

        A rank fails the call when it is silent for longer than allowed (``timeout_s``;
        ``start_s`` while it starts) and it is not merely waiting for the others inside a
        collective; when every rank waits and all are silent, the collective itself is stuck.
        """
        now = time.monotonic()
        with self._lock:
            quiet = {r: now - t for r, t in self._seen.items()}
            info = {r: dict(i) for r, i in self._info.items()}
        over = {r: quiet[r] - (self.start_s if info[r].get("phase") in STARTING else self.timeout_s) for r in quiet}
        silent = [r for r in quiet if over[r] >= 0]
        culprits = [r for r in silent if info[r].get("phase") not in WAITING]
        if not culprits and len(silent) < len(quiet):
            return None  # the silent ranks wait for ranks that still make progress
        rank = max(culprits or silent, key=lambda r: quiet[r])
        return self._describe(rank, quiet[rank], info[rank], waiting=[r for r in silent if r != rank])

    def _describe(self, rank: int, quiet: float, info: dict[str, Any], waiting: list[int]) -> str:
        limit = (f"worker_start_timeout_s={self.start_s:g}" if info.get("phase") in STARTING
                 else f"worker_timeout_s={self.timeout_s:g}")
        where = ", ".join(f"{k} {info[k]}" for k in ("host", "pid") if k in info)
        doing = str(info.get("phase", "starting"))
        if "epoch" in info:
            doing += f" (epoch {info['epoch']}" + (f", step {info['step']})" if "step" in info else ")")
        others = (f"; rank(s) {', '.join(map(str, waiting))} wait for it" if waiting else "")
        return (f"Orca worker rank {rank}" + (f" ({where})" if where else "") + f" made no progress for "
                f"{quiet:.0f}s ({limit}) while {doing}{others}; the call's workers were stopped. A worker "
                "that makes progress is never timed out: if single steps or start-up take longer than this, "
                "raise worker_timeout_s / worker_start_timeout_s in init_orca_context.")


# ---------------------------------------------------------------------------- worker side

_local = threading.local()


class _Beater:
    """This worker's progress (a counter and what it is doing) and a thread that sends it to the
    driver whenever it changed, at most every :data:`BEAT_S`: the training loop only updates a
    few attributes per step, and a worker that stops making progress stops beating."""

    def __init__(self, reporter: Any, rank: int) -> None:
        self.reporter, self.rank = reporter, rank
        self.identity = {"host": socket.gethostname(), "pid": os.getpid()}
        self.state: dict[str, Any] = {"phase": "started"}
        self.version = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orca-heartbeat", daemon=True)
        self._thread.start()

    def update(self, phase: str, force: bool, info: dict[str, Any]) -> None:
        self.state = {"phase": phase, **info}
        self.version += 1
        if force:
            self._wake.set()

    def _run(self) -> None:
        sent = -1
        while not self._stop.is_set():
            version, state = self.version, self.state
            if version != sent:
                sent = version
                self.reporter({"event": "beat", "rank": self.rank, **self.identity, **state})
            if self.reporter.stopped():
                _exit_stopped(self.rank, state)
            self._wake.wait(BEAT_S)
            self._wake.clear()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=2)


def _exit_stopped(rank: int, state: dict[str, Any]) -> None:
    """End this worker's process: the driver stopped the call it is part of (a silent peer, a
    lost worker, Ctrl-C) and its launcher's own kill may not reach code that is busy or stuck."""
    import sys

    sys.stderr.write(f"Orca worker rank {rank} (pid {os.getpid()}): the driver stopped this call while the "
                     f"worker was {state.get('phase', 'running')}; the process exits.\n")
    sys.stderr.flush()
    os._exit(1)


def beat(phase: str, force: bool = False, **info: Any) -> None:
    """This worker made progress and now does ``phase`` (a no-op outside :func:`beating`).

    Cheap (no I/O): call it every step. ``force`` sends it to the driver at once.
    """
    beater = getattr(_local, "beater", None)
    if beater is not None:
        beater.update(phase, force, info)


@contextlib.contextmanager
def beating(endpoint: tuple[str, int, str] | None, rank: int) -> Iterator[None]:
    """Send this worker's heartbeats to the driver at ``endpoint`` while the block runs."""
    if endpoint is None:
        yield
        return
    from orca.core.engine.progress import Reporter

    reporter = Reporter(endpoint, every=1)
    beater = _Beater(reporter, rank)
    _local.beater = beater
    try:
        yield
    finally:
        _local.beater = None
        beater.close()
        reporter.close()
