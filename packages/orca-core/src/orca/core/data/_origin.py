"""What the XShards of the file readers know of their files, and the lazy XShards that carry it.

``read_parquet``, ``read_csv`` and ``read_json`` return XShards that remember where their rows
come from (an *origin*: :class:`~orca.core.data._parquet.ParquetOrigin`,
:class:`~orca.core.data._text.TextOrigin`), in their ``origin`` attribute. An Estimator given
such XShards, untransformed, lets each of its workers read its own part of the files as Arrow
record batches (``origin.split`` and ``origin.batch_reader``) instead of moving pandas frames:
no worker, task or driver holds the data whole. Their pandas frames are read only when the
XShards are used as such (``collect``, ``transform_shard``, ...), whose results are ordinary
XShards that no longer know their files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orca.core.data._local import LocalXShards
from orca.core.data._ray import RayXShards
from orca.core.data._spark import SparkXShards


def file_origin(data: Any) -> Any | None:
    """Where an XShards came from (a Parquet or text origin), if it is an untransformed result of
    ``read_parquet``, ``read_csv`` or ``read_json``; else ``None``."""
    return getattr(data, "origin", None)


def first_lacking(columns: Sequence[tuple[str, Sequence[str]]], names: Sequence[str]
                  ) -> tuple[str, list[str], list[str]] | None:
    """``(file, names it lacks, its columns)`` for the first of ``(file, its columns)`` lacking one
    of ``names``; ``None`` when every file has them all."""
    for path, have in columns:
        lacking = [n for n in names if n not in have]
        if lacking:
            return path, lacking, list(have)
    return None


def balanced_cuts(weights: Sequence[int], world: int) -> list[tuple[int, int]]:
    """Cut ``weights`` (rows or bytes of consecutive pieces) into ``world`` contiguous runs, each cut
    at the piece boundary nearest to ``k / world`` of the total: ``(start, stop)`` indices per run.
    A run may be empty (fewer pieces than ``world``)."""
    bounds = [0]
    for w in weights:
        bounds.append(bounds[-1] + w)
    total = bounds[-1]
    cuts = [0]
    for k in range(1, world):
        target = total * k / world
        i = cuts[-1]
        while i + 1 < len(bounds) and abs(bounds[i + 1] - target) <= abs(bounds[i] - target):
            i += 1
        cuts.append(i)
    cuts.append(len(weights))
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def spark_shards(rdd: Any, origin: Any) -> SparkXShards:
    """A Spark XShards of ``rdd`` (frames read lazily, in Spark tasks) that knows its files (its
    ``origin`` attribute). Its type stays :class:`SparkXShards`: what is made from it
    (``transform_shard``, predictions) is an ordinary XShards."""
    shards = SparkXShards(rdd)
    shards.origin = origin  # type: ignore[attr-defined]
    return shards


class _Counted:
    """Partition counts without reading the frames where the origin knows them (Parquet footers)."""

    origin: Any

    def num_partitions(self) -> int:
        """The number of partitions (nothing is read)."""
        return int(self.origin.num_groups)

    def num_rows_per_partition(self) -> list[int]:
        """Rows in each partition: from the files' metadata where they have it (Parquet), else by
        reading the frames."""
        if self.origin.num_rows is not None:
            return list(self.origin.group_rows)
        return super().num_rows_per_partition()  # type: ignore[misc]


def _read_on_first_use(field: str, doc: str) -> Any:
    """A property over ``self._<field>``: the first get runs ``self._start()`` (the tasks or reads
    that make the partitions) and keeps its result; a set replaces it (nothing is read then)."""
    slot = "_" + field

    def get(self: Any) -> list[Any]:
        if self._start is not None:
            setattr(self, slot, list(self._start()))
            self._start = None
        return getattr(self, slot)

    def set_(self: Any, value: list[Any]) -> None:
        setattr(self, slot, list(value))
        self._start = None

    return property(get, set_, doc=doc)


class LazyRayXShards(_Counted, RayXShards):
    """Ray XShards of files that know their origin; the Ray tasks that read the frames start when
    the shards are first used (an Estimator's workers read the files instead).

    Attributes:
        origin: the files the partitions hold.
    """

    refs = _read_on_first_use("refs", "The ObjectRefs of the frames (the reading tasks start on first use).")

    def __init__(self, start: Callable[[], list[Any]], origin: Any) -> None:
        self._start: Callable[[], list[Any]] | None = start
        self._refs: list[Any] = []
        self.origin = origin


class LazyLocalXShards(_Counted, LocalXShards):
    """Local XShards of files that know their origin; the frames are read in this process when
    the shards are first used.

    Attributes:
        origin: the files the partitions hold.
    """

    shards = _read_on_first_use("shards", "The frames (read on first use).")

    def __init__(self, start: Callable[[], list[Any]], origin: Any) -> None:
        self._start: Callable[[], list[Any]] | None = start
        self._shards: list[Any] = []
        self.origin = origin
