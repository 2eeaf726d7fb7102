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

from orca.core._net import UNREACHABLE_FIX

#: the shortest interval between two heartbeats of one worker
BEAT_S = 0.25
#: the phase of a rank that connects to its peers (the launcher's exchange of addresses, the sync
#: group, the framework's process group): bounded by ``worker_start_timeout_s`` itself, so that a
#: rank that cannot reach a peer (an address that is loopback on another host, a firewall) fails
#: the call within it
MEETING = "meeting its peers"
#: phases of a worker's start-up (process start, imports, data, rendezvous, and the first step,
#: which builds or compiles what frameworks build lazily) and of its end (state, digest, a child
#: process stopping): bounded by the start-up timeout
STARTING = frozenset({"starting", "started", "loaded its data", MEETING, "in the first training step", "finishing"})
#: the start-up phases before the first step: bounded by ``worker_start_timeout_s`` alone (the
#: others of :data:`STARTING` by the larger of the two timeouts: a first step compiles)
BEFORE_FIRST_STEP = frozenset({"starting", "started", MEETING})
#: phases in which a rank waits for the others (a step's collective, the epoch's merge, the
#: rendezvous): such a rank is not to blame while another rank still makes progress
WAITING = frozenset({"in a training step", "in the first training step", "merging the epoch", MEETING})


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
        start_s: the longest a rank may take to start (``worker_start_timeout_s``): to its
            first step (to the end of the first step and of its finishing: the larger of the two).
    """

    def __init__(self, num_workers: int, timeout_s: float, start_s: float = 0.0) -> None:
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        #: the bound of the phases before the first step (``timeout_s`` where no start bound is given)
        self.first_s = float(start_s) if start_s > 0 else self.timeout_s
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
            #: the failures ranks reported as they happened (see :func:`report_failure`), by rank
            self.failures: dict[int, dict[str, Any]] = {}
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

    def failed(self, rank: int, result: dict[str, Any]) -> None:
        """Rank ``rank`` failed (``result``: its :func:`~orca.core.engine.group.error_result`), and
        said so before its launcher could (a Spark barrier task's result comes back only with the
        whole stage's, which a peer stuck waiting for it can hold up)."""
        if isinstance(rank, int) and 0 <= rank < self.num_workers:
            with self._lock:
                self.failures.setdefault(rank, dict(result, rank=rank))

    def _bound(self, phase: Any) -> float:
        if phase in BEFORE_FIRST_STEP:
            return self.first_s
        return self.start_s if phase in STARTING else self.timeout_s

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
        over = {r: quiet[r] - self._bound(info[r].get("phase")) for r in quiet}
        silent = [r for r in quiet if over[r] >= 0]
        culprits = [r for r in silent if info[r].get("phase") not in WAITING]
        if not culprits and len(silent) < len(quiet):
            return None  # the silent ranks wait for ranks that still make progress
        rank = max(culprits or silent, key=lambda r: quiet[r])
        return self._describe(rank, quiet[rank], info[rank], waiting=[r for r in silent if r != rank])

    def _describe(self, rank: int, quiet: float, info: dict[str, Any], waiting: list[int]) -> str:
        phase = info.get("phase", "starting")
        limit = (f"worker_start_timeout_s={self._bound(phase):g}" if phase in STARTING
                 else f"worker_timeout_s={self.timeout_s:g}")
        where = ", ".join(f"{k} {info[k]}" for k in ("host", "pid") if k in info)
        doing = str(phase)
        if "epoch" in info:
            doing += f" (epoch {info['epoch']}" + (f", step {info['step']})" if "step" in info else ")")
        others = (f"; rank(s) {', '.join(map(str, waiting))} wait for it" if waiting else "")
        if phase == MEETING:  # not slow: a peer it cannot reach, or one that cannot reach it
            return (f"Orca worker rank {rank}" + (f" ({where})" if where else "") + f" could not meet its peers "
                    f"within {quiet:.0f}s ({limit}){others}; the call's workers were stopped. {UNREACHABLE_FIX}")
        if phase == "starting":  # never heard of: slow to start, or cut off from the driver or its peers
            return (f"Orca worker rank {rank} never reported within {quiet:.0f}s ({limit}){others}; the call's "
                    "workers were stopped. It may not have started (raise worker_start_timeout_s if its start is "
                    "slow), or could not reach the driver or the other hosts (a Spark executor fetches the "
                    f"job from its peers). {UNREACHABLE_FIX}")
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
        self._send = threading.Lock()  # one line at a time on the connection
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
                with self._send:
                    self.reporter({"event": "beat", "rank": self.rank, **self.identity, **state})
            if self.reporter.stopped():
                _exit_stopped(self.rank, state)
            self._wake.wait(BEAT_S)
            self._wake.clear()

    def fail(self, result: dict[str, Any]) -> None:
        """Send ``result`` (an :func:`~orca.core.engine.group.error_result`) to the driver now."""
        event: dict[str, Any] = {"event": "failed", "rank": self.rank, **self.identity,
                                 "error": str(result.get("error", ""))[:_FAILURE_CHARS],
                                 "exc_type": str(result.get("exc_type", "")),
                                 "traceback": str(result.get("traceback", ""))[-_FAILURE_CHARS:]}
        with self._send:
            self.reporter(event)

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


#: the most of a failure's error and traceback sent ahead to the driver (a progress line is at most 64 KiB)
_FAILURE_CHARS = 16_000


def report_failure(result: dict[str, Any]) -> None:
    """Tell the driver at once that this worker failed (``result``: its
    :func:`~orca.core.engine.group.error_result`); a no-op outside :func:`beating`.

    A launcher whose results come back only when every worker has ended (a Spark barrier stage)
    calls it: the driver then stops a call whose other ranks wait for this one, instead of
    waiting for them (see :meth:`Liveness.failed`)."""
    beater = getattr(_local, "beater", None)
    if beater is not None:
        beater.fail(result)


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
