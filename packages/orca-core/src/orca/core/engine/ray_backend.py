"""Workers as long-lived Ray actors: the group survives across fit/evaluate/predict calls.

Data reaches the actors as Ray objects: Spark executors put their partitions into the
object store themselves (owned by a holder actor, so they outlive Spark's Python worker),
and only object references travel through the driver. Each actor then takes an exact,
balanced row range of the whole data set, whatever the partitioning.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from orca.core._net import find_free_ports
from orca.core.engine.adapters import DataSource, spark_select
from orca.core.engine.convert import Part, part_rows, shard_to_part, table_to_part
from orca.core.engine.errors import OrcaWorkerError
from orca.core.engine.feed import Feed, Slice, balanced_slices, cut_part
from orca.core.engine.loop import FitArgs, evaluate_feed, run_fit, run_predict
from orca.core.engine.runner import Collective, Rendezvous, SoloCollective

log = logging.getLogger("orca")


def _ray():
    import ray

    return ray


class _RayCollective(Collective):
    """allgather through a small store actor, polled with a deadline."""

    def __init__(self, store: Any, rank: int, world: int, timeout_s: float, key: str) -> None:
        self.store, self.rank, self.world, self.timeout_s = store, rank, world, timeout_s
        self.key = key  # one fit call: rounds of an earlier, failed call never mix in
        self.round = 0

    def allgather(self, obj: Any) -> list[Any]:
        ray = _ray()
        self.round += 1
        rnd = f"{self.key}:{self.round}"
        ray.get(self.store.put.remote(rnd, self.rank, obj))
        deadline = time.monotonic() + self.timeout_s
        delay = 0.002
        while True:
            values = ray.get(self.store.get.remote(rnd))
            if values is not None:
                return values
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"rank {self.rank}: other workers did not reach allgather round {self.round} "
                    f"within {self.timeout_s:.0f}s"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


class _Store:
    """Holds allgather values per round until every rank has read them."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.rounds: dict[str, dict[int, Any]] = {}
        self.reads: dict[str, int] = {}

    def put(self, rnd: str, rank: int, value: Any) -> None:
        self.rounds.setdefault(rnd, {})[rank] = value

    def get(self, rnd: str) -> list[Any] | None:
        values = self.rounds.get(rnd, {})
        if len(values) < self.world:
            return None
        self.reads[rnd] = self.reads.get(rnd, 0) + 1
        out = [values[r] for r in range(self.world)]
        if self.reads[rnd] >= self.world:
            self.rounds.pop(rnd, None)
            self.reads.pop(rnd, None)
        return out


def _load_slices(slices: Sequence[Slice]) -> Feed:
    ray = _ray()
    if not slices:
        return Feed([], [])
    parts = ray.get([s[0] for s in slices])
    return Feed.concat([cut_part(part, start, stop) for part, (_, start, stop) in zip(parts, slices, strict=True)])


class _Worker:
    """The actor: hosts one framework runner."""

    def __init__(self, runner_cls: Any, spec_blob: bytes, threads: int) -> None:
        import cloudpickle

        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.runner = runner_cls(dict(cloudpickle.loads(spec_blob), threads=threads))
        self.feed_key: Any = None
        self.feed: Feed | None = None

    def address(self) -> tuple[str, int, int]:
        """This worker's host, a port for the framework's cluster spec, and one for orca.core.sync."""
        ray = _ray()
        host = ray.util.get_node_ip_address()
        port, sync_port = find_free_ports(2, host)
        return host, port, sync_port

    def setup(self, rendezvous: Rendezvous) -> None:
        self.rendezvous = rendezvous
        self.runner.setup(rendezvous)

    def set_state(self, state: dict[str, Any]) -> None:
        self.runner.set_state(state)

    def get_state(self) -> dict[str, Any]:
        return self.runner.get_state()

    def call(self, fn_blob: bytes) -> Any:
        """Run ``fn(runner)`` here (save a checkpoint, read weights)."""
        import cloudpickle

        return cloudpickle.loads(fn_blob)(self.runner)

    def fit(self, slices: list[Slice], val_slices: list[Slice] | None, counts: list[int],
            store: Any, key: str, args_blob: bytes, timeout_s: float) -> list[dict[str, Any]]:
        import cloudpickle

        try:
            args: FitArgs = cloudpickle.loads(args_blob)
            feed = _load_slices(slices) if args.creator is None else None
            val = _load_slices(val_slices) if val_slices else None
            rank, world = self.rendezvous.rank, self.rendezvous.world_size
            coll: Collective = (_RayCollective(store, rank, world, timeout_s, key)
                                if world > 1 else SoloCollective())
            return run_fit(self.runner, feed, val, counts, rank, coll, args)
        except Exception as exc:  # noqa: BLE001 - any failure goes back with its traceback
            raise _wrap(exc, self.rendezvous.rank) from None

    def evaluate(self, slices: list[Slice], blob: bytes, batch_size: int) -> dict[str, Any]:
        import cloudpickle

        from orca.core.engine.metrics import make_metrics

        try:
            creator, metrics = cloudpickle.loads(blob)
            if creator is not None:
                batches = self.runner.native_batches(creator, batch_size, training=False)
            else:
                batches = _load_slices(slices).batches(batch_size)
            return evaluate_feed(self.runner, batches, make_metrics(metrics))
        except Exception as exc:  # noqa: BLE001 - any failure goes back with its traceback
            raise _wrap(exc, self.rendezvous.rank) from None

    def predict(self, slices: list[Slice], batch_size: int) -> list[np.ndarray]:
        try:
            return run_predict(self.runner, _load_slices(slices), batch_size)
        except Exception as exc:  # noqa: BLE001 - any failure goes back with its traceback
            raise _wrap(exc, self.rendezvous.rank) from None

    def shutdown(self) -> None:
        self.runner.shutdown()


def _free_cpus(need: float, wait_s: float = 10.0) -> float:
    """Free CPUs in the Ray cluster, waiting briefly for recently killed actors to release theirs."""
    ray = _ray()
    deadline = time.monotonic() + wait_s
    while True:
        free = float(ray.available_resources().get("CPU", 0.0))
        if free >= need or time.monotonic() > deadline:
            return free
        time.sleep(0.25)


def _digest(runner: Any) -> str:
    return runner.weights_digest()


class _WorkerFailure(Exception):
    """Carries a worker's traceback across Ray's serialisation."""

    def __init__(self, rank: int, text: str, original: str) -> None:
        super().__init__(rank, text, original)
        self.rank, self.text, self.original = rank, text, original


def _wrap(exc: BaseException, rank: int) -> _WorkerFailure:
    return _WorkerFailure(rank, "".join(traceback.format_exception(exc)), f"{type(exc).__name__}: {exc}")


def _spark_to_ray(source: DataSource, need_labels: bool) -> list[tuple[Any, int]]:
    """Put each Spark partition into Ray from its executor; return (ref, rows) per partition.

    The executor hands its part to the context's holder actor (see ``orca.core.data._ray``),
    which owns it; only pickled references and row counts reach the driver.
    """
    import ray.cloudpickle as rpickle

    from orca.core.data._ray import HOLDER_NAMESPACE, _connect_ray_in_task, _ray_address, holder_name

    fcols = list(source.feature_cols or [])
    lcols = list(source.label_cols or []) if need_labels else []
    name, address = holder_name(), _ray_address()

    def put(parts: Iterator[Part]) -> Iterator[tuple[bytes, int]]:
        ray = _connect_ray_in_task(address)
        holder = ray.get_actor(name, namespace=HOLDER_NAMESPACE)
        for part in parts:
            n = part_rows(part)
            if n:
                yield rpickle.dumps(ray.get(holder.adopt.remote(part))[0]), n

    if source.kind == "dataframe":
        import pyarrow as pa

        df = spark_select(source.obj, fcols + lcols)

        def put_arrow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            nonempty = [b for b in batches if b.num_rows]
            parts = [table_to_part(pa.Table.from_batches(nonempty), fcols, lcols)] if nonempty else []
            for blob, n in put(iter(parts)):
                yield pa.RecordBatch.from_pydict({"ref": [blob], "rows": [n]})

        rows = [(r["ref"], int(r["rows"])) for r in df.mapInArrow(put_arrow, "ref binary, rows long").collect()]
    else:
        rdd = source.obj.rdd.map(lambda shard: shard_to_part(shard, fcols or None, lcols or None))
        rows = rdd.mapPartitions(put).collect()
    return [(rpickle.loads(blob), n) for blob, n in rows]


class RayWorkerGroup:
    """``num_workers`` Ray actors hosting a framework runner, started on first use.

    Args:
        runner_cls: the framework's :class:`~orca.core.engine.runner.Runner` subclass.
        spec: what the runner builds from.
        num_workers: actors to start.
        cpus_per_worker: CPUs each actor reserves (also its intra-op threads).
        timeout_s: bound on every wait for the actors.
    """

    def __init__(self, runner_cls: Any, spec: dict[str, Any], num_workers: int, cpus_per_worker: int,
                 timeout_s: float) -> None:
        self.runner_cls, self.spec = runner_cls, spec
        self.num_workers, self.cpus_per_worker, self.timeout_s = num_workers, cpus_per_worker, timeout_s
        self.actors: list[Any] = []
        self.store: Any = None
        #: (address refs, state) of actors launched and not yet joined
        self._starting: tuple[list[Any], Any] | None = None
        self._spark_put: list[Any] = []

    @property
    def started(self) -> bool:
        """True while the actors are alive."""
        return bool(self.actors)

    def start(self) -> None:
        """Start the actors and set up their process group (idempotent); waits until they are up."""
        self.launch()
        self._join()

    def launch(self, state: Any = None) -> None:
        """Begin starting the actors and return without waiting for them (idempotent).

        Actors take seconds to start (a process each, the framework's import); the data calls
        (``fit``, ``evaluate``, ``predict``) move their data into the object store meanwhile and
        then wait. ``state`` is loaded into every actor once they are up.
        """
        if self.actors:
            return
        from orca.core.context import OrcaContext

        runtime = OrcaContext.current().ray_runtime()
        ray = _ray()
        total = sum(runtime.cpus_per_node)
        if self.num_workers * self.cpus_per_worker > total:
            raise ValueError(
                f"{self.num_workers} workers x {self.cpus_per_worker} CPUs need more than the Ray cluster's "
                f"{total} CPUs; lower workers_per_node or add nodes."
            )
        need = self.num_workers * self.cpus_per_worker
        free = _free_cpus(need)
        if free < need:
            raise RuntimeError(
                f"Ray has {free:g} free CPUs but {self.num_workers} workers need {need}; other Ray work (often "
                "another Estimator's workers) holds the rest. Call shutdown() on Estimators you are done with."
            )
        # allgather store for runners without a collective of their own; lives with the group
        self.store = ray.remote(num_cpus=0)(_Store).remote(self.num_workers) if self.num_workers > 1 else None
        worker_cls = ray.remote(num_cpus=self.cpus_per_worker, max_concurrency=2)(_Worker)
        import cloudpickle

        # user classes (models, callbacks) travel by value; see orca.core.engine.runner
        spec_blob = cloudpickle.dumps(self.spec)
        self.actors = [worker_cls.remote(self.runner_cls, spec_blob, self.cpus_per_worker)
                       for _ in range(self.num_workers)]
        # every worker reserves a port: frameworks with a full cluster spec (TF_CONFIG) need them all
        self._starting = ([a.address.remote() for a in self.actors], state)

    def _join(self) -> None:
        """Wait for launched actors, then rendezvous them and load the launch state."""
        if self._starting is None:
            return
        refs, state = self._starting
        self._starting = None
        try:
            addrs = self._get(refs, "start")
            host, port, sync_port = addrs[0]
            extra = {"worker_addresses": [f"{h}:{p}" for h, p, _ in addrs], "sync_port": sync_port}
            rdvs = [Rendezvous(rank=r, world_size=self.num_workers, master_addr=host, master_port=port,
                               host=addrs[r][0], extra=extra) for r in range(self.num_workers)]
            self._get([a.setup.remote(rdv) for a, rdv in zip(self.actors, rdvs, strict=True)], "setup")
            if state is not None:
                self.set_state(state)
        except BaseException:
            self.shutdown()
            raise

    def _staged(self, *sources: tuple[DataSource | None, bool]) -> list[tuple[list[list[Slice]], list[int]]]:
        """Launch the actors (if they are not up) and slice each ``(source, need_labels)`` into the
        object store while they start.

        On a cold start both take seconds (Spark's Python workers join Ray; the actors import
        their framework), so they overlap; then this waits for the actors. A data error shuts
        down actors that were only launched; a start-up error lets go of the data.
        """
        self.launch()
        try:
            staged = [self.slices(src, need) for src, need in sources]
        except BaseException:
            if self._starting is not None:
                self.shutdown()
            raise
        try:
            self._join()
        except BaseException:
            self.release([s for slices, _ in staged for s in slices])
            raise
        return staged

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        """Wait for all refs; on the first failure or the deadline tear the group down and raise."""
        ray = _ray()
        deadline = time.monotonic() + self.timeout_s
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                self.shutdown()
                raise TimeoutError(f"Orca workers did not finish {what} within {self.timeout_s:.0f}s; "
                                   "the worker group was shut down.")
            done, pending = ray.wait(pending, num_returns=1, timeout=min(left, 5.0))
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - re-raised below with the worker's traceback
                    self.shutdown()
                    cause = getattr(exc, "cause", None) or exc
                    if isinstance(cause, _WorkerFailure):
                        raise OrcaWorkerError(f"Orca worker {cause.rank} failed during {what}: {cause.original}",
                                              rank=cause.rank, worker_traceback=cause.text) from None
                    raise OrcaWorkerError(f"Orca worker failed during {what}: {exc}",
                                          worker_traceback=str(exc)) from None
        return ray.get(refs)

    # ---------------------------------------------------------------- data
    def slices(self, source: DataSource | None, need_labels: bool) -> tuple[list[list[Slice]], list[int]]:
        """Place ``source`` in the object store and cut it into one row range per worker."""
        if source is None or source.kind == "creator":
            return [[] for _ in range(self.num_workers)], [0] * self.num_workers
        ray = _ray()
        refs: list[tuple[Any, int]]
        if source.kind == "local":
            refs = [(ray.put(p), part_rows(p)) for p in source.obj]
        elif source.kind == "dataframe" or (source.kind == "xshards" and hasattr(source.obj, "rdd")):
            refs = _spark_to_ray(source, need_labels)
            self._spark_put.extend(r for r, _ in refs)
        elif source.kind == "xshards":
            shards = source.obj
            fcols, lcols = source.feature_cols, source.label_cols if need_labels else None
            if hasattr(shards, "refs"):
                # num_cpus=0: the actors may hold every CPU
                conv = ray.remote(num_cpus=0)(lambda s: (lambda p: (p, part_rows(p)))(shard_to_part(s, fcols, lcols)))
                pairs = ray.get([conv.remote(r) for r in shards.refs])
                refs = [(ray.put(p), n) for p, n in pairs]
            else:
                refs = []
                for s in shards.collect():
                    p = shard_to_part(s, fcols, lcols)
                    refs.append((ray.put(p), part_rows(p)))
        elif source.kind == "ray_dataset":
            fcols = list(source.feature_cols or [])
            lcols = list(source.label_cols or []) if need_labels else []
            tables = source.obj.to_arrow_refs()  # materialized by the estimator before the actors start
            conv = ray.remote(num_returns=2, num_cpus=0)(lambda t: (lambda p: (p, part_rows(p)))(table_to_part(t, fcols, lcols)))
            pairs = [conv.remote(t) for t in tables]
            counts = ray.get([p[1] for p in pairs])
            refs = [(p[0], n) for p, n in zip(pairs, counts, strict=True)]
        else:  # pragma: no cover - the dispatcher only makes the kinds above
            raise TypeError(f"unsupported data kind {source.kind}")
        slices = balanced_slices(refs, self.num_workers)
        counts = [sum(hi - lo for _, lo, hi in s) for s in slices]
        return slices, counts

    def release(self, slices: list[list[Slice]]) -> None:
        """Let go of the objects behind ``slices``: the holder drops the ones Spark put there."""
        if self._spark_put:
            from orca.core.data._ray import HOLDER_NAMESPACE, holder_name

            ray = _ray()
            try:
                holder = ray.get_actor(holder_name(), namespace=HOLDER_NAMESPACE)
                ray.get(holder.release.remote(list(self._spark_put)), timeout=60)
            except Exception:  # noqa: BLE001 - best effort: the holder dies with the context anyway
                log.debug("could not release Spark-put objects", exc_info=True)
            self._spark_put = []

    # ---------------------------------------------------------------- calls
    def fit(self, source: DataSource, val_source: DataSource | None, args: FitArgs) -> list[dict[str, Any]]:
        """Run ``fit`` on every actor; return rank 0's merged history."""
        (slices, counts), (staged_val, _) = self._staged((source, True), (val_source, True))
        val_slices: list[list[Slice]] | None = staged_val if val_source is not None else None
        if val_source is not None and val_source.kind == "creator":
            args.val_creator, val_slices = val_source.obj, None
        if source.kind == "creator":
            args.creator = source.obj
        import uuid

        import cloudpickle

        args_blob = cloudpickle.dumps(args)
        key = uuid.uuid4().hex
        try:
            refs = [a.fit.remote(slices[r], val_slices[r] if val_slices else None, counts, self.store, key,
                                 args_blob, self.timeout_s) for r, a in enumerate(self.actors)]
            return self._get(refs, "fit")[0]
        finally:
            self.release(slices + (val_slices or []))

    def evaluate(self, source: DataSource, batch_size: int, metrics: Any) -> list[dict[str, Any]]:
        """Per-worker evaluation states (merge them with ``merge_eval_states``)."""
        ((slices, _),) = self._staged((source, True))
        creator = source.obj if source.kind == "creator" else None
        local_bs = max(1, batch_size // self.num_workers)
        import cloudpickle

        blob = cloudpickle.dumps((creator, metrics))
        try:
            return self._get([a.evaluate.remote(slices[r], blob, local_bs)
                              for r, a in enumerate(self.actors)], "evaluate")
        finally:
            self.release(slices)

    def predict(self, source: DataSource, batch_size: int) -> list[np.ndarray]:
        """Predict in the actors; outputs come back in the input's row order."""
        ((slices, _),) = self._staged((source, False))
        local_bs = max(1, batch_size // self.num_workers)
        try:
            outs = self._get([a.predict.remote(slices[r], local_bs) for r, a in enumerate(self.actors)], "predict")
        finally:
            self.release(slices)
        outs = [o for o in outs if o]
        if not outs:
            return []
        return [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]

    def get_state(self) -> dict[str, Any]:
        """Rank 0's state."""
        self.start()
        return self._get([self.actors[0].get_state.remote()], "get_state")[0]

    def set_state(self, state: dict[str, Any]) -> None:
        """Load ``state`` into every actor."""
        self.start()
        ray = _ray()
        ref = ray.put(state)
        self._get([a.set_state.remote(ref) for a in self.actors], "set_state")

    def weight_digests(self) -> list[str]:
        """Every actor's weight digest, by rank."""
        self.start()
        import cloudpickle

        return self._get([a.call.remote(cloudpickle.dumps(_digest)) for a in self.actors], "weights")

    def shutdown(self) -> None:
        """Kill the actors (no wait on a stuck one)."""
        if not self.actors:
            return
        ray = _ray()
        for actor in self.actors + ([self.store] if self.store is not None else []):
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors, self.store, self._starting = [], None, None
