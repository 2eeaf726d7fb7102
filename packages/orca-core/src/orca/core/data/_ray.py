"""RayXShards: one Ray object per shard; and moving shards between Spark and Ray.

Spark -> Ray never passes data through the driver: each Spark task joins the running Ray
cluster and hands its shards to a long-lived *holder* actor that ``ray.put``s and keeps them
(so the objects outlive the Spark Python worker); only the refs travel back. There is one default
holder per Ray session, plus one pinned to each Ray node that Ray-on-Spark runs on an executor
(a task hands its data to its own executor's node); all are killed when this interpreter exits or
when its Orca context goes away.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from orca.core import _active
from orca.core._ray_auth import MODE_VAR, TOKEN_VAR, current_auth_env, refresh_ray_auth_cache
from orca.core._ray_node import executor_key
from orca.core.data import _structure as st
from orca.core.data._files import write_partition
from orca.core.data.shards import XShards, form_class, spark_context

if TYPE_CHECKING:
    from orca.core.data._local import LocalXShards
    from orca.core.data._spark import SparkXShards

HOLDER_NAMESPACE = "orca"
_holder_lock = threading.Lock()
_holder: dict[str, Any] = {}  # gcs address -> {"name", "handle"}


def ensure_ray() -> Any:
    """Return the ``ray`` module, connected through the active Orca context (or a new one)."""
    ctx = _active.active()
    if ctx is None:
        import ray

        if not ray.is_initialized():
            _active.start(runtime="ray").ray_runtime()
    else:
        ctx.ray_runtime()
    import ray

    return ray


@functools.cache
def _remote_cached(fn: Callable[..., Any]) -> Any:
    import ray

    return ray.remote(num_cpus=1, max_retries=0)(fn)


def remote(fn: Callable[..., Any]) -> Any:
    """``ray.remote`` version of a module-level function (cached). Its tasks need CPUs that warm
    workers of an Estimator shut down may hold: those end first (``release_warm_workers``)."""
    ensure_ray()
    _active.release_warm_workers()
    return _remote_cached(fn)


def _apply(shard: Any, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(shard, *args)


def _assemble(plan: list[tuple[int, int]], *sources: Any) -> Any:
    return st.concat_rows([st.slice_rows(s, a, b) for s, (a, b) in zip(sources, plan, strict=True)])


def _pair(a: Any, b: Any) -> tuple[Any, Any]:
    return (a, b)


def _write(shard: Any, path: str, index: int, safe: bool = False) -> int:
    return write_partition(path, index, [shard], safe)


class RayXShards(XShards, form="ray"):
    """Shards held in Ray's object store, one ObjectRef per shard (and per partition).

    Attributes:
        refs: the ObjectRefs, in partition order.
    """

    def __init__(self, refs: list[Any]) -> None:
        self.refs = list(refs)

    @classmethod
    def _from_shards(cls, shards: list[Any]) -> RayXShards:
        ray = ensure_ray()
        return cls([ray.put(s) for s in shards])

    @classmethod
    def _build(cls, fn: Callable[[Any], Any], items: list[Any]) -> RayXShards:
        task = remote(fn)
        return cls([task.remote(item) for item in items])

    @staticmethod
    def from_rdd(rdd: Any) -> RayXShards:
        """Put each element of a Spark ``rdd`` into Ray from its Spark task; only the refs reach the
        driver (:meth:`SparkXShards.to_ray <orca.core.data.SparkXShards.to_ray>`)."""
        return spark_rdd_to_ray(rdd)

    def transform_shard(self, fn: Callable[..., Any], *args: Any) -> RayXShards:
        """Apply ``fn(shard, *args)`` to every shard in Ray tasks (asynchronously)."""
        task = remote(_apply)
        return RayXShards([task.remote(ref, fn, *args) for ref in self.refs])

    def collect(self) -> list[Any]:
        """Fetch every shard (``ray.get``)."""
        return ensure_ray().get(self.refs)

    def num_partitions(self) -> int:
        """The number of refs."""
        return len(self.refs)

    def num_rows_per_partition(self) -> list[int]:
        """Rows in each shard, counted in Ray tasks."""
        # metadata only: no CPU, so it runs while an Estimator's actors hold every CPU
        task = remote(st.num_rows).options(num_cpus=0)
        return ensure_ray().get([task.remote(ref) for ref in self.refs])

    def repartition(self, num_partitions: int) -> RayXShards:
        """Re-split into balanced row ranges; each target is assembled in its own Ray task.

        Raises:
            ValueError: ``num_partitions`` < 1, or shards that cannot be split by rows and do
                not already number ``num_partitions``.
        """
        n = int(num_partitions)
        if n < 1:
            raise ValueError(f"num_partitions must be >= 1; got {num_partitions!r}.")
        if not self.refs:
            return RayXShards([])
        kind = self._first_map(st.shard_kind)
        if kind not in st.SPLITTABLE_KINDS:
            if n == len(self.refs):
                return RayXShards(self.refs)
            raise ValueError(
                f"cannot repartition {len(self.refs)} Ray shards of kind {kind!r} into {n}: a Ray "
                "partition holds exactly one shard and these cannot be split by rows."
            )
        plan = st.plan_repartition(self.num_rows_per_partition(), n)
        task = remote(_assemble)
        return RayXShards(
            [task.remote([(a, b) for _, a, b in pieces], *[self.refs[i] for i, _, _ in pieces]) for pieces in plan]
        )

    def zip(self, other: XShards) -> RayXShards:
        """Pair each shard with the matching shard of ``other`` (in Ray tasks)."""
        self._check_zip(other)
        task = remote(_pair)
        theirs = other.to_ray().refs
        return RayXShards([task.remote(a, b) for a, b in zip(self.refs, theirs, strict=True)])

    def cache(self) -> RayXShards:
        """No-op: objects stay in the object store while referenced."""
        return self

    def uncache(self) -> RayXShards:
        """No-op (drop this XShards to free its objects)."""
        return self

    def to_local(self) -> LocalXShards:
        """Fetch every shard into this process."""
        return form_class("local")(self.collect())

    def to_ray(self) -> RayXShards:
        """Return ``self``."""
        return self

    def to_spark(self) -> SparkXShards:
        """Move shards into an RDD: each Spark task fetches its shard from Ray itself."""
        import ray.cloudpickle as rpickle

        join = ray_join()
        blobs = [rpickle.dumps(ref) for ref in self.refs]
        rdd = spark_context().parallelize(blobs, max(1, len(blobs)))
        return form_class("spark")(rdd.mapPartitions(lambda it: _fetch_in_spark_task(join, it)))

    def _first_map(self, fn: Callable[[Any], Any]) -> Any:
        if not self.refs:
            raise IndexError("empty XShards")
        # a small check (input validation) on one shard: no CPU, as above
        return ensure_ray().get(remote(_apply).options(num_cpus=0).remote(self.refs[0], fn))

    def _write_shards(self, path: str, safe: bool = False) -> None:
        task = remote(_write)
        ensure_ray().get([task.remote(ref, path, i, safe) for i, ref in enumerate(self.refs)])


# ---------------------------------------------------------------------- Spark <-> Ray
def _ray_address() -> str:
    ensure_ray()
    ctx = _active.active()
    if ctx is not None:
        return ctx.ray_runtime().address
    import ray

    return ray.get_runtime_context().gcs_address


def ray_join() -> tuple[str, dict[str, str]]:
    """``(GCS address, auth environment)`` a Spark task needs to join this process's Ray."""
    address = _ray_address()
    ctx = _active.active()
    return address, (ctx.ray_join_env() if ctx is not None else current_auth_env())


def _connect_ray_in_task(address: str, auth: dict[str, str]) -> Any:
    """Join the Ray cluster at ``address`` from a Spark Python worker (once per worker), with the
    driver's Ray auth settings (``auth``: the worker was forked before the driver's Ray started)."""
    if any(os.environ.get(k) != auth.get(k) for k in (MODE_VAR, TOKEN_VAR)):
        os.environ.pop(TOKEN_VAR, None)
        os.environ.update(auth)
        refresh_ray_auth_cache()
    loopback = address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost")
    if loopback:
        # Ray rewrites a loopback address to the host's IP unless this is set (the driver
        # sets it before starting its loopback-bound Ray; this worker was forked earlier).
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray._private import ray_constants

    if ray.is_initialized():
        if ray.get_runtime_context().gcs_address == address:
            return ray
        ray.shutdown()
    _check_reachable(address)
    kwargs: dict[str, Any] = {}
    if loopback:
        ray_constants.ENABLE_RAY_CLUSTER = False  # read at import; ray may be imported already
        kwargs["_node_ip_address"] = "127.0.0.1"
    ray.init(
        address=address,
        namespace=HOLDER_NAMESPACE,
        log_to_driver=False,
        configure_logging=False,
        **kwargs,
    )
    return ray


def _check_reachable(address: str, timeout_s: float = 15.0) -> None:
    """Fail fast with the address named: ``ray.init`` retries an unreachable GCS for minutes."""
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(
            f"This Spark task cannot reach the Ray cluster at {address} ({exc}); Spark executors "
            "must be able to connect to Ray's GCS to move shards between Spark and Ray."
        ) from exc


def _put_in_spark_task(join: tuple[str, dict[str, str]], holders: dict[str, str],
                       it: Iterator[Any]) -> Iterator[bytes]:
    import ray.cloudpickle as rpickle

    ray = _connect_ray_in_task(*join)
    holder = ray.get_actor(local_holder(holders), namespace=HOLDER_NAMESPACE)
    pending = [holder.adopt.remote(shard) for shard in it]
    for nested in ray.get(pending):
        yield rpickle.dumps(nested[0])


def _fetch_in_spark_task(join: tuple[str, dict[str, str]], it: Iterator[bytes]) -> Iterator[Any]:
    import ray.cloudpickle as rpickle

    ray = _connect_ray_in_task(*join)
    for blob in it:
        yield ray.get(rpickle.loads(blob))


class _ShardHolder:
    """Owns objects sent by short-lived Spark workers, so they live as long as this actor.

    (``ray.put(..., _owner=)`` is gone since Ray 2.56, so the holder puts them itself.)
    """

    def __init__(self) -> None:
        self._kept: list[Any] = []

    def ping(self) -> bool:
        return True

    def adopt(self, shard: Any) -> list[Any]:
        import ray

        ref = ray.put(shard)
        self._kept.append(ref)
        return [ref]  # nested, so the caller borrows the holder's object instead of copying it

    def release(self, refs: list[Any]) -> int:
        """Stop holding ``refs`` (passed nested in a list, so as references); returns how many."""
        drop = set(refs)
        before = len(self._kept)
        self._kept = [r for r in self._kept if r not in drop]
        return before - len(self._kept)


def holder_name() -> str:
    """The name of this Ray session's default holder actor, starting it on first use."""
    return holder_names()[""]


def holder_names() -> dict[str, str]:
    """Holder actor names: ``""`` for the default holder, and for each Ray node that Ray-on-Spark
    started on an executor, the executor's key (see :func:`orca.core._ray_node.executor_key`) to
    the holder pinned to that node. A Spark task hands its data to its own executor's holder, so
    the data lands in the object store of the Ray node on the same executor."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray = ensure_ray()
    address = _ray_address()
    with _holder_lock:
        entry = _holder.get(address)
        if entry is not None:
            try:
                ray.get(entry["handle"].ping.remote(), timeout=30)
                return dict(entry["names"])
            except Exception:  # noqa: BLE001 - a dead holder (Ray restarted): make new ones
                _holder.pop(address, None)
        actor_cls = ray.remote(num_cpus=0, max_restarts=0)(_ShardHolder)
        prefix = f"orca-shard-holder-{uuid.uuid4().hex[:12]}"
        names, handles = {"": prefix}, [actor_cls.options(name=prefix, namespace=HOLDER_NAMESPACE).remote()]
        for key, node_id in _executor_nodes().items():
            names[key] = f"{prefix}-{key}"
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            handles.append(actor_cls.options(name=names[key], namespace=HOLDER_NAMESPACE,
                                             scheduling_strategy=strategy).remote())
        ray.get([h.ping.remote() for h in handles], timeout=60)
        _holder[address] = {"name": prefix, "names": names, "handle": handles[0], "handles": handles}
        _register_cleanup()
        return dict(names)


def _executor_nodes() -> dict[str, str]:
    """Executor key -> Ray node id of the nodes Ray-on-Spark runs (empty in other modes)."""
    ctx = _active.active()
    cluster = getattr(ctx, "_ray_on_spark", None) if ctx is not None else None
    return dict(cluster.nodes) if cluster is not None else {}


def local_holder(names: dict[str, str]) -> str:
    """In a Spark task: the holder on this executor's Ray node, or the default one."""
    if len(names) == 1:
        return names[""]
    return names.get(executor_key(), names[""])


def holder_handles() -> list[Any]:
    """Handles of every holder actor of this Ray session (none started yet: empty)."""
    with _holder_lock:
        entry = _holder.get(_ray_address())
        return list(entry["handles"]) if entry is not None else []


def release_holder() -> None:
    """Kill the holder actor(s) this process started, freeing the shards they own."""
    with _holder_lock:
        entries = list(_holder.values())
        _holder.clear()
    try:
        import ray

        if not ray.is_initialized():
            return
        for entry in entries:
            for handle in entry["handles"]:
                try:
                    ray.kill(handle)
                except Exception:  # noqa: BLE001 - already gone with its Ray session
                    pass
    except ImportError:
        return


_cleanup_registered: list[bool] = []


def _register_cleanup() -> None:
    """Kill the holder when the Orca context is collected or the interpreter exits.

    Ray also kills it when this driver disconnects (``stop_orca_context`` shuts Ray down),
    since the holder is not detached.
    """
    ctx = _active.active()
    if ctx is not None:
        weakref.finalize(ctx, release_holder)
    if not _cleanup_registered:
        atexit.register(release_holder)
        _cleanup_registered.append(True)


def spark_rdd_to_ray(rdd: Any) -> RayXShards:
    """Put each element of ``rdd`` into Ray from its Spark task; return the refs, in order."""
    import ray.cloudpickle as rpickle

    names = holder_names()
    join = ray_join()
    blobs = rdd.mapPartitions(lambda it: _put_in_spark_task(join, names, it)).collect()
    return RayXShards([rpickle.loads(b) for b in blobs])
