"""Workers as Spark barrier tasks: one task per worker, started for each fit call.

The training state goes out by broadcast and comes back as rank 0's task result. Workers
meet through ``BarrierTaskContext.allGather`` (rank, rows held, rank 0's free port). Data
stays on the executors: a DataFrame is read there as Arrow batches, an XShards as shards.
Evaluation and prediction need no barrier: each partition works alone and the driver
merges small per-partition results (evaluation) or Spark keeps the output (prediction).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import traceback
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np

from orca.core._net import find_free_ports
from orca.core.engine.adapters import DataSource, spark_select
from orca.core.engine.convert import Part, part_rows, shard_to_part, table_to_part
from orca.core.engine.errors import OrcaWorkerError
from orca.core.engine.feed import Feed, balanced_slices, cut_part
from orca.core.engine.loop import FitArgs, evaluate_feed, run_fit, run_predict
from orca.core.engine.metrics import make_metrics
from orca.core.engine.runner import Collective, Rendezvous, solo_runner

TAG = "__orca_split__"


class SparkCollective(Collective):
    """allgather through ``BarrierTaskContext.allGather`` (bounded by spark.barrier.sync.timeout)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def allgather(self, obj: Any) -> list[Any]:
        msg = base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")
        return [cloudpickle.loads(base64.b64decode(m)) for m in self.ctx.allGather(msg)]


def _barrier_worker(job: dict[str, Any], train_parts: list[Part], val_parts: list[Part]) -> bytes:
    """Body of one barrier task: rendezvous, build the runner, train, return stats (+ state on rank 0)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    runner = None
    try:
        feed = Feed.concat(train_parts)
        val = Feed.concat(val_parts) if job["has_val"] else None
        infos = ctx.getTaskInfos()
        host = infos[rank].address.split(":")[0] or "127.0.0.1"
        # every rank's port: frameworks with a cluster spec (TF_CONFIG) need them all; and a second
        # one on rank 0 for orca.core.sync, which a framework may run beside its own group
        port, sync_port = find_free_ports(2, host)
        gathered = [json.loads(m) for m in ctx.allGather(json.dumps({"port": port, "sync_port": sync_port,
                                                                     "rows": feed.num_rows}))]
        counts = tuple(int(g["rows"]) for g in gathered)
        hosts = [i.address.split(":")[0] or "127.0.0.1" for i in infos]
        extra = {"worker_addresses": [f"{h}:{g['port']}" for h, g in zip(hosts, gathered, strict=True)],
                 "sync_port": int(gathered[0]["sync_port"])}
        rdv = Rendezvous(rank=rank, world_size=len(infos), master_addr=hosts[0], master_port=gathered[0]["port"],
                         counts=counts, host=host, extra=extra)
        runner = job["runner_cls"](dict(job["spec"], threads=job["threads"]))
        runner.setup(rdv)
        if job["state"] is not None:
            runner.set_state(job["state"])
        args: FitArgs = job["args"]
        if job["creator"] is not None:
            args.creator = job["creator"]
            feed = None  # type: ignore[assignment]
        history = run_fit(runner, feed, val, counts, rank, SparkCollective(ctx), args)
        state = runner.get_state() if rank == 0 else None
        digest = runner.weights_digest()
        runner.shutdown()
        return cloudpickle.dumps({"rank": rank, "history": history, "state": state, "digest": digest})
    except Exception as exc:  # noqa: BLE001 - travels back to the driver with its traceback
        if runner is not None:  # close its connections now: peers waiting on this rank fail fast
            try:
                runner.shutdown()
            except Exception:  # noqa: BLE001, S110 - the original error is the one to report
                pass
        return cloudpickle.dumps({"rank": rank, "error": f"{type(exc).__name__}: {exc}",
                                  "traceback": "".join(traceback.format_exception(exc))})


def _raise_first_error(results: list[dict[str, Any]], what: str) -> None:
    errors = [r for r in results if "error" in r]
    if errors:
        # a rank that only lost its peer reports a consequence: name the cause first
        first = min(errors, key=lambda r: (r["error"].startswith("PeerLostError"), r["rank"]))
        raise OrcaWorkerError(f"Orca worker {first['rank']} failed during {what}: {first['error']}",
                              rank=first["rank"], worker_traceback=first["traceback"])


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn a failed Spark job into one OrcaWorkerError carrying the Python worker's traceback."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ in ("Py4JJavaError", "PythonException", "SparkRuntimeException"):
            raise _spark_error(exc, what) from None
        raise


def _spark_error(exc: Exception, what: str) -> OrcaWorkerError:
    text = str(exc)
    marker = text.find("Traceback (most recent call last)")
    tb = text[marker:] if marker >= 0 else text
    last = [ln for ln in tb.splitlines() if ln.strip()][-1:] or [type(exc).__name__]
    return OrcaWorkerError(f"a Spark task failed during {what}: {last[0].strip()}", worker_traceback=tb)


class SparkWorkerGroup:
    """Runs a framework runner in ``num_workers`` Spark barrier tasks per call.

    Args:
        runner_cls: the framework's Runner subclass (importable on the executors).
        spec: what the runner builds from.
        num_workers: barrier tasks (at most the cluster's task slots).
        threads: intra-op threads per worker.
    """

    def __init__(self, runner_cls: Any, spec: dict[str, Any], num_workers: int, threads: int) -> None:
        self.runner_cls, self.spec, self.num_workers, self.threads = runner_cls, spec, num_workers, threads
        #: weight digests of every rank at the end of the last fit
        self.last_digests: list[str] = []

    @staticmethod
    def spark() -> Any:
        from orca.core.context import OrcaContext

        return OrcaContext.current().spark_session()

    def check_slots(self) -> None:
        """Fail fast when the cluster cannot run all barrier tasks at once."""
        slots = self.spark().sparkContext.defaultParallelism
        if self.num_workers > slots:
            raise ValueError(
                f"the spark backend runs {self.num_workers} workers as one barrier stage, but the Spark "
                f"cluster has {slots} task slots; lower workers_per_node/num_workers or add cores."
            )

    # ------------------------------------------------------------------ fit
    def fit(self, state: Any, source: DataSource, val_source: DataSource | None,
            args: FitArgs) -> tuple[list[dict[str, Any]], Any]:
        """Train in one barrier stage; return (history, rank 0's new state)."""
        self.check_slots()
        sc = self.spark().sparkContext
        job = {"runner_cls": self.runner_cls, "spec": self.spec, "threads": self.threads, "state": state,
               "args": args, "has_val": val_source is not None,
               "creator": source.obj if source.kind == "creator" else None}
        if val_source is not None and val_source.kind == "creator":
            args.val_creator = val_source.obj
            job["has_val"] = False
        bc = sc.broadcast(cloudpickle.dumps(job))
        n = self.num_workers
        try:
            with spark_errors("fit"):
                if source.kind == "dataframe" and (val_source is None or val_source.kind == "dataframe"):
                    raw = self._fit_dataframe(bc, source, val_source)
                else:
                    raw = self._fit_rdd(bc, source, val_source)
        finally:
            bc.destroy()
        results = [cloudpickle.loads(r) for r in raw]
        _raise_first_error(results, "fit")
        rank0 = next(r for r in results if r["rank"] == 0)
        self.last_digests = [r["digest"] for r in sorted(results, key=lambda r: r["rank"])]
        assert len(results) == n
        return rank0["history"], rank0["state"]

    def _fit_dataframe(self, bc: Any, source: DataSource, val_source: DataSource | None) -> list[bytes]:
        import pyarrow as pa
        from pyspark.sql import functions as F

        fcols, lcols = list(source.feature_cols or []), list(source.label_cols or [])
        has_val = val_source is not None
        df = spark_select(source.obj, fcols + lcols)
        if val_source is not None:
            df = df.withColumn(TAG, F.lit(0))
            vdf = spark_select(val_source.obj, fcols + lcols).withColumn(TAG, F.lit(1))
            df = df.unionByName(vdf)
        if val_source is not None or df.rdd.getNumPartitions() != self.num_workers:
            df = df.repartition(self.num_workers)

        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            job = cloudpickle.loads(bc.value)
            nonempty = [b for b in batches if b.num_rows]
            train: list[Part] = []
            val: list[Part] = []
            if nonempty:
                table = pa.Table.from_batches(nonempty)
                if not has_val:  # nothing to split: no filter, no copy of the rows
                    train.append(table_to_part(table, fcols, lcols))
                else:
                    tags = table.column(TAG).to_numpy()
                    for flag, bucket in ((0, train), (1, val)):
                        sub = table.filter(pa.array(tags == flag))
                        if sub.num_rows:
                            bucket.append(table_to_part(sub, fcols, lcols))
            out = _barrier_worker(job, train, val)
            yield pa.RecordBatch.from_pydict({"payload": [out]})

        return [r["payload"] for r in df.mapInArrow(task, "payload binary", barrier=True).collect()]

    def _fit_rdd(self, bc: Any, source: DataSource, val_source: DataSource | None) -> list[bytes]:
        n = self.num_workers
        if source.kind == "creator":  # each worker builds its own loader; tasks only need to exist
            rdd = self.spark().sparkContext.parallelize([], n)
        else:
            rdd = _keyed_parts_rdd(self.spark(), source, 0, n)
        if val_source is not None and val_source.kind != "creator":
            rdd = rdd.union(_keyed_parts_rdd(self.spark(), val_source, 1, n))
        parts_rdd = rdd.partitionBy(n, lambda k: int(k)).values()

        def task(items: Iterator[tuple[int, Part]]) -> Iterator[bytes]:
            job = cloudpickle.loads(bc.value)
            train: list[Part] = []
            val: list[Part] = []
            for tag, part in items:
                (train if tag == 0 else val).append(part)
            yield _barrier_worker(job, train, val)

        return parts_rdd.barrier().mapPartitions(task).collect()

    # ------------------------------------------------------------ evaluate
    def evaluate(self, state: Any, source: DataSource, batch_size: int, metrics: Any) -> list[dict[str, Any]]:
        """Per-partition evaluation states (merged by the caller)."""
        bc = broadcast_runner(self.spark().sparkContext, self.runner_cls, self.spec, state, self.threads)
        local_bs = max(1, batch_size // self.num_workers)

        def evaluate_parts(parts: list[Part]) -> bytes:
            runner = cached_runner(bc)
            return cloudpickle.dumps(evaluate_feed(runner, Feed.concat(parts).batches(local_bs), make_metrics(metrics)))

        if source.kind == "creator":  # one task reads the whole loader
            creator = source.obj

            def evaluate_creator(_: Any) -> list[bytes]:
                runner = cached_runner(bc)
                batches = runner.native_batches(creator, batch_size, training=False)
                return [cloudpickle.dumps(evaluate_feed(runner, batches, make_metrics(metrics)))]

            try:
                with spark_errors("evaluate"):
                    raw = self.spark().sparkContext.parallelize([0], 1).mapPartitions(evaluate_creator).collect()
            finally:
                bc.unpersist()
            return [cloudpickle.loads(r) for r in raw]

        try:
            with spark_errors("evaluate"):
                raw = self._map_parts(source, evaluate_parts, need_labels=True)
        finally:
            bc.unpersist()
        return [cloudpickle.loads(r) for r in raw]

    def _map_parts(self, source: DataSource, fn: Any, need_labels: bool) -> list[bytes]:
        if source.kind == "dataframe":
            import pyarrow as pa

            fcols = list(source.feature_cols or [])
            lcols = list(source.label_cols or []) if need_labels else []
            df = spark_select(source.obj, fcols + lcols)

            def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                nonempty = [b for b in batches if b.num_rows]
                parts = [table_to_part(pa.Table.from_batches(nonempty), fcols, lcols)] if nonempty else []
                yield pa.RecordBatch.from_pydict({"payload": [fn(parts)]})

            return [r["payload"] for r in df.mapInArrow(task, "payload binary").collect()]
        rdd = _tagged_parts_rdd(self.spark(), source, 0, need_labels)
        return rdd.mapPartitions(lambda items: [fn([p for _, p in items])]).collect()

    # -------------------------------------------------------------- predict
    def predict_local(self, state: Any, source: DataSource, batch_size: int) -> list[np.ndarray]:
        """Predict in-process data on the executors; outputs in input order."""
        bc = broadcast_runner(self.spark().sparkContext, self.runner_cls, self.spec, state, self.threads)

        def predict_parts(parts: list[Part]) -> bytes:
            runner = cached_runner(bc)
            return cloudpickle.dumps(run_predict(runner, Feed.concat(parts), batch_size))

        try:
            with spark_errors("predict"):
                outs = [cloudpickle.loads(r) for r in self._map_parts(source, predict_parts, need_labels=False)]
        finally:
            bc.unpersist()
        outs = [o for o in outs if o]
        if not outs:
            return []
        return [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]


def _keyed_parts_rdd(spark: Any, source: DataSource, tag: int, world: int) -> Any:
    """An RDD of ``(worker, (tag, part))``: in-process data cut into the same contiguous, balanced
    ranges the Ray launcher uses (:func:`balanced_slices`), XShards dealt round-robin."""
    if source.kind == "local":
        slices = balanced_slices([(p, part_rows(p)) for p in source.obj], world)
        items = [(w, (tag, cut_part(p, lo, hi))) for w, share in enumerate(slices) for p, lo, hi in share]
        return spark.sparkContext.parallelize(items, max(1, min(len(items), world)))
    return _tagged_parts_rdd(spark, source, tag, True).zipWithIndex().map(lambda t: (t[1] % world, t[0]))


def _tagged_parts_rdd(spark: Any, source: DataSource, tag: int, need_labels: bool) -> Any:
    """An RDD of ``(tag, part)`` for XShards or in-process data (at least one element per slot)."""
    fcols = source.feature_cols
    lcols = source.label_cols if need_labels else None
    if source.kind == "local":
        parts = source.obj
        slots = spark.sparkContext.defaultParallelism
        if len(parts) == 1 and part_rows(parts[0]) >= slots:
            p = parts[0]
            idx = np.array_split(np.arange(part_rows(p)), slots)
            parts = [{"x": [a[i] for a in p["x"]], "y": [a[i] for a in p["y"]]} for i in idx]
        return spark.sparkContext.parallelize([(tag, p) for p in parts], len(parts))
    if source.kind == "xshards":
        shards = source.obj
        if hasattr(shards, "rdd"):
            return shards.rdd.map(lambda s: (tag, shard_to_part(s, fcols, lcols)))
        local = [(tag, shard_to_part(s, fcols, lcols)) for s in shards.collect()]
        return spark.sparkContext.parallelize(local, max(1, len(local)))
    raise TypeError(f"the spark backend cannot read {source.kind} data here; pass a DataFrame or an XShards.")


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
