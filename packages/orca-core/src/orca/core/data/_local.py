"""LocalXShards: shards kept in this process, one per partition (no cluster needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from orca.core.data import _structure as st
from orca.core.data._files import write_partition
from orca.core.data.shards import XShards

if TYPE_CHECKING:
    from orca.core.data._ray import RayXShards
    from orca.core.data._spark import SparkXShards


class LocalXShards(XShards, form="local"):
    """An in-process list of shards, one per partition.

    Attributes:
        shards: the shards, in partition order.
    """

    def __init__(self, shards: Sequence[Any]) -> None:
        self.shards = list(shards)

    @classmethod
    def _from_shards(cls, shards: list[Any]) -> LocalXShards:
        return cls(shards)

    @classmethod
    def _build(cls, fn: Callable[[Any], Any], items: list[Any]) -> LocalXShards:
        return cls([fn(item) for item in items])

    def transform_shard(self, fn: Callable[..., Any], *args: Any) -> LocalXShards:
        """Apply ``fn(shard, *args)`` to every shard (eagerly)."""
        return LocalXShards([fn(s, *args) for s in self.shards])

    def collect(self) -> list[Any]:
        """Return the shards (a new list)."""
        return list(self.shards)

    def num_partitions(self) -> int:
        """The number of shards."""
        return len(self.shards)

    def num_rows_per_partition(self) -> list[int]:
        """Rows in each shard."""
        return [st.num_rows(s) for s in self.shards]

    def repartition(self, num_partitions: int) -> LocalXShards:
        """Re-split into ``num_partitions`` shards of balanced row ranges.

        Raises:
            ValueError: ``num_partitions`` < 1, or shards that cannot be split by rows
                (other objects) and do not already number ``num_partitions``.
        """
        n = _check_n(num_partitions)
        if not self.shards:
            return LocalXShards([])
        kind = st.shard_kind(self.shards[0])
        if kind not in st.SPLITTABLE_KINDS:
            if n == len(self.shards):
                return LocalXShards(self.shards)
            raise ValueError(
                f"cannot repartition {len(self.shards)} local shards of type "
                f"{type(self.shards[0]).__name__} into {n}: a local partition holds exactly one "
                "shard and these cannot be split by rows."
            )
        counts = self.num_rows_per_partition()
        plan = st.plan_repartition(counts, n)
        return LocalXShards(
            [st.concat_rows([st.slice_rows(self.shards[i], a, b) for i, a, b in pieces]) for pieces in plan]
        )

    def zip(self, other: XShards) -> LocalXShards:
        """Pair each shard with the matching shard of ``other``."""
        self._check_zip(other)
        return LocalXShards(list(zip(self.shards, other.collect(), strict=True)))

    def cache(self) -> LocalXShards:
        """No-op: local shards are already in memory."""
        return self

    def uncache(self) -> LocalXShards:
        """No-op."""
        return self

    def to_local(self) -> LocalXShards:
        """Return ``self``."""
        return self

    def to_ray(self) -> RayXShards:
        """Put every shard into Ray's object store."""
        return XShards.from_list(self.shards, backend="ray")  # type: ignore[return-value]

    def to_spark(self) -> SparkXShards:
        """Parallelize the shards into an RDD, one per partition."""
        return XShards.from_list(self.shards, backend="spark")  # type: ignore[return-value]

    def _first_map(self, fn: Callable[[Any], Any]) -> Any:
        if not self.shards:
            raise IndexError("empty XShards")
        return fn(self.shards[0])

    def _write_shards(self, path: str, safe: bool = False) -> None:
        for i, shard in enumerate(self.shards):
            write_partition(path, i, [shard], safe)


def _check_n(num_partitions: int) -> int:
    n = int(num_partitions)
    if n < 1:
        raise ValueError(f"num_partitions must be >= 1; got {num_partitions!r}.")
    return n
