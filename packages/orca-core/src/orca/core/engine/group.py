"""The worker-group contract every launcher implements, and what the launchers share.

A :class:`WorkerGroup` runs a framework's :class:`~orca.core.engine.runner.Runner` on N
workers (Ray actors, Spark barrier tasks, ...). The driver owns the model state: every call
hands the group the driver's :class:`ModelState`, and ``fit`` hands back the new one, so no
failure of a worker (an exception, a killed process, a timeout) can lose what the last
completed call trained. A group whose workers live across calls (Ray actors) remembers which
state version they hold and reloads the driver's state only when it changed.

The worker side (:func:`fit_on_worker`, :func:`evaluate_on_worker`, :func:`predict_on_worker`)
and the driver side (:func:`raise_worker_errors`, :func:`concat_outputs`) are written once here.
"""

from __future__ import annotations

import abc
import contextlib
import os
import socket
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core._net import UNREACHABLE_FIX
from orca.core.engine.errors import OrcaWorkerError, check_workers_fit
from orca.core.engine.feed import Batch, Feed, Rows
from orca.core.engine.liveness import Liveness, beat
from orca.core.engine.loop import CallbackList, EvalArgs, FitArgs, evaluate_feed, run_fit, run_predict
from orca.core.engine.metrics import make_metrics
from orca.core.engine.runner import Runner


@dataclass(frozen=True)
class ModelState:
    """The driver's copy of the training state.

    Attributes:
        value: what the runner's ``get_state`` returned (``None``: a fresh model from the spec).
        version: increases with every change on the driver; a group compares it with the
            version its workers hold.
    """

    value: Any = None
    version: int = 0


@dataclass
class FitResult:
    """What ``WorkerGroup.fit`` returns: the merged per-epoch stats, the new state, and every
    rank's weight digest (all equal: the replicas are bit-identical)."""

    history: list[dict[str, Any]]
    state: Any
    digests: list[str] = field(default_factory=list)


class WorkerGroup(abc.ABC):
    """N workers hosting one framework runner.

    Args:
        runner_cls: the framework's Runner subclass (importable where the workers run).
        spec: what the runner builds from.
        num_workers: workers in the group.
        threads: CPUs (and intra-op threads) of each worker.
        timeout_s: the bound on waiting for a silent worker.
    """

    def __init__(self, runner_cls: type[Runner], spec: dict[str, Any], num_workers: int, threads: int,
                 timeout_s: float) -> None:
        from orca.core.sync import job_token

        # the group's secret: its workers authenticate each other with it (orca.core.sync.handshake)
        self.runner_cls, self.spec = runner_cls, dict(spec, sync_token=spec.get("sync_token") or job_token())
        self.num_workers, self.threads, self.timeout_s = num_workers, threads, timeout_s

    @classmethod
    def size(cls, ctx: Any, workers_per_node: int) -> tuple[int, int]:
        """``(workers, CPUs per worker)`` this launcher runs on ``ctx`` with ``workers_per_node``:
        nodes x workers per node, and a node's CPUs shared by its workers."""
        check_workers_fit(workers_per_node, ctx.cores)
        return max(1, ctx.num_nodes) * workers_per_node, max(1, ctx.cores // workers_per_node)

    @property
    def started(self) -> bool:
        """True while workers are alive between calls (launchers with long-lived workers)."""
        return False

    #: the longest a worker may take to start before its first progress (set by the Estimator)
    start_timeout_s: float = 300.0
    #: the current call's heartbeat listener on the driver (see :meth:`watching`)
    watch: Any = None

    @contextlib.contextmanager
    def watching(self, server: Any) -> Iterator[None]:
        """Judge the workers of the calls in this block by the heartbeats ``server`` receives
        (a :class:`~orca.core.engine.progress.ProgressServer` holding a :class:`Liveness`)."""
        self.watch = server
        try:
            yield
        finally:
            self.watch = None

    def new_liveness(self, num_workers: int | None = None) -> Liveness:
        """A liveness record for a call of ``num_workers`` ranks (default: the group's)."""
        return Liveness(num_workers or self.num_workers, self.timeout_s, self.start_timeout_s)

    def _liveness(self, ranks: int | None = None) -> Liveness | None:
        """The current call's liveness record, its clocks started now (work is being submitted);
        ``ranks``: the number of ranks that beat, when not the group's."""
        liveness = getattr(self.watch, "liveness", None)
        if liveness is None:
            return None
        if ranks is not None and ranks != liveness.num_workers:
            liveness = self.watch.liveness = self.new_liveness(ranks)
        liveness.restart()
        return liveness

    def _beat_to(self) -> tuple[str, int, str] | None:
        """Where this call's workers send heartbeats, if anywhere."""
        return self.watch.endpoint if getattr(self.watch, "liveness", None) is not None else None

    def prepare(self, *sources: Any) -> None:  # noqa: B027 - an optional hook
        """Make ``sources`` readable by this launcher before a call (e.g. run a Ray Dataset's
        pending transforms while no actor holds the CPUs its tasks need)."""

    @abc.abstractmethod
    def fit(self, state: ModelState, source: Any, val_source: Any, args: FitArgs) -> FitResult:
        """Train from ``state`` on ``source``; return the merged history and the new state."""

    @abc.abstractmethod
    def evaluate(self, state: ModelState, source: Any, batch_size: int, metrics: Any) -> list[dict[str, Any]]:
        """Per-worker evaluation states of ``state``'s model (merge with ``merge_eval_states``);
        ``metrics`` (the metric spec or an :class:`~orca.core.engine.loop.EvalArgs`) goes to
        :func:`evaluate_on_worker` as it is."""

    @abc.abstractmethod
    def predict(self, state: ModelState, source: Any, batch_size: int,
                callbacks: Sequence[Any] = ()) -> list[np.ndarray]:
        """The model's outputs for every row of ``source``, in its row order (one array per output);
        ``callbacks`` are bound to each worker's runner for the pass (:func:`predict_on_worker`)."""

    def shutdown(self) -> None:  # noqa: B027 - launchers without long-lived workers have nothing to stop
        """Stop the workers (the state stays on the driver)."""

    def release(self) -> None:
        """The user is done with the workers (``Estimator.shutdown``): a launcher may keep them warm
        for the next Estimator; by default they stop."""
        self.shutdown()


# ---------------------------------------------------------------------------- worker side


def worker_identity() -> dict[str, Any]:
    """Who this worker is, for error messages: host name and pid."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def error_result(exc: BaseException, rank: int | None) -> dict[str, Any]:
    """A worker's failure as plain data: rank, host, pid, the exception and its traceback."""
    return {"rank": rank, "error": f"{type(exc).__name__}: {exc}", "exc_type": type(exc).__name__,
            "traceback": "".join(traceback.format_exception(exc)), **worker_identity()}


def fit_on_worker(runner: Runner, feed: Rows | None, val: Rows | None, counts: Sequence[int],
                  args: FitArgs) -> dict[str, Any]:
    """One worker's part of ``fit``: train, then report the history, its digest and (rank 0) the state.

    Raises:
        ValueError: no worker has a row to train on (every rank sees the same counts, so all stop
            here before any collective).
    """
    if feed is not None and not sum(counts):
        raise ValueError("data has no rows to train on (an empty DataFrame, or XShards whose partitions are "
                         "all empty); check the filter or query that produced it, e.g. df.count() > 0.")
    history = run_fit(runner, feed, val, counts, runner.rank, args)
    beat("finishing", force=True)
    return {"rank": runner.rank, "history": history, "state": runner.get_state() if runner.rank == 0 else None,
            "digest": runner.weights_digest()}


def evaluate_on_worker(runner: Runner, batches: Iterable[Batch], metrics: Any) -> dict[str, Any]:
    """One worker's evaluation states over ``batches``; ``metrics`` is the metric spec or an
    :class:`~orca.core.engine.loop.EvalArgs` (the spec with ``num_steps``, ``profile`` and the callbacks
    bound to ``runner`` for the pass)."""
    args = metrics if isinstance(metrics, EvalArgs) else EvalArgs(metrics)
    callbacks = CallbackList(args.callbacks, runner, runner.rank, runner.world)
    try:
        return evaluate_feed(runner, batches, make_metrics(args.metrics), num_steps=args.num_steps,
                             profile=args.profile)
    finally:
        callbacks.close()


def predict_on_worker(runner: Runner, feed: Feed, batch_size: int,
                      callbacks: Sequence[Any] = ()) -> list[np.ndarray]:
    """One worker's outputs for ``feed`` (``callbacks`` bound to ``runner`` for the pass)."""
    return run_predict(runner, feed, batch_size, callbacks)


# ---------------------------------------------------------------------------- driver side


def describe_worker(result: dict[str, Any]) -> str:
    """``worker 1 (host h, pid 42)``: how errors name a worker."""
    where = ", ".join(f"{k} {result[k]}" for k in ("host", "pid") if result.get(k) is not None)
    rank = result.get("rank")
    return f"Orca worker {rank if rank is not None else '?'}" + (f" ({where})" if where else "")


#: how a rank's error reads when it only saw a peer fail (orca.core.sync, gloo)
_CONSEQUENCES = ("PeerLostError", "SyncTimeoutError", "Connection closed by peer", "Connection reset by peer",
                 "Collective ops is aborted", "tasks are unhealthy", "UnavailableError")  # (the last three: TF's)


def is_consequence(error: str) -> bool:
    """True when a worker's error text says only that a peer failed first."""
    return error.startswith(_CONSEQUENCES[:2]) or any(m in error for m in _CONSEQUENCES[2:])


#: how a worker's error reads when it could not connect to a peer (gloo, orca.core.sync, sockets)
_UNREACHABLE = ("Connection refused", "No route to host", "Network is unreachable", "connectFullMesh",
                "could not connect to")


def unreachable_hint(error: str) -> str:
    """What to check (addresses, ``driver_host=``, a firewall), after a worker's ``error`` that says it
    could not connect to a peer; ``""`` for any other error."""
    return f" {UNREACHABLE_FIX}" if any(m in error for m in _UNREACHABLE) else ""


def raise_worker_errors(results: Sequence[dict[str, Any]], what: str) -> None:
    """Raise the first real failure among per-worker results as one :class:`OrcaWorkerError`.

    A rank that only lost its peer reports a consequence, so a rank with its own error is named first.
    """
    errors = [r for r in results if "error" in r]
    if not errors:
        return
    first = min(errors, key=lambda r: (is_consequence(str(r["error"])),
                                       r.get("rank") if r.get("rank") is not None else 1 << 30))
    raise OrcaWorkerError(f"{describe_worker(first)} failed during {what}: {first['error']}"
                          f"{unreachable_hint(str(first['error']))}",
                          rank=first.get("rank"), worker_traceback=first.get("traceback", ""))


def concat_outputs(outs: Iterable[list[np.ndarray] | None]) -> list[np.ndarray]:
    """Join per-worker outputs (each a list of arrays, one per model output) in worker order."""
    live = [o for o in outs if o]
    if not live:
        return []
    return [np.concatenate([o[i] for o in live]) for i in range(len(live[0]))]


def fit_result(results: Sequence[dict[str, Any]], num_workers: int) -> FitResult:
    """The :class:`FitResult` of every rank's :func:`fit_on_worker` result (errors raised first)."""
    raise_worker_errors(results, "fit")
    if not results:  # a barrier stage over no partition at all: the data had none
        raise ValueError("data has no rows to train on (no partition of it reached a worker: an empty "
                         "DataFrame?); check the filter or query that produced it, e.g. df.count() > 0.")
    by_rank = sorted(results, key=lambda r: r["rank"])
    if len(by_rank) != num_workers or by_rank[0]["rank"] != 0:
        raise OrcaWorkerError(f"fit came back from {len(by_rank)} of {num_workers} workers "
                              f"(ranks {[r['rank'] for r in by_rank]}); the group did not run whole.")
    return FitResult(history=by_rank[0]["history"], state=by_rank[0]["state"],
                     digests=[r["digest"] for r in by_rank])
