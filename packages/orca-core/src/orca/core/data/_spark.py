"""SparkXShards: shards held in a Spark RDD (usually one shard per partition)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from orca.core.data import _structure as st
from orca.core.data._files import write_partition
from orca.core.data.shards import XShards, form_class, spark_context

if TYPE_CHECKING:
    from orca.core.data._local import LocalXShards
    from orca.core.data._ray import RayXShards


class SparkXShards(XShards, form="spark"):
    """Shards held as the elements of a Spark RDD.

    Attributes:
        rdd: the RDD; each element is one shard.
    """

    def __init__(self, rdd: Any) -> None:
        self.rdd = rdd

    @classmethod
    def _from_shards(cls, shards: list[Any]) -> SparkXShards:
        return cls(spark_context().parallelize(shards, max(1, len(shards))))

    @classmethod
    def _build(cls, fn: Callable[[Any], Any], items: list[Any]) -> SparkXShards:
        return cls(spark_context().parallelize(items, len(items)).map(fn))

    def transform_shard(self, fn: Callable[..., Any], *args: Any) -> SparkXShards:
        """Apply ``fn(shard, *args)`` to every shard, lazily (a Spark ``map``)."""
        return SparkXShards(self.rdd.map(lambda shard: fn(shard, *args), preservesPartitioning=True))

    def collect(self) -> list[Any]:
        """Return all shards to the driver."""
        return self.rdd.collect()

    def num_partitions(self) -> int:
        """The RDD's partition count."""
        return int(self.rdd.getNumPartitions())

    def num_rows_per_partition(self) -> list[int]:
        """Rows in each partition, counted in Spark tasks."""
        return self.rdd.mapPartitions(lambda it: [sum(st.num_rows(s) for s in it)]).collect()

    def repartition(self, num_partitions: int) -> SparkXShards:
        """Re-split into ``num_partitions`` partitions of one shard each (see ``XShards``).

        Splittable shards are sliced where they live and shuffled only by the slices each
        target needs; other objects go through ``RDD.repartition``.
        """
        n = int(num_partitions)
        if n < 1:
            raise ValueError(f"num_partitions must be >= 1; got {num_partitions!r}.")
        try:
            kind = self._first_map(st.shard_kind)
        except IndexError:
            return SparkXShards(self.rdd.repartition(n))
        if kind not in st.SPLITTABLE_KINDS:
            return SparkXShards(self.rdd.repartition(n))
        per_part = self.rdd.mapPartitions(lambda it: [[st.num_rows(s) for s in it]]).collect()
        counts = [c for part in per_part for c in part]
        first_index = [0]
        for part in per_part:
            first_index.append(first_index[-1] + len(part))
        plan = st.plan_repartition(counts, n)
        # source element -> [(target, start, stop)], shipped to the tasks (small: O(n + shards))
        by_source: dict[int, list[tuple[int, int, int]]] = {}
        for target, pieces in enumerate(plan):
            for src, a, b in pieces:
                by_source.setdefault(src, []).append((target, a, b))

        def emit(pidx: int, it: Iterator[Any]) -> Iterator[tuple[int, tuple[int, Any]]]:
            for j, shard in enumerate(it):
                src = first_index[pidx] + j
                for target, a, b in by_source.get(src, []):
                    yield target, (src, st.slice_rows(shard, a, b))

        def assemble(it: Iterator[tuple[int, tuple[int, Any]]]) -> Iterator[Any]:
            pieces = sorted((item for _, item in it), key=lambda p: p[0])
            if pieces:
                yield st.concat_rows([p for _, p in pieces])

        shuffled = self.rdd.mapPartitionsWithIndex(emit).partitionBy(n, lambda k: k)
        return SparkXShards(shuffled.mapPartitions(assemble, preservesPartitioning=True))

    def zip(self, other: XShards) -> SparkXShards:
        """Pair shards with ``other``'s (both must hold the same shards per partition)."""
        self._check_zip(other)
        return SparkXShards(self.rdd.zip(other.to_spark().rdd))

    def cache(self) -> SparkXShards:
        """Persist the RDD in memory."""
        self.rdd.cache()
        return self

    def uncache(self) -> SparkXShards:
        """Unpersist the RDD."""
        self.rdd.unpersist()
        return self

    def to_local(self) -> LocalXShards:
        """Collect every shard into this process."""
        return form_class("local")(self.collect())

    def to_ray(self) -> RayXShards:
        """Put each shard into Ray from the Spark task holding it; only refs reach the driver."""
        return form_class("ray").from_rdd(self.rdd)

    def to_spark(self) -> SparkXShards:
        """Return ``self``."""
        return self

    def _first_map(self, fn: Callable[[Any], Any]) -> Any:
        out = self.rdd.mapPartitions(lambda it: [fn(s) for s in _first(it)]).take(1)
        if not out:
            raise IndexError("empty XShards")
        return out[0]

    def _write_shards(self, path: str, safe: bool = False) -> None:
        self.rdd.mapPartitionsWithIndex(lambda i, it: [write_partition(path, i, list(it), safe)]).collect()


def _first(it: Iterator[Any]) -> list[Any]:
    for item in it:
        return [item]
    return []
