"""Workers as long-lived Ray actors: the group survives across fit/evaluate/predict calls.

Data reaches the actors as Ray objects: Spark executors put their partitions into the
object store themselves (owned by a holder actor, so they outlive Spark's Python worker),
and only object references travel through the driver. Each actor then takes an exact,
balanced share of the rows, whatever the partitioning: with actors on several nodes, the
rows held on its own node first (:mod:`orca.core.engine.locality`); on one node, a
contiguous row range.

The actors keep the model between calls, but the driver owns it (see
:mod:`orca.core.engine.group`): the group remembers which state version its actors hold and
loads the driver's state into new or stale actors. An exception in a worker during
``evaluate``/``predict`` leaves the healthy actors up; a failed ``fit`` (its collectives may
be half-way) or a dead actor ends the group, and the next call starts a new one from the
driver's state.

Warm workers: ``est.shutdown()`` of an Estimator whose runner can be set up again in the same
process (``Runner.reuses_process``) parks its set-up-free actors for
``OrcaSettings.warm_workers_s``; the next group of the same runner class, worker count and
threads takes them (a ping proves them alive) and only sets up and rendezvouses, instead of
starting processes and importing the framework. Parked actors hold their Ray CPUs, so any other
launch, Orca's own Ray tasks (``orca.core.data._ray.remote``), a Ray Dataset materialization, a
Tune trainable, the time limit, ``release_warm_workers()`` and the context's stop end them.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from orca.core import _active
from orca.core._net import UNREACHABLE_FIX, find_free_ports, machine_id
from orca.core.engine.callbacks import callbacks_blob, load_callbacks
from orca.core.engine.errors import OrcaWorkerError, WorkerLostError, check_workers_fit
from orca.core.engine.feed import Feed, Rows, Slice, cut_part
from orca.core.engine.group import (
    FitResult,
    ModelState,
    WorkerGroup,
    concat_outputs,
    describe_worker,
    error_result,
    evaluate_on_worker,
    fit_on_worker,
    fit_result,
    is_consequence,
    predict_on_worker,
    unreachable_hint,
)
from orca.core.engine.liveness import Liveness, backstop_s, beat, beating
from orca.core.engine.locality import Placement, local_first_slices, plan_actor_nodes
from orca.core.engine.loop import FitArgs
from orca.core.engine.progress import gather
from orca.core.engine.runner import Rendezvous, Runner, make_rendezvous
from orca.core.engine.sources import DataSource, WorkerRead, release_held
from orca.core.engine.spill import FeedBuilder, close_feeds, feed_memory_bytes, part_bytes

log = logging.getLogger("orca")


def _ray() -> Any:
    import ray

    return ray


#: object-store blocks an actor fetches at once while it loads its share
_FETCH_BLOCKS = 8


def _load_slices(slices: Sequence[Slice], memory_bytes: int | None = None) -> Rows:
    """This actor's rows: in memory, or past ``memory_bytes`` on its local disk (the blocks are
    fetched a few at a time, so a spilled share never sits whole in the actor's memory)."""
    ray = _ray()
    if not slices:
        return Feed([], [])
    if isinstance(slices[0][0], WorkerRead):  # rows this actor reads itself (files)
        return slices[0][0].load(memory_bytes)
    builder: FeedBuilder[Any] = FeedBuilder(memory_bytes)
    for i in range(0, len(slices), _FETCH_BLOCKS):
        group = slices[i:i + _FETCH_BLOCKS]
        for part, (_, start, stop) in zip(ray.get([s[0] for s in group]), group, strict=True):
            piece = cut_part(part, start, stop)
            builder.add(piece, part_bytes(piece))
        beat("loading its data")
    return builder.finish()


class _WorkerFailure(Exception):
    """A worker's exception as plain data (see :func:`orca.core.engine.group.error_result`)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result


class _Worker:
    """The actor: hosts one framework runner."""

    def __init__(self, threads: int) -> None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.runner: Runner | None = None
        self.rank: int | None = None
        self.timeout_s = 600.0

    def address(self) -> tuple[str, int, int, str, str]:
        """This worker's host, a port for the framework's cluster spec, one for orca.core.sync, its
        :func:`~orca.core._net.machine_id`, and its Ray node's id."""
        ray = _ray()
        host = ray.util.get_node_ip_address()
        port, sync_port = find_free_ports(2, host)
        return host, port, sync_port, machine_id(), ray.get_runtime_context().get_node_id()

    def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - any failure goes back with its traceback
            raise _WorkerFailure(error_result(exc, self.rank)) from None

    def setup(self, job_blob: bytes, rendezvous: Rendezvous, state: Any) -> None:
        import cloudpickle

        from orca.core.engine.child import host_runner

        def setup() -> None:
            self.rank = rendezvous.rank
            runner_cls, spec = cloudpickle.loads(job_blob)
            self.timeout_s = float(spec.get("timeout_s", 600.0))
            self.runner = host_runner(runner_cls, spec, rendezvous)
            if state is not None:
                self.runner.set_state(state)

        self._run(setup)

    def set_state(self, state: Any) -> None:
        self._run(lambda: self.runner.set_state(state))  # type: ignore[union-attr]

    def fit(self, slices: list[Slice], val_slices: list[Slice] | None, counts: list[int | None],
            args_blob: bytes, memory_bytes: int | None = None) -> dict[str, Any]:
        import cloudpickle

        def fit() -> dict[str, Any]:
            args: FitArgs = cloudpickle.loads(args_blob)
            with beating(args.beat_to, self.rank or 0):
                feed = _load_slices(slices, memory_bytes) if args.creator is None else None
                val = _load_slices(val_slices, memory_bytes) if val_slices else None
                beat("loaded its data", force=True)
                try:
                    if None in counts:  # files only reading counts (CSV): the ranks meet on their rows
                        assert args.beat_to is not None and feed is not None
                        counts[:] = gather(args.beat_to, self.rank or 0, len(counts), "fit-rows", feed.num_rows,
                                           backstop_s(self.timeout_s))
                    return fit_on_worker(self.runner, feed, val, counts, args)  # type: ignore[arg-type]
                finally:
                    close_feeds(feed, val)

        return self._run(fit)

    def evaluate(self, slices: list[Slice], blob: bytes, batch_size: int,
                 beat_to: tuple[str, int, str] | None = None, memory_bytes: int | None = None) -> dict[str, Any]:
        import cloudpickle

        def evaluate() -> dict[str, Any]:
            creator, metrics = cloudpickle.loads(blob)
            runner = self.runner
            assert runner is not None
            with beating(beat_to, self.rank or 0):
                if creator is not None:
                    return evaluate_on_worker(runner, runner.native_batches(creator, batch_size, False), metrics)
                feed = _load_slices(slices, memory_bytes)
                try:
                    return evaluate_on_worker(runner, feed.batches(batch_size), metrics)
                finally:
                    close_feeds(feed)

        return self._run(evaluate)

    def predict(self, slices: list[Slice], batch_size: int,
                beat_to: tuple[str, int, str] | None = None, memory_bytes: int | None = None,
                callbacks: bytes | None = None) -> list[np.ndarray]:
        def predict() -> list[np.ndarray]:
            with beating(beat_to, self.rank or 0):
                feed = _load_slices(slices, memory_bytes)
                try:
                    return predict_on_worker(self.runner, feed, batch_size, load_callbacks(callbacks))  # type: ignore[arg-type]
                finally:
                    close_feeds(feed)

        return self._run(predict)

    def ping(self) -> bool:
        return True

    def park(self) -> None:
        """End the runner (its process group, its model) and keep the process for the next one."""
        runner, self.runner, self.rank = self.runner, None, None
        if runner is not None:
            runner.shutdown()
        del runner
        gc.collect()

    def call(self, fn_blob: bytes) -> Any:
        """Run ``fn(runner)`` here (diagnostics and tests: which node, what is cached)."""
        import cloudpickle

        return self._run(lambda: cloudpickle.loads(fn_blob)(self.runner))

    def shutdown(self) -> None:
        if self.runner is not None:
            self.runner.shutdown()


def trial_worker_bundles() -> tuple[Any, list[tuple[int, int]]] | None:
    """Inside a Ray Tune trial (a task or actor scheduled in a placement group that captures its
    children): ``(the placement group, [(bundle index, CPUs)] of its bundles with at least one
    CPU)``, where this process's Orca workers go (see :mod:`orca.core.tune`); otherwise ``None``."""
    from ray.util import get_current_placement_group

    pg = get_current_placement_group()
    if pg is None:
        return None
    bundles = [(i, int(b.get("CPU", 0))) for i, b in enumerate(pg.bundle_specs) if b.get("CPU", 0) >= 1]
    return pg, bundles


def _plan_nodes(workers: int, threads: int) -> list[str | None]:
    """The node of each actor: spread over the nodes with free CPUs, one after another in turn, so
    that each node's workers can read the data held there; left to Ray on a single node or when
    the actors do not fit that way."""
    ray = _ray()
    try:
        from ray._private.state import available_resources_per_node

        free = sorted((node, float(res.get("CPU", 0.0))) for node, res in available_resources_per_node().items())
    except Exception:  # noqa: BLE001 - a Ray without this call: Ray places them
        return [None] * workers
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    free = [(n, c) for n, c in free if n in alive and c >= threads]
    plan = plan_actor_nodes(free, workers, threads) if free else None
    return list(plan) if plan is not None else [None] * workers


def _on_node(node: str | None) -> dict[str, Any]:
    """Actor options that pin it to ``node`` (none for ``None``)."""
    if node is None:
        return {}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


def _located(refs: Sequence[tuple[Any, int]]) -> list[tuple[Any, int, str | None, int]]:
    """``(ref, rows, node, bytes)``: where each part's object is (``None``: unknown, e.g. a small
    object kept in its owner's memory, a part that is not a Ray object, or an owner that did not
    answer)."""
    ray = _ray()
    where = _object_locations([r for r, _ in refs if isinstance(r, ray.ObjectRef)])
    out = []
    for ref, n in refs:
        info = where.get(ref) if isinstance(ref, ray.ObjectRef) else None
        nodes = (info or {}).get("node_ids") or []
        out.append((ref, n, nodes[0] if nodes else None, int((info or {}).get("object_size") or 0)))
    return out


#: objects per location query: well under Ray's ``worker_fetch_request_size`` (10,000), so that each
#: query is one request to one owner (see :func:`_object_locations`)
_LOCATE_BATCH = 1000


def _object_locations(objs: Sequence[Any], timeout_ms: int = 10_000) -> dict[Any, dict[str, Any]]:
    """``ray.experimental.get_object_locations`` for ``objs``, asked of one owner at a time.

    Ray 2.60 aborts the calling process (``std::future_error``, SIGABRT) when one query spans
    several owners and an early owner's reply (or failure: an owner that died with its node)
    arrives before the query has sent its last request: its counter of open requests reaches zero
    twice. One owner and one request per query never does; an owner that fails to answer is not
    asked again. Placement is an optimisation: objects not located are read wherever they are.
    """
    ray = _ray()
    by_owner: dict[bytes, list[Any]] = {}
    for ref in objs:
        by_owner.setdefault(ref.owner_address(), []).append(ref)
    where: dict[Any, dict[str, Any]] = {}
    for owned in by_owner.values():
        for start in range(0, len(owned), _LOCATE_BATCH):
            try:
                where.update(ray.experimental.get_object_locations(owned[start:start + _LOCATE_BATCH],
                                                                    timeout_ms=timeout_ms))
            except Exception:  # noqa: BLE001 - an owner that is gone or slow: skip its objects
                log.debug("could not locate objects of one owner", exc_info=True)
                break
    return where


def _in_data_order(outs: list[np.ndarray], order: list[list[tuple[int, int]]] | None) -> list[np.ndarray]:
    """Put outputs concatenated in rank order back into the data's row order."""
    if not outs or order is None:
        return outs
    index = np.concatenate([np.arange(start, start + n) for share in order for start, n in share] or
                           [np.zeros(0, np.int64)])
    if np.array_equal(index, np.arange(len(index))):
        return outs
    result = []
    for out in outs:
        placed = np.empty_like(out)
        placed[index] = out
        result.append(placed)
    return result


#: how long a launch waits for CPUs that recently killed actors still hold
FREE_CPUS_WAIT_S = 10.0


def _free_cpus(need: float, wait_s: float | None = None) -> float:
    """Free CPUs in the Ray cluster, waiting briefly for recently killed actors to release theirs.

    When short, it first collects garbage once: an Estimator the user dropped while it sat in a
    reference cycle still holds its actors until the collector frees their handles (then Ray
    ends them)."""
    ray = _ray()
    deadline = time.monotonic() + (FREE_CPUS_WAIT_S if wait_s is None else wait_s)
    collected = False
    while True:
        free = float(ray.available_resources().get("CPU", 0.0))
        if free >= need or time.monotonic() > deadline:
            return free
        if not collected:
            collected = True
            gc.collect()
        time.sleep(0.25)


def _kill_actors(actors: Sequence[Any]) -> None:
    """``ray.kill`` each actor; one already dead, or a Ray already shut down, is skipped."""
    if not actors:
        return
    try:
        ray = _ray()
    except Exception:  # noqa: BLE001 - no Ray: nothing runs
        return
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already dead, or Ray is gone
            pass


class _Parked(NamedTuple):
    kind: tuple[Any, ...]
    actors: list[Any]
    nodes: list[str | None]
    timer: threading.Timer


class _Parking:
    """The actors of the last Estimator shut down, kept warm for the next group of their kind.

    One set at a time: parking a set ends the one parked before. A timer ends a set that no
    group took within its time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parked: _Parked | None = None

    def park(self, kind: tuple[Any, ...], actors: list[Any], nodes: list[str | None], keep_s: float) -> None:
        timer = threading.Timer(keep_s, self._expire)
        timer.daemon = True
        with self._lock:
            old, self._parked = self._parked, _Parked(kind, actors, nodes, timer)
            timer.start()
        self._end(old)

    def take(self, kind: tuple[Any, ...], ping_s: float = 10.0) -> tuple[list[Any], list[str | None]] | None:
        """The parked actors and their nodes when they are of ``kind`` and all answer a ping within
        ``ping_s`` (else they end)."""
        with self._lock:
            parked, self._parked = self._parked, None
        if parked is None:
            return None
        parked.timer.cancel()
        if parked.kind == kind:
            try:
                _ray().get([a.ping.remote() for a in parked.actors], timeout=ping_s)
                return parked.actors, parked.nodes
            except Exception:  # noqa: BLE001 - one is dead, or its node is gone: start afresh
                pass
        self._end(parked)
        return None

    def release(self) -> int:
        """End the parked actors now; return how many there were."""
        with self._lock:
            parked, self._parked = self._parked, None
        return self._end(parked)

    def _expire(self) -> None:
        with self._lock:
            parked = self._parked
            if parked is None or parked.timer is not threading.current_thread():
                return
            self._parked = None
        log.debug("ending %d warm Ray workers: no Estimator took them in time", len(parked.actors))
        self._end(parked)

    @staticmethod
    def _end(parked: _Parked | None) -> int:
        if parked is None:
            return 0
        parked.timer.cancel()
        _kill_actors(parked.actors)
        return len(parked.actors)


_PARKING = _Parking()


def release_parked() -> int:
    """End the warm actors (see :func:`orca.core.release_warm_workers`); return their count."""
    return _PARKING.release()


# the context's stop and data's Ray tasks (layers that cannot import this one) end the parked
# actors through orca.core._active
_active.on_release_warm(release_parked)


#: every worker group whose actors are up, in this process (see :func:`live_worker_groups`)
_LIVE: weakref.WeakSet[RayWorkerGroup] = weakref.WeakSet()


def live_worker_groups() -> list[RayWorkerGroup]:
    """The Ray worker groups of this process whose actors are up (after a garbage collection, so
    groups of Estimators nothing refers to any more are not counted)."""
    gc.collect()
    return [g for g in list(_LIVE) if g.actors]


#: how long a failed call waits for the other workers' outcome, to tell a lost worker from its peers
LOST_GRACE_S = 3.0
#: how long a call whose workers only saw a peer go waits for Ray to say which worker or node was lost
#: (Ray marks a node dead after its health checks fail: 5 of them, 3 s apart, by default)
LOST_NODE_WAIT_S = 20.0


def _error_text(exc: BaseException) -> str:
    """The worker's error of a driver-side error (``"PeerLostError: ..."``), without who raised it."""
    return str(exc).splitlines()[0].split(": ", 1)[-1] if str(exc) else type(exc).__name__


def _failure(ref: Any, what: str, rank: int | None = None) -> Exception | None:
    """The driver's error for a finished call ``ref`` of worker ``rank``, or ``None`` when it succeeded."""
    ray = _ray()
    try:
        ray.get(ref)
        return None
    except Exception as exc:  # noqa: BLE001 - turned into the driver's error
        cause = getattr(exc, "cause", None) or exc
        if isinstance(cause, _WorkerFailure):
            r = cause.result
            return OrcaWorkerError(f"{describe_worker(r)} failed during {what}: {r['error']}"
                                   f"{unreachable_hint(str(r['error']))}",
                                   rank=r.get("rank"), worker_traceback=r["traceback"])
        if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError)):
            who = "an Orca worker" if rank is None else f"Orca worker rank {rank}"
            return _ActorLost(f"{who} (a Ray actor) died during {what}: {exc}", rank)
        return OrcaWorkerError(f"Orca worker failed during {what}: {exc}", worker_traceback=str(exc))


class _ActorLost(Exception):
    """An actor of the group died (its process was killed, its node was lost)."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank


def _lost(exc: _ActorLost) -> WorkerLostError:
    return WorkerLostError(str(exc), rank=exc.rank)


class RayWorkerGroup(WorkerGroup):
    """``num_workers`` Ray actors hosting a framework runner, started on first use.

    See :class:`~orca.core.engine.group.WorkerGroup` for the arguments.
    """

    def __init__(self, runner_cls: type[Runner], spec: dict[str, Any], num_workers: int, threads: int,
                 timeout_s: float) -> None:
        super().__init__(runner_cls, spec, num_workers, threads, timeout_s)
        self.actors: list[Any] = []
        #: address refs of actors launched and not yet set up
        self._starting: list[Any] | None = None
        #: the state version the actors hold (None: unknown, reload before use)
        self.loaded_version: int | None = None
        #: the Ray node each actor was placed on (None: left to Ray)
        self.actor_nodes: list[str | None] = []
        #: where the last call's data was read (see :mod:`orca.core.engine.locality`)
        self.last_placement: Placement | None = None
        #: each rank's address in the last rendezvous
        self._hosts: list[str] = []
        #: each rank's Ray node id (to tell a worker lost with its node from the peers that saw it go)
        self._node_ids: list[str] = []

    @classmethod
    def size(cls, ctx: Any, workers_per_node: int) -> tuple[int, int]:
        """Sized on the Ray cluster once Ray runs (its nodes and their CPUs), else on the context."""
        if not (ctx.has_ray or ctx.runtime == "ray"):
            return super().size(ctx, workers_per_node)
        runtime = ctx.ray_runtime()
        trial = trial_worker_bundles()
        if trial is not None:  # a Tune trial: its placement group's worker bundles are the cluster
            bundles = trial[1]
            if workers_per_node > len(bundles):
                raise ValueError(f"workers_per_node={workers_per_node}, but this Ray Tune trial's placement group "
                                 f"has {len(bundles)} worker bundle(s) with CPUs; give the trainable "
                                 f"orca.core.tune.trial_resources(workers={workers_per_node}).")
            return workers_per_node, max(1, min(c for _, c in bundles[:workers_per_node]))
        # the nodes with CPUs: a Ray-on-Spark head on the driver has none and runs no worker
        cpus = [c for _, c in runtime.worker_nodes] or [ctx.cores]
        check_workers_fit(workers_per_node, min(cpus))
        return len(cpus) * workers_per_node, max(1, min(cpus) // workers_per_node)

    @property
    def started(self) -> bool:
        """True while the actors are alive."""
        return bool(self.actors)

    def prepare(self, *sources: Any) -> None:
        """Run a Ray Dataset's pending transforms: their tasks need CPUs that the actors hold, so
        the actors step aside (the driver owns the state) while it materializes."""
        pending = [s for s in sources if getattr(s, "pending", False)]
        if pending and self.actors:
            self.shutdown()
        if pending:
            release_parked()
        for s in pending:
            s.materialize()

    # ---------------------------------------------------------------- lifecycle
    def launch(self) -> None:
        """Begin starting the actors and return without waiting for them (idempotent).

        Actors take seconds to start (a process each, the framework's import); the data calls
        move their data into the object store meanwhile and then wait.
        """
        if self.actors:
            return
        ctx = _active.current()
        runtime = ctx.ray_runtime_now()  # nodes lost since the last start are not counted
        ray = _ray()
        trial = trial_worker_bundles()
        if trial is not None:
            release_parked()  # the trial's placement group has the CPUs; parked actors hold others
        warm = _PARKING.take(self._kind()) if trial is None else None
        if warm is not None:
            self.actors, self.actor_nodes = warm
        else:
            if trial is None:
                self._check_room(runtime)
                self.actor_nodes = _plan_nodes(self.num_workers, self.threads)
                options = [_on_node(node) for node in self.actor_nodes]
            else:  # a Tune trial: each worker in a bundle of the trial's placement group
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                pg, bundles = trial
                self.actor_nodes = [None] * self.num_workers
                options = [{"scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)}
                           for i, _ in bundles[:self.num_workers]]
            worker_cls = ray.remote(num_cpus=self.threads, max_concurrency=2)(_Worker)
            self.actors = [worker_cls.options(**o).remote(self.threads) for o in options]
        self._starting = [a.address.remote() for a in self.actors]
        self.loaded_version = None
        _LIVE.add(self)

    def _kind(self) -> tuple[Any, ...]:
        """What a parked actor must match to serve this group: same Ray, runner class, size."""
        ctx = _active.active()
        return (ctx.context_id if ctx is not None else None, self.runner_cls.__module__,
                self.runner_cls.__qualname__, self.num_workers, self.threads)

    def _check_room(self, runtime: Any) -> None:
        """Raise unless the Ray cluster has (and has free) the CPUs the workers need."""
        need = self.num_workers * self.threads
        total = sum(runtime.cpus_per_node)
        if need > total:
            raise ValueError(
                f"{self.num_workers} workers x {self.threads} CPUs need more than the Ray cluster's "
                f"{total} CPUs ({runtime.mode} Ray, {len(runtime.worker_nodes)} node(s) with CPUs); lower "
                "workers_per_node, or give Ray more CPUs: on a Spark cluster Ray runs on the executors "
                "(the default, or init_ray_on_spark=True: cores= per executor, num_nodes= executors), "
                "ray_on_driver=True runs it on the driver alone (ray_num_cpus=), or address='host:port' "
                "attaches to an existing Ray cluster."
            )
        free = _free_cpus(need)
        if free < need:
            raise RuntimeError(
                f"Ray has {free:g} free CPUs but {self.num_workers} workers need {need}; other Ray work (often "
                "another Estimator's workers) holds the rest. Call shutdown() on Estimators you are done with."
            )

    def _join(self, state: ModelState) -> None:
        """Wait for launched actors, rendezvous them and load ``state``."""
        if self._starting is None:
            return
        refs, self._starting = self._starting, None
        import cloudpickle

        try:
            addrs = self._get(refs, "start")
            hosts, ports = [a[0] for a in addrs], [a[1] for a in addrs]
            self._hosts, self._node_ids = hosts, [str(a[4]) for a in addrs]
            # the runner class and user classes (models, callbacks) travel by value where the user
            # registered them with cloudpickle (Ray's own pickler does not know that registry)
            job_blob = cloudpickle.dumps((self.runner_cls, dict(self.spec, threads=self.threads)))
            value = _ray().put(state.value) if state.value is not None else None
            machines = [a[3] for a in addrs]  # (a worker at a loopback address of another host fails here)
            self._get([a.setup.remote(job_blob, make_rendezvous(r, hosts, ports, addrs[0][2], machines=machines),
                                      value)
                       for r, a in enumerate(self.actors)], "setup")
            self.loaded_version = state.version
        except BaseException:
            self.shutdown()
            raise

    def _ready(self, state: ModelState) -> None:
        """Actors up, set up, holding ``state``."""
        self.launch()
        self._join(state)
        if self.loaded_version != state.version:
            ref = _ray().put(state.value)
            self._get([a.set_state.remote(ref) for a in self.actors], "set_state")
            self.loaded_version = state.version

    def _staged(self, state: ModelState, *sources: tuple[DataSource | None, bool]
                ) -> list[tuple[list[list[Slice]], list[int | None], Any]]:
        """Launch the actors (if they are not up) and slice each ``(source, need_labels)`` into the
        object store while they start; then wait for them and load ``state``.

        On a cold start both take seconds (Spark's Python workers join Ray; the actors import
        their framework), so they overlap. A data error shuts down actors that were only
        launched; a start-up error lets go of the data.
        """
        cold = self._starting is None and not self.actors
        self.launch()
        try:
            staged = [self.slices(src, need) for src, need in sources]
        except BaseException:
            if cold:
                self.shutdown()
            raise
        try:
            self._ready(state)
        except BaseException:
            for _, _, refs in staged:
                release_held(refs)
            raise
        return staged

    def slices(self, source: DataSource | None, need_labels: bool) -> tuple[list[list[Slice]], list[int | None], Any]:
        """Place ``source`` in the object store and cut it into one row range per worker."""
        if source is None or source.is_creator:
            return [[] for _ in range(self.num_workers)], [0] * self.num_workers, []
        reads = source.worker_reads(self.num_workers, need_labels)
        if reads is not None:  # each actor reads its own rows, in the data's order by rank
            self.last_placement = None
            # (a count of None: only reading the files tells; the actors meet on their counts)
            return [[(r, 0, r.num_rows or 0)] for r in reads], [r.num_rows for r in reads], []
        refs = source.ray_refs(need_labels)
        nodes = self.actor_nodes or [None] * self.num_workers
        slices, self.last_placement = local_first_slices(_located(refs), nodes)
        return slices, [sum(hi - lo for _, lo, hi in s) for s in slices], refs

    def _get(self, refs: list[Any], what: str, liveness: Liveness | None = None) -> list[Any]:
        """Wait for all refs as long as the workers make progress (``liveness``: their heartbeats;
        without it, calls that send none, such as start-up, are bounded by ``timeout_s``).

        A worker's exception raises :class:`OrcaWorkerError` (actors stay); a dead actor raises
        :class:`_ActorLost`; a silent worker, or Ctrl-C on the driver, tears the group down.
        """
        ray = _ray()
        # calls without heartbeats: start-up and set-up (the rendezvous) are bounded by the start-up
        # timeout, so that a rank that cannot reach its peers fails the call within it
        bound = self.start_timeout_s if what in ("start", "setup") else max(self.timeout_s, self.start_timeout_s)
        deadline = time.monotonic() + bound
        pending = list(refs)
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        while pending:
            silent = liveness.silent() if liveness is not None else None
            if silent is None and liveness is None and time.monotonic() > deadline:
                silent = f"Orca workers did not finish {what} within {bound:.0f}s; the worker group was shut down."
                if what == "setup":  # the rendezvous: a peer that cannot be reached, not a slow one
                    silent += (f" (worker_start_timeout_s={bound:g}: rank(s) {[rank_of[r] for r in pending]} did not "
                               f"meet their peers at {sorted(set(map(str, self._hosts)))}.) {UNREACHABLE_FIX}")
            if silent is not None:
                # a rank silent because its host is gone is a lost worker (max_failures recovers it)
                lost = self._lost_with_node(what, TimeoutError(silent)) if liveness is not None else None
                self.shutdown()
                if lost is not None:
                    raise lost
                raise TimeoutError(silent if liveness is None else f"{silent} (during {what})")
            try:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            except KeyboardInterrupt:
                self.shutdown()  # nothing keeps training after Ctrl-C; the driver keeps its state
                raise
            failed = [ref for ref in done if _failure(ref, what, rank_of[ref]) is not None]
            if failed:
                # a killed worker makes its peers fail too (their connections to it break), often
                # before Ray reports the death: give the others a moment, then blame a death first
                if pending:
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=LOST_GRACE_S)
                    failed += [ref for ref in more if _failure(ref, what, rank_of[ref]) is not None]
                errors = [e for e in (_failure(ref, what, rank_of[ref]) for ref in failed) if e is not None]
                # a death first; then a rank's own error before those that only saw a peer fail
                errors.sort(key=lambda e: (not isinstance(e, _ActorLost), is_consequence(str(e).split(": ", 1)[-1])))
                first = errors[0]
                if isinstance(first, _ActorLost) and first.rank is not None and first.rank < len(self._hosts):
                    raise _ActorLost(str(first).replace("(a Ray actor)", f"(a Ray actor on host {self._hosts[first.rank]})",
                                                        1), first.rank) from None
                if not isinstance(errors[0], _ActorLost):
                    # a host cut off or gone: its actor may not be reported dead yet, but its peers' collectives
                    # failed; Ray's node table says whose host it was (the lost one, not one that saw it go).
                    # When every error only says a peer went, wait (boundedly) for Ray to say which
                    lost = self._lost_with_node(what, errors[0], pending, rank_of,
                                                LOST_NODE_WAIT_S if is_consequence(_error_text(errors[0])) else 0.0)
                    if lost is not None:
                        raise lost from None
                raise errors[0] from None
        return ray.get(refs)

    def _lost_with_node(self, what: str, seen: Exception, pending: Sequence[Any] = (),
                        rank_of: dict[Any, int] | None = None, wait_s: float = 0.0) -> _ActorLost | None:
        """An :class:`_ActorLost` for the first rank whose Ray node Ray has marked dead, or whose
        call among ``pending`` Ray reports dead, within ``wait_s`` (``seen``: what another rank
        saw); ``None`` when none is (or Ray cannot tell)."""
        if not self._node_ids:
            return None
        ray = _ray()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                dead = {n["NodeID"]: n for n in ray.nodes() if not n.get("Alive")}
            except Exception:  # noqa: BLE001 - no node table: the workers' own errors stand
                return None
            for rank, node in enumerate(self._node_ids):
                if node in dead:
                    where = dead[node].get("NodeManagerAddress") or node[:12]
                    return _ActorLost(f"Orca worker rank {rank} (a Ray actor on host {where}) was lost with its Ray "
                                      f"node during {what}: Ray marked the node dead. Its peers saw: "
                                      f"{_error_text(seen)}", rank)
            if time.monotonic() >= deadline:
                return None
            if pending:
                done, pending = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                for ref in done:
                    died = _failure(ref, what, (rank_of or {}).get(ref))
                    if isinstance(died, _ActorLost):
                        return died
            else:
                time.sleep(0.5)

    def _call(self, what: str, fn: Any) -> Any:
        """Run ``fn()`` (an idempotent call); if an actor turns out to be dead (killed since the
        last call), start a new group from the driver's state and run it once more."""
        was_up = bool(self.actors)
        try:
            return fn()
        except _ActorLost as exc:
            self.shutdown()
            if not was_up:
                raise _lost(exc) from None
            log.warning("%s; starting new workers from the driver's state and running %s again.", exc, what)
            try:
                return fn()
            except _ActorLost as again:
                self.shutdown()
                raise _lost(again) from None

    # ---------------------------------------------------------------- calls
    def fit(self, state: ModelState, source: DataSource, val_source: DataSource | None,
            args: FitArgs) -> FitResult:
        """Train on every actor; any failure ends the group (the driver keeps ``state``)."""
        if self.actors and self._starting is None:
            # actors lost since the last call cost nothing yet: replace them before training
            self._call("fit", lambda: self._get([a.ping.remote() for a in self.actors], "fit"))
        (slices, counts, refs), (val_slices, _, val_refs) = self._call(
            "fit", lambda: self._staged(state, (source, True), (val_source, True)))
        if val_source is not None and val_source.is_creator:
            args.val_creator = val_source.obj
        if source.is_creator:
            args.creator = source.obj
        import cloudpickle

        args_blob = cloudpickle.dumps(args)
        has_val = val_source is not None and not val_source.is_creator
        try:
            results = self._get([a.fit.remote(slices[r], val_slices[r] if has_val else None, counts, args_blob,
                                              feed_memory_bytes())
                                 for r, a in enumerate(self.actors)], "fit", self._liveness())
        except (OrcaWorkerError, _ActorLost, TimeoutError) as exc:
            self.shutdown()  # the collectives of a failed step cannot be trusted
            if isinstance(exc, _ActorLost):
                raise _lost(exc) from None
            raise
        except BaseException:
            self.shutdown()
            raise
        finally:
            release_held(refs)
            release_held(val_refs)
        result = fit_result(results, self.num_workers)
        result.state = ModelState(result.state, state.version + 1)
        self.loaded_version = state.version + 1
        return result

    def evaluate(self, state: ModelState, source: DataSource, batch_size: int, metrics: Any) -> list[dict[str, Any]]:
        """Per-worker evaluation states (merge them with ``merge_eval_states``)."""
        creator = source.obj if source.is_creator else None
        local_bs = max(1, batch_size // self.num_workers)
        import cloudpickle

        blob = cloudpickle.dumps((creator, metrics))

        def run() -> list[dict[str, Any]]:
            ((slices, _, refs),) = self._staged(state, (source, True))
            try:
                return self._get([a.evaluate.remote(slices[r], blob, local_bs, self._beat_to(), feed_memory_bytes())
                                  for r, a in enumerate(self.actors)], "evaluate", self._liveness())
            finally:
                release_held(refs)

        return self._call("evaluate", run)

    def predict(self, state: ModelState, source: DataSource, batch_size: int,
                callbacks: Sequence[Any] = ()) -> list[np.ndarray]:
        """Predict in the actors; outputs come back in the input's row order."""
        local_bs = max(1, batch_size // self.num_workers)
        blob = callbacks_blob(callbacks)

        def run() -> list[np.ndarray]:
            ((slices, _, refs),) = self._staged(state, (source, False))
            order = self.last_placement.order if self.last_placement is not None else None
            try:
                outs = concat_outputs(self._get([a.predict.remote(slices[r], local_bs, self._beat_to(),
                                                                  feed_memory_bytes(), blob)
                                                 for r, a in enumerate(self.actors)], "predict", self._liveness()))
            finally:
                release_held(refs)
            return _in_data_order(outs, order)

        return self._call("predict", run)

    def call(self, fn: Any) -> list[Any]:
        """``fn(runner)`` on every live actor, by rank (diagnostics and tests)."""
        import cloudpickle

        blob = cloudpickle.dumps(fn)
        return self._get([a.call.remote(blob) for a in self.actors], "call")

    def release(self) -> None:
        """The user is done with these workers: park them warm for the next Estimator of their kind
        (see the module docstring) when the runner allows it and the context keeps warm workers;
        else (or when an actor fails to park) kill them."""
        ctx = _active.active()
        keep_s = ctx.settings.warm_workers_s if ctx is not None else 0.0
        if (not self.actors or self._starting is not None or keep_s <= 0
                or not self.runner_cls.reuses_process or trial_worker_bundles() is not None):
            self.shutdown()
            return
        try:
            _ray().get([a.park.remote() for a in self.actors], timeout=30)
        except Exception:  # noqa: BLE001 - a worker that cannot end its runner is not reused
            log.debug("could not park the Ray workers; ending them", exc_info=True)
            self.shutdown()
            return
        _PARKING.park(self._kind(), self.actors, list(self.actor_nodes) or [None] * len(self.actors), keep_s)
        self._forget()

    def shutdown(self) -> None:
        """Kill the actors (no wait on a stuck one); the driver keeps the state."""
        if not self.actors:
            return
        _kill_actors(self.actors)
        self._forget()

    def _forget(self) -> None:
        """No actors any more (killed or parked)."""
        self.actors, self._starting, self.loaded_version, self.actor_nodes = [], None, None, []
        _LIVE.discard(self)
