"""Workers as Spark barrier tasks: one task per worker, started for each fit call.

The training state goes out by broadcast and comes back as rank 0's task result. Workers
meet through the driver (rank, rows held, rank 0's free ports: ``progress.gather`` over the call's
authenticated channel; Spark's ``BarrierTaskContext.allGather`` polls once a second). Data
stays on the executors: a DataFrame is read there as Arrow batches, an XShards as shards.
Evaluation and prediction need no barrier: each partition works alone and the driver
merges small per-partition results (evaluation) or Spark keeps the output (prediction).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from orca.core._net import find_free_ports, machine_id
from orca.core.engine.addrspace import economize
from orca.core.engine.connect import launch_context, num_partitions, require_classic
from orca.core.engine.convert import Part
from orca.core.engine.errors import OrcaWorkerError, WorkerLostError
from orca.core.engine.feed import Feed, Rows
from orca.core.engine.group import (
    FitResult,
    ModelState,
    WorkerGroup,
    concat_outputs,
    error_result,
    evaluate_on_worker,
    fit_on_worker,
    fit_result,
    is_consequence,
    predict_on_worker,
    raise_worker_errors,
)
from orca.core.engine.liveness import MEETING, backstop_s, beat, beating, report_failure
from orca.core.engine.loop import FitArgs
from orca.core.engine.progress import gather
from orca.core.engine.reads import WorkerRead
from orca.core.engine.runner import Runner, make_rendezvous, solo_runner
from orca.core.engine.spill import FeedBuilder, arrow_feed_builder, close_feeds, feed_memory_bytes, part_bytes

if TYPE_CHECKING:
    from orca.core.engine.sources import DataSource

log = logging.getLogger(__name__)

TAG = "__orca_split__"


#: what a barrier task loads: (its training feed, its validation feed), either may be None
Feeds = tuple[Rows | None, Rows | None]


def _barrier_worker(job: dict[str, Any], load: Callable[[], Feeds]) -> bytes:
    """Body of one barrier task: load its share (``load()``), rendezvous, build the runner, train,
    return stats (+ state on rank 0), sending heartbeats to the driver all along."""
    from pyspark import BarrierTaskContext

    economize(job["runner_cls"].address_space_mb)  # before the share's first Arrow batch is read
    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    with beating(job["args"].beat_to, rank):
        return _barrier_work(ctx, rank, job, load)


def _barrier_work(ctx: Any, rank: int, job: dict[str, Any], load: Callable[[], Feeds]) -> bytes:
    from orca.core.engine.child import host_runner

    runner = None
    # a column the model cannot take fails the task here, before the rendezvous (Spark ends the
    # other tasks of the stage; a failure after the rendezvous travels back as the rank's result)
    with _rank_noted():
        feeds = load()
    try:
        feed = feeds[0] if job["creator"] is None else None
        val = feeds[1] if job["has_val"] else None
        # (a waiting phase, bounded by worker_start_timeout_s: a peer this rank cannot reach fails the call)
        beat(MEETING, force=True)
        infos = ctx.getTaskInfos()
        host = infos[rank].address.split(":")[0] or "127.0.0.1"
        # every rank's port: frameworks with a cluster spec (TF_CONFIG) need them all; and a second
        # one on rank 0 for orca.core.sync, which a framework may run beside its own group
        port, sync_port = find_free_ports(2, host)
        rows = feed.num_rows if feed is not None else 0
        gathered = _gather_ranks(ctx, rank, len(infos), job, {"port": port, "sync_port": sync_port, "rows": rows,
                                                               "machine": machine_id()})
        hosts = [i.address.split(":")[0] or "127.0.0.1" for i in infos]
        counts = [int(g["rows"]) for g in gathered]
        # a Spark Python worker is reused by later tasks: what a runner opens in it (TF's gRPC
        # server cannot be closed) outlives the fit unless the runner hosts itself in a child
        rdv = make_rendezvous(rank, hosts, [int(g["port"]) for g in gathered], int(gathered[0]["sync_port"]), counts,
                              machines=[str(g["machine"]) for g in gathered], process_outlives_call=True)
        runner = host_runner(job["runner_cls"], dict(job["spec"], threads=job["threads"]), rdv)
        if job["state"] is not None:
            runner.set_state(job["state"])
        args: FitArgs = job["args"]
        if job["creator"] is not None:
            args.creator = job["creator"]
        result = fit_on_worker(runner, feed, val, counts, args)
        runner.shutdown()
        return cloudpickle.dumps(result)
    except Exception as exc:  # noqa: BLE001 - travels back to the driver with its traceback
        if runner is not None:  # close its connections now: peers waiting on this rank fail fast
            with contextlib.suppress(Exception):
                runner.shutdown()
        failure = error_result(exc, rank)
        # the driver hears of it now: this result comes back only with the stage's, and a peer
        # still waiting for this rank (a framework's connect that retries) can hold the stage up
        report_failure(failure)
        return cloudpickle.dumps(failure)
    finally:
        close_feeds(*feeds)


def _gather_ranks(ctx: Any, rank: int, world: int, job: dict[str, Any], mine: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``mine``, in rank order: through the driver's progress server (the call's
    authenticated channel), or Spark's ``allGather`` where the call has none. ``allGather`` costs
    each rank but the last about a second (the JVM polls the barrier's reply once a second)."""
    beat_to = job["args"].beat_to
    if beat_to is None:
        return [json.loads(m) for m in ctx.allGather(json.dumps(mine))]
    key = f"fit-{ctx.stageId()}-{ctx.attemptNumber()}"  # a re-run stage meets apart
    timeout_s = backstop_s(float(job["spec"].get("timeout_s", 600.0)))
    return [dict(g) for g in gather(beat_to, rank, world, key, mine, timeout_s)]


@contextlib.contextmanager
def _rank_noted() -> Iterator[None]:
    """In a barrier task: an exception raised here says which rank raised it (a note the driver reads)."""
    try:
        yield
    except Exception as exc:
        from pyspark import BarrierTaskContext

        exc.add_note(f"(raised by the barrier task of rank {BarrierTaskContext.get().partitionId()})")
        raise


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn a failed Spark job into one OrcaWorkerError carrying the Python worker's traceback."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ in ("Py4JJavaError", "PythonException", "SparkRuntimeException") or \
                type(exc).__module__ == "pyspark.errors.exceptions.connect":  # a Spark Connect client's
            raise _spark_error(exc, what) from None
        raise


#: how long the driver lets a barrier stage end by itself once a rank reported its failure
FAILED_GRACE_S = 3.0


#: what Spark says when a task's Python worker process died (killed, OOM-killed, crashed): Spark 4
#: notices before it writes to it, Spark 3.5 when its write fails ("Broken pipe")
_LOST_PYTHON_WORKER = ("Python worker exited unexpectedly", "Connection reset", "Broken pipe")


def _retry_lost_python_worker(job: Callable[[], list[Any]]) -> list[Any]:
    """Run an idempotent Spark job; run it once more when it failed because a Python worker died.

    Spark reuses its Python workers: one that was killed between calls fails the next task
    sent to it, and local mode does not retry tasks. Evaluation and prediction read only the
    driver's state, so running them again is safe (the Ray group retries a dead actor alike).
    """
    try:
        return job()
    except Exception as exc:
        if type(exc).__name__ != "Py4JJavaError" or not any(m in str(exc) for m in _LOST_PYTHON_WORKER):
            raise
        log.warning("a Spark Python worker died; running the job once more on fresh workers")
        return job()


#: what Spark says when a task's process or executor was lost rather than failing in user code
_LOST_WORKER = (*_LOST_PYTHON_WORKER, "ExecutorLostFailure", "TaskKilled")


def _spark_error(exc: Exception, what: str) -> OrcaWorkerError:
    text = str(exc)
    marker = text.find("Traceback (most recent call last)")
    tb = text[marker:] if marker >= 0 else text
    if marker < 0:
        lost = next((m for m in _LOST_WORKER if m in text), None)
        if lost is not None:  # not a Python exception: say what Spark saw, not a JVM stack frame
            reason = next((ln.strip() for ln in text.splitlines() if lost in ln), lost)
            return WorkerLostError(f"an Orca worker (a Spark task's Python process) was lost during {what}: "
                                   f"{reason[:500]}", worker_traceback=tb)
    # the Python exception's own line, not the JVM frames Spark appends after it
    lines = [ln.strip() for ln in tb.splitlines() if ln.strip()]
    last = [ln for ln in lines if _EXC_LINE.match(ln)][-1:] or lines[-1:] or [type(exc).__name__]
    task = _RANK_NOTE.search(tb)
    if task is not None:
        rank = int(task.group(1))
        return OrcaWorkerError(f"Orca worker {rank} (Spark task {rank}) failed during {what}: {last[0]}", rank=rank,
                               worker_traceback=tb)
    return OrcaWorkerError(f"a Spark task failed during {what}: {last[0]}", worker_traceback=tb)


#: a Python exception line of a traceback ("ValueError: ...")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?")
#: the note of :func:`_rank_noted`
_RANK_NOTE = re.compile(r"\(raised by the barrier task of rank (\d+)\)")


def _cancel(sc: Any, tag: str, thread: threading.Thread, server: Any) -> None:
    """Cancel the jobs tagged ``tag`` and wait (briefly) for ``thread``, which runs them, to see it.

    The workers still in the call are told to end their processes first (``server``: the call's
    :class:`~orca.core.engine.progress.ProgressServer`): Spark's own kill of a cancelled task's
    Python worker does not always reach one busy in user code, and such a worker would live on
    with its memory and threads (and, reused by a later job, hang it)."""
    _stop_workers(server)
    sc.cancelJobsWithTag(tag)
    thread.join(30)


def _stop_workers(server: Any) -> None:
    stop = getattr(server, "stop_workers", None)
    if stop is not None:
        stop()


class SparkWorkerGroup(WorkerGroup):
    """Runs a framework runner in ``num_workers`` Spark barrier tasks per call.

    Every call broadcasts the driver's state and builds the runners anew in the tasks (a Python
    worker keeps the runner it built for evaluation and prediction across calls, keyed by what
    built it); ``fit`` returns rank 0's new state. See
    :class:`~orca.core.engine.group.WorkerGroup` for the arguments.
    """

    def __init__(self, runner_cls: type[Runner], spec: dict[str, Any], num_workers: int, threads: int,
                 timeout_s: float = 600.0) -> None:
        super().__init__(runner_cls, spec, num_workers, threads, timeout_s)

    @staticmethod
    def spark() -> Any:
        from orca.core import _active

        return _active.current().spark_session()

    def check_slots(self) -> None:
        """Fail fast when the cluster cannot run all barrier tasks at once."""
        slots = launch_context(self.spark()).defaultParallelism
        if self.num_workers > slots:
            raise ValueError(
                f"the spark backend runs {self.num_workers} workers as one barrier stage, but the Spark "
                f"cluster has {slots} task slots; lower workers_per_node/num_workers or add cores."
            )

    def _watched(self, job: Callable[[], list[Any]], what: str, ranks: int | None = None,
                 rerun: bool = False) -> list[Any]:
        """Run the Spark job ``job()`` while watching the workers' heartbeats (``ranks`` of them;
        default: the group's): a worker silent for ``worker_timeout_s``, or Ctrl-C on the driver,
        cancels the job (Spark kills its Python workers) and raises here."""
        liveness = self._liveness(ranks)
        sc = launch_context(self.spark())  # a SparkContext, or its stand-in on Spark Connect
        tag = f"orca-{uuid.uuid4().hex}"
        box: dict[str, Any] = {}

        def run() -> None:
            sc.addJobTag(tag)  # thread-local: only this call's jobs carry it
            try:
                box["value"] = job()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                box["error"] = exc
            finally:
                sc.removeJobTag(tag)

        thread = threading.Thread(target=run, name=f"orca-spark-{what}", daemon=True)
        thread.start()
        failed_at: float | None = None
        try:
            while thread.is_alive():
                thread.join(0.5)
                silent = liveness.silent() if liveness is not None and thread.is_alive() else None
                if silent is not None:
                    _cancel(sc, tag, thread, self.watch)
                    raise TimeoutError(f"{silent} (during {what})")
                if liveness is not None and thread.is_alive() and any(
                        not is_consequence(str(f.get("error", ""))) for f in list(liveness.failures.values())):
                    # a rank failed by itself: its peers normally fail with it (its connections close) and
                    # the stage ends; one still waiting for it after a moment would hold the call up. (A
                    # rank that only saw its peer go waits for Spark's word on that peer: a lost worker.)
                    failed_at = failed_at or time.monotonic()
                    if time.monotonic() - failed_at > FAILED_GRACE_S:
                        _cancel(sc, tag, thread, self.watch)
                        raise_worker_errors(list(liveness.failures.values()), what)
                if rerun and liveness is not None and liveness.restarted:
                    # Spark re-runs a failed barrier stage from the state it was given: the fit would
                    # silently start over; Orca's recovery (max_failures) resumes from the driver's state
                    _cancel(sc, tag, thread, self.watch)
                    raise WorkerLostError(f"an Orca worker was lost during {what} and Spark started the stage "
                                          f"again (rank {liveness.restarted[0]} started twice); Orca stopped it. "
                                          "Pass max_failures=N to fit to resume from the last completed epoch.")
        except KeyboardInterrupt:
            _cancel(sc, tag, thread, self.watch)  # nothing keeps training after Ctrl-C; the driver keeps its state
            raise
        if "error" in box:
            # a failed barrier stage: the ranks still inside it wait for a peer that is gone
            _stop_workers(self.watch)
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ fit
    def fit(self, state: ModelState, source: DataSource, val_source: DataSource | None,
            args: FitArgs) -> FitResult:
        """Train in one barrier stage; return the history and rank 0's new state."""
        self.check_slots()
        sc = launch_context(self.spark())  # a SparkContext, or its stand-in on Spark Connect
        job = {"runner_cls": self.runner_cls, "spec": self.spec, "threads": self.threads, "state": state.value,
               "args": args, "has_val": val_source is not None and not val_source.is_creator,
               "creator": source.obj if source.is_creator else None, "feed_memory_bytes": feed_memory_bytes()}
        if val_source is not None and val_source.is_creator:
            args.val_creator = val_source.obj
        bc = sc.broadcast(cloudpickle.dumps(job))
        try:
            with spark_errors("fit"):
                frame = source.spark_frame(True)
                if frame is not None and (val_source is None or val_source.spark_frame(True) is not None):
                    raw = self._watched(lambda: self._fit_dataframe(bc, source, val_source), "fit", rerun=True)
                else:
                    raw = self._watched(lambda: self._fit_rdd(bc, source, val_source), "fit", rerun=True)
        finally:
            bc.destroy()
        result = fit_result([cloudpickle.loads(r) for r in raw], self.num_workers)
        result.state = ModelState(result.state, state.version + 1)
        return result

    def _fit_dataframe(self, bc: Any, source: DataSource, val_source: DataSource | None) -> list[bytes]:
        import pyarrow as pa
        from pyspark.sql import functions as F

        fcols, lcols = source.columns(True)
        has_val = val_source is not None
        df = source.spark_frame(True)
        if val_source is not None:
            df = df.withColumn(TAG, F.lit(0)).unionByName(val_source.spark_frame(True).withColumn(TAG, F.lit(1)))
        if val_source is not None or num_partitions(df) != self.num_workers:
            df = df.repartition(self.num_workers)

        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            job = cloudpickle.loads(bc.value)

            def load() -> Feeds:
                builders = [arrow_feed_builder(fcols, lcols, job["feed_memory_bytes"]) for _ in range(2)]
                for b in batches:
                    beat("loading its data")
                    if not b.num_rows:
                        continue
                    if not has_val:  # nothing to split: no filter, no copy of the rows
                        builders[0].add(b, b.nbytes)
                        continue
                    tags = b.column(TAG).to_numpy()
                    for flag in (0, 1):
                        sub = b.filter(pa.array(tags == flag))
                        if sub.num_rows:
                            builders[flag].add(sub, sub.nbytes)
                return builders[0].finish(), builders[1].finish()

            out = _barrier_worker(job, load)
            yield pa.RecordBatch.from_pydict({"payload": [out]})

        return [r["payload"] for r in df.mapInArrow(task, "payload binary", barrier=True).collect()]

    def _fit_rdd(self, bc: Any, source: DataSource, val_source: DataSource | None) -> list[bytes]:
        n = self.num_workers
        spark = self.spark()
        require_classic(spark)  # RDDs: a classic session's only
        if source.is_creator:  # each worker builds its own loader; tasks only need to exist
            rdd = spark.sparkContext.parallelize([], n)
        else:
            rdd = source.spark_worker_parts(spark, n, True).mapValues(lambda p: (0, p))
        if val_source is not None and not val_source.is_creator:
            rdd = rdd.union(val_source.spark_worker_parts(spark, n, True).mapValues(lambda p: (1, p)))
        parts_rdd = rdd.partitionBy(n, lambda k: int(k)).values()

        def task(items: Iterator[tuple[int, Part]]) -> Iterator[bytes]:
            job = cloudpickle.loads(bc.value)

            def load() -> Feeds:
                builders: list[FeedBuilder[Any]] = [FeedBuilder(job["feed_memory_bytes"]) for _ in range(2)]
                for tag, part in items:
                    beat("loading its data")
                    if isinstance(part, WorkerRead):  # rows this task reads itself (files)
                        builders[tag] = part.fill(job["feed_memory_bytes"])
                        continue
                    builders[tag].add(part, part_bytes(part))
                return builders[0].finish(), builders[1].finish()

            yield _barrier_worker(job, load)

        return parts_rdd.barrier().mapPartitions(task).collect()

    # ------------------------------------------------------------ evaluate
    def evaluate(self, state: ModelState, source: DataSource, batch_size: int, metrics: Any) -> list[dict[str, Any]]:
        """Per-partition evaluation states (merged by the caller)."""
        # the metrics (and callbacks) travel as cloudpickle's bytes, as fit's job does: Spark's own copy of
        # cloudpickle does not copy by value what was registered with cloudpickle.register_pickle_by_value
        blob = cloudpickle.dumps(metrics)
        if source.is_creator:  # one task reads the whole loader
            creator_blob = cloudpickle.dumps(source.obj)  # (the data creator too, as fit's job carries it)

            def evaluate_creator(runner: Runner) -> Any:
                return evaluate_on_worker(runner, runner.native_batches(cloudpickle.loads(creator_blob), batch_size,
                                                                        False), cloudpickle.loads(blob))

            return self._run_parts(state, None, evaluate_creator, "evaluate", need_labels=True)
        local_bs = max(1, batch_size // self.num_workers)
        return self._run_parts(state, source, lambda runner, feed: evaluate_on_worker(
            runner, feed.batches(local_bs), cloudpickle.loads(blob)), "evaluate", need_labels=True)

    # -------------------------------------------------------------- predict
    def predict(self, state: ModelState, source: DataSource, batch_size: int,
                callbacks: Sequence[Any] = ()) -> list[np.ndarray]:
        """Predict in-process data on the executors; outputs in input order."""
        blob = cloudpickle.dumps(list(callbacks))  # (as evaluate's: by value where the user registered them)
        outs = self._run_parts(state, source, lambda runner, feed: predict_on_worker(
            runner, feed, batch_size, cloudpickle.loads(blob)), "predict", need_labels=False)
        return concat_outputs(outs)

    def _run_parts(self, state: ModelState, source: DataSource | None, fn: Any, what: str,
                   need_labels: bool) -> list[Any]:
        """``fn(runner, feed)`` on every partition of ``source`` (``fn(runner)`` in one task when
        there is no source), with this Python worker's cached runner of ``state``."""
        sc = launch_context(self.spark())  # a SparkContext, or its stand-in on Spark Connect
        bc = broadcast_runner(sc, self.runner_cls, self.spec, state.value, self.threads)
        alone = source is None  # (the task must not capture the source: it holds the SparkContext)
        beat_to = self._beat_to()
        reserve_mb = self.runner_cls.address_space_mb

        def run(load: Callable[[], Rows]) -> bytes:
            economize(reserve_mb)
            with beating(beat_to, 0):  # any task's progress is the job's (tasks run in waves)
                feed = None if alone else load()  # a column the model cannot take fails the task here
                try:
                    runner = cached_runner(bc)
                    value = fn(runner) if feed is None else fn(runner, feed)
                    return cloudpickle.dumps({"value": value})
                except Exception as exc:  # noqa: BLE001 - travels back to the driver with its traceback
                    return cloudpickle.dumps(error_result(exc, None))
                finally:
                    close_feeds(feed)

        def job() -> list[Any]:
            if source is None:
                return sc.parallelize([0], 1).mapPartitions(lambda _: [run(lambda: Feed([], []))]).collect()
            return self._map_parts(source, run, need_labels, feed_memory_bytes())

        try:
            with spark_errors(what):
                raw = _retry_lost_python_worker(lambda: self._watched(job, what, ranks=1))
        finally:
            bc.unpersist()
        results = [cloudpickle.loads(r) for r in raw]
        raise_worker_errors(results, what)
        return [r["value"] for r in results]

    def _map_parts(self, source: DataSource, fn: Callable[[Callable[[], Rows]], bytes], need_labels: bool,
                   memory_bytes: int) -> list[bytes]:
        """``fn(load)`` once per partition of ``source``, ``load()`` giving the partition's rows
        (on disk past ``memory_bytes``, see :mod:`orca.core.engine.spill`)."""
        frame = source.spark_frame(need_labels)
        if frame is not None:
            import pyarrow as pa

            fcols, lcols = source.columns(need_labels)

            def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                def load() -> Rows:
                    builder = arrow_feed_builder(fcols, lcols, memory_bytes)
                    for b in batches:
                        beat("loading its data")
                        if b.num_rows:
                            builder.add(b, b.nbytes)
                    return builder.finish()

                yield pa.RecordBatch.from_pydict({"payload": [fn(load)]})

            return [r["payload"] for r in frame.mapInArrow(task, "payload binary").collect()]
        require_classic(self.spark())  # RDDs: a classic session's only
        rdd = source.spark_parts(self.spark(), need_labels)

        def parts_task(items: Iterator[Part]) -> list[bytes]:
            def load() -> Rows:
                builder: FeedBuilder[Any] = FeedBuilder(memory_bytes)
                for part in items:
                    if isinstance(part, WorkerRead):  # rows this task reads itself (files)
                        builder = part.fill(memory_bytes)
                        continue
                    builder.add(part, part_bytes(part))
                return builder.finish()

            return [fn(load)]

        return rdd.mapPartitions(parts_task).collect()


#: runners built on this Python worker, newest last, keyed by the digest of what built them
_RUNNERS: dict[bytes, Any] = {}
_RUNNERS_KEPT = 2


def broadcast_runner(sc: Any, runner_cls: type, spec: dict[str, Any], state: Any, threads: int) -> Any:
    """Broadcast what an executor needs to build a runner, with a digest of those bytes.

    The digest lets a Python worker keep the runner it built across calls (not only across the
    partitions of one call): a model predicted again with the same weights is not rebuilt, nor
    recompiled (OpenVINO, TF), on every worker. Any change of class, spec, state or threads
    changes the bytes, hence the digest.
    """
    blob = cloudpickle.dumps({"runner_cls": runner_cls, "spec": spec, "state": state, "threads": threads})
    return sc.broadcast((runner_digest(blob), blob))


def runner_digest(blob: bytes) -> bytes:
    """The cache key of a pickled runner job."""
    return hashlib.blake2b(blob, digest_size=16).digest()


def cached_runner(bc: Any) -> Any:
    """This Python worker's runner for the job in ``bc`` (from :func:`broadcast_runner`), built once.

    The last two are kept (a fit's evaluation and a prediction may alternate); an older one
    is shut down.
    """
    digest, blob = bc.value
    runner = _RUNNERS.pop(digest, None)
    if runner is None:
        job = cloudpickle.loads(blob)
        runner = solo_runner(job["runner_cls"], job["spec"], job["state"], job["threads"])
        while len(_RUNNERS) >= _RUNNERS_KEPT:
            old = _RUNNERS.pop(next(iter(_RUNNERS)))
            with contextlib.suppress(Exception):
                old.shutdown()
    _RUNNERS[digest] = runner  # newest last
    return runner
