"""A worker's share of the data that need not fit in its memory.

A worker collects its share as it streams in (one Arrow record batch after another) with a
:class:`FeedBuilder`. Up to ``memory_bytes`` it keeps the rows in memory and hands out the
in-memory :class:`~orca.core.engine.feed.Feed` (a full shuffle each epoch, as always). Past
that it writes them, and everything after, to one raw file per array on the worker's local
disk, and hands out a :class:`DiskFeed`, which reads a window at a time: the worker's memory
then depends on the batch and window sizes, never on the size of the data.

A :class:`DiskFeed` takes the same lock-step plan as a ``Feed`` (the same number of steps on
every rank, the same local batch sizes, the same loss weights), so global batches stay exact.
Without shuffling it yields exactly the batches of the in-memory feed. With shuffling it
shuffles the order of fixed-size chunks of rows, then the rows within a window of chunks (an
approximation of a full shuffle, like the shuffle buffers of ``tf.data`` and Ray Data): every
row is seen once per epoch, the order changes with the epoch and the seed and is the same for
the same seed.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from orca.core.engine.addrspace import share_memory_bytes
from orca.core.engine.feed import (
    MIN_WINDOW_BYTES,
    Batch,
    Feed,
    split_sizes,
    steps_per_epoch,
    window_plan,
    window_rows,
)

Part = dict[str, list[np.ndarray]]
T = TypeVar("T")

log = logging.getLogger(__name__)

#: the most of a share's file mapped at once when rows are gathered (``shuffle="full"`` from disk)
MAP_BYTES = 64 << 20

def spill_dir() -> str:
    """Where a worker writes a spilled share: ``ORCA_SPILL_DIR``, else Spark's first local
    directory on an executor (``SPARK_LOCAL_DIRS``), else the system's temporary directory."""
    for var in ("ORCA_SPILL_DIR", "SPARK_LOCAL_DIRS"):
        first = os.environ.get(var, "").split(",")[0]
        if first:
            return first
    return tempfile.gettempdir()


@dataclass
class _Column:
    """One array of the share on disk: its file, dtype and the shape of one row."""

    path: str
    dtype: np.dtype
    row_shape: tuple[int, ...]

    @property
    def row_items(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64))

    @property
    def row_bytes(self) -> int:
        return self.row_items * self.dtype.itemsize

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (a fresh array: the file is read, not mapped)."""
        n = max(0, stop - start)
        flat = np.fromfile(self.path, dtype=self.dtype, count=n * self.row_items, offset=start * self.row_bytes)
        return flat.reshape((n, *self.row_shape))

    def take(self, rows: np.ndarray, num_rows: int) -> np.ndarray:
        """The rows at ``rows`` (any order), gathered from the file mapped read-only, a region of
        at most :data:`MAP_BYTES` at a time: the page cache holds what is read, not the Python
        heap, and the address space stays bounded (Spark's ``spark.executor.pyspark.memory``
        limits it) whatever the file's size."""
        out = np.empty((len(rows), *self.row_shape), self.dtype)
        if not len(rows):
            return out
        order = np.argsort(rows, kind="stable")
        wanted = np.asarray(rows)[order]
        span = max(1, MAP_BYTES // max(1, self.row_bytes))  # rows of one mapped region
        regions = wanted // span
        for seg in np.split(np.arange(len(wanted)), np.flatnonzero(np.diff(regions)) + 1):
            first = int(regions[seg[0]]) * span
            mapped = np.memmap(self.path, dtype=self.dtype, mode="r", offset=first * self.row_bytes,
                               shape=(min(num_rows, first + span) - first, *self.row_shape))
            out[order[seg]] = mapped[wanted[seg] - first]
            del mapped
        return out


def _part_rows(part: Part) -> int:
    arrays = part["x"] + part.get("y", [])
    return len(arrays[0]) if arrays else 0


def part_bytes(part: Part) -> int:
    """Bytes of the arrays of ``part``."""
    return sum(int(a.nbytes) for a in part["x"] + part.get("y", []))


class FeedBuilder(Generic[T]):
    """Collect a worker's share as it arrives; in memory up to ``memory_bytes``, then on disk.

    Items are whatever the data comes as (Arrow record batches, parts); the builder keeps them
    as they are while they fit, so the in-memory path converts them once, all together, as it
    always did. Once they pass ``memory_bytes``, each item is converted and written on its own.

    Args:
        memory_bytes: the most bytes of items kept in memory (``None``: no limit, always a
            :class:`Feed`), lowered under an address-space limit to what fits in it (see
            :func:`orca.core.engine.addrspace.share_memory_bytes`).
        to_feed: the in-memory feed of the items kept (default: :meth:`Feed.concat` of parts).
        to_part: one item as a part (default: the item is a part).
        directory: where a spilled share goes (default :func:`spill_dir`).
    """

    def __init__(self, memory_bytes: int | None, to_feed: Callable[[list[T]], Feed] | None = None,
                 to_part: Callable[[T], Part] | None = None, directory: str | None = None) -> None:
        self.memory_bytes = share_memory_bytes(memory_bytes)
        self.to_feed: Callable[[list[T]], Feed] = to_feed or Feed.concat  # type: ignore[assignment]
        self.to_part: Callable[[T], Part] = to_part or (lambda item: item)  # type: ignore[assignment, return-value]
        self.directory = directory
        self._items: list[T] = []
        self._held = 0
        self._disk: DiskFeed | None = None

    def add(self, item: T, nbytes: int) -> None:
        """Take one item of ``nbytes`` bytes."""
        if self._disk is not None:
            self._write(self.to_part(item))
            return
        self._items.append(item)
        self._held += int(nbytes)
        if self.memory_bytes is not None and self._held > self.memory_bytes:
            first = self.to_part(self._items[0])  # converted once: checked, then written
            if any(a.dtype == object for a in first["x"] + first.get("y", [])):
                # Python objects (strings) have no raw layout on disk: the share stays in memory
                log.warning("this worker's share is over worker_data_memory_mb=%.0f but has columns of Python "
                            "objects (strings), which cannot go to disk: it stays in memory.",
                            self.memory_bytes / (1 << 20))
                self.memory_bytes = None
                return
            rest, self._items, self._held = self._items[1:], [], 0
            self._write(first)
            for it in rest:
                self._write(self.to_part(it))

    def _write(self, part: Part) -> None:
        if _part_rows(part) == 0:
            return
        if self._disk is None:
            window = shuffle_window_bytes(self.memory_bytes)
            self._disk = DiskFeed.create(part, self.directory or spill_dir(), window_bytes=window)
        self._disk.append(part)

    def finish(self) -> Feed | DiskFeed:
        """The share: a :class:`Feed` when it stayed in memory, else the :class:`DiskFeed`."""
        if self._disk is not None:
            return self._disk
        return self.to_feed(self._items)


def shuffle_window_bytes(memory_bytes: int | None) -> int:
    """Bytes of rows in one window of the window shuffle, for a worker given ``memory_bytes``
    (``worker_data_memory_mb``): a quarter of it, at least :data:`MIN_WINDOW_BYTES`."""
    return max(MIN_WINDOW_BYTES, (memory_bytes or 0) // 4)


def close_feeds(*feeds: object) -> None:
    """Remove the files of the :class:`DiskFeed` among ``feeds`` (others are left alone)."""
    for f in feeds:
        if isinstance(f, DiskFeed):
            f.close()


def feed_memory_bytes() -> int:
    """The running context's ``worker_data_memory_mb`` in bytes (on the driver); ``math.inf``
    (``train_data_store="DRAM"``) is ``sys.maxsize``: every share stays in memory."""
    from orca.core import _active

    memory_mb = _active.current().settings.worker_data_memory_mb
    return sys.maxsize if memory_mb == float("inf") else int(memory_mb * (1 << 20))


def arrow_feed_builder(feature_cols: Sequence[str], label_cols: Sequence[str], memory_bytes: int | None
                       ) -> FeedBuilder[Any]:
    """A :class:`FeedBuilder` of Arrow record batches with the named columns: kept as Arrow and
    converted at once while they fit, converted batch by batch and written past that."""
    import pyarrow as pa

    from orca.core.engine.convert import table_to_part

    def to_feed(batches: list[Any]) -> Feed:
        if not batches:
            return Feed([], [])
        part = table_to_part(pa.Table.from_batches(batches), feature_cols, label_cols)
        # one copy of the rows: a column of several batches was joined into a new array already; a
        # view of one batch's Arrow buffer (read-only) is copied
        return Feed(*([a if a.flags.writeable else a.copy() for a in part[k]] for k in ("x", "y")))

    return FeedBuilder(memory_bytes, to_feed, lambda b: table_to_part(b, feature_cols, label_cols))


def _cut(blocks: Iterator[tuple[list[np.ndarray], list[np.ndarray]]], sizes: Sequence[int],
         empty: tuple[list[np.ndarray], list[np.ndarray]]) -> Iterator[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Cut a stream of row blocks into consecutive pieces of ``sizes`` rows (``empty``: the
    zero-row columns, for a piece of no rows). A piece inside one block is a view of it; only a
    piece that spans blocks is copied (its own rows, not the blocks)."""
    queue: list[tuple[list[np.ndarray], list[np.ndarray]]] = []  # blocks not yet used up, as views
    held = 0
    for size in sizes:
        while held < size:
            nxt = next(blocks, None)
            if nxt is None:
                raise ValueError(f"the data ran out: a step needs {size} rows, {held} are left")
            queue.append(nxt)
            held += len(nxt[0][0] if nxt[0] else nxt[1][0])
        if size == 0:
            yield empty
            continue
        pieces = []
        need = size
        while need:
            x, y = queue[0]
            n = len(x[0] if x else y[0])
            take = min(n, need)
            pieces.append(([a[:take] for a in x], [a[:take] for a in y]))
            if take == n:
                queue.pop(0)
            else:
                queue[0] = ([a[take:] for a in x], [a[take:] for a in y])
            need -= take
        held -= size
        if len(pieces) == 1:
            yield pieces[0]
        else:
            yield ([np.concatenate([p[0][i] for p in pieces]) for i in range(len(empty[0]))],
                   [np.concatenate([p[1][i] for p in pieces]) for i in range(len(empty[1]))])


class DiskFeed:
    """The rows one worker holds, on its local disk (see the module docstring).

    Build it with :class:`FeedBuilder`; the folder is removed by :meth:`close` or when the
    feed is garbage collected.

    Args:
        folder: the folder of the files (owned by this feed).
        x: the input columns.
        y: the target columns.
        window_rows: rows of one shuffle window (default: what ``window_bytes`` holds).
        window_bytes: bytes of one shuffle window, when ``window_rows`` is not given.
    """

    def __init__(self, folder: str, x: list[_Column], y: list[_Column], window_bytes: int = 256 << 20,
                 window_rows: int | None = None) -> None:
        self.folder = folder
        self.x, self.y = x, y
        self.num_rows = 0
        self.window_bytes = window_bytes
        self._window_rows = window_rows
        self._finalizer = weakref.finalize(self, shutil.rmtree, folder, True)

    @classmethod
    def create(cls, first: Part, directory: str, window_bytes: int = 256 << 20) -> DiskFeed:
        """An empty feed whose columns have the dtypes and row shapes of ``first``."""
        os.makedirs(directory, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="orca-feed-", dir=directory)

        def columns(kind: str) -> list[_Column]:
            cols = []
            for i, a in enumerate(first.get(kind, [])):
                path = os.path.join(folder, f"{kind}{i}.bin")
                open(path, "wb").close()
                cols.append(_Column(path, np.dtype(a.dtype), tuple(a.shape[1:])))
            return cols

        return cls(folder, columns("x"), columns("y"), window_bytes=window_bytes)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row, all columns."""
        return sum(c.row_bytes for c in self.x + self.y)

    @property
    def window_rows(self) -> int:
        """Rows of one shuffle window."""
        if self._window_rows is not None:
            return max(1, self._window_rows)
        return window_rows(self.row_bytes, self.window_bytes)

    def append(self, part: Part) -> None:
        """Write the rows of ``part`` after the rows already here."""
        for kind, cols in (("x", self.x), ("y", self.y)):
            arrays = part.get(kind, [])
            if len(arrays) != len(cols):
                raise ValueError(f"a part with {len(arrays)} {kind} arrays cannot join a share of {len(cols)}")
            for i, (col, a) in enumerate(zip(cols, arrays, strict=True)):
                if tuple(a.shape[1:]) != col.row_shape:
                    raise ValueError(f"{kind} array {i} has rows of shape {tuple(a.shape[1:])} here and "
                                     f"{col.row_shape} in the rows before: every row of a column must have "
                                     "the same shape (pad or cut the arrays before fit/evaluate/predict).")
                if not np.can_cast(a.dtype, col.dtype, "safe"):
                    raise ValueError(f"{kind} array {i} is {a.dtype} here and {col.dtype} in the rows before: give "
                                     "every part of the data the same dtype (cast it before fit/evaluate/predict).")
                with open(col.path, "ab") as fh:
                    np.ascontiguousarray(a, dtype=col.dtype).tofile(fh)
        self.num_rows += _part_rows(part)

    def close(self) -> None:
        """Remove the files (the feed cannot be read after)."""
        self._finalizer()

    def read(self, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Rows ``start:stop`` of every column."""
        return [c.read(start, stop) for c in self.x], [c.read(start, stop) for c in self.y]

    def _sequential(self, step_rows: int) -> Iterator[tuple[list[np.ndarray], list[np.ndarray]]]:
        for start in range(0, self.num_rows, max(1, step_rows)):
            yield self.read(start, min(self.num_rows, start + step_rows))

    def _shuffled(self, rng: np.random.Generator) -> Iterator[tuple[list[np.ndarray], list[np.ndarray]]]:
        """Windows of chunks taken in a random order, each window's rows shuffled (each chunk is
        read straight into its rows' shuffled places: one copy); the plan is
        :func:`~orca.core.engine.feed.window_plan`'s, which an in-memory feed follows too."""
        for spans, places in window_plan(self.num_rows, self.window_rows, rng):
            total = len(places)
            out = [np.empty((total, *c.row_shape), c.dtype) for c in self.x + self.y]
            at = 0
            for a, b in spans:
                dest = places[at:at + b - a]
                for arr, col in zip(out, self.x + self.y, strict=True):
                    arr[dest] = col.read(a, b)
                at += b - a
            yield out[:len(self.x)], out[len(self.x):]

    def train_batches(self, counts: Sequence[int], rank: int, batch_size: int, epoch: int = 0,
                      shuffle: bool | str = True, seed: int = 0, window_bytes: int = MIN_WINDOW_BYTES
                      ) -> Iterator[Batch]:
        """This worker's batches of one training epoch, in lock-step with the others (the plan
        of :meth:`Feed.train_batches <orca.core.engine.feed.Feed.train_batches>`). ``shuffle=True``
        is the window shuffle here (``"window"``; its window is this feed's :attr:`window_rows`,
        ``window_bytes`` is the in-memory feed's); ``"full"`` reads the rows in the order of the
        in-memory feed's exact shuffle (the same batches, gathered from the mapped files)."""
        world = len(counts)
        steps = steps_per_epoch(int(sum(counts)), batch_size)
        per_worker = [split_sizes(int(c), steps) for c in counts]
        mine = per_worker[rank]
        rng = np.random.default_rng([seed, epoch, rank])
        if shuffle == "full":
            pieces = self._gathered(rng.permutation(self.num_rows), mine)
        elif shuffle:
            pieces = _cut(self._shuffled(rng), mine, self.read(0, 0))
        else:
            pieces = _cut(self._sequential(max(1, self.window_rows)), mine, self.read(0, 0))
        for step in range(steps):
            size = mine[step]
            global_size = sum(w[step] for w in per_worker)
            x, y = next(pieces)
            weight = size * world / global_size if global_size else 0.0
            yield Batch(x=x, y=y, size=size, weight=weight, global_size=global_size)

    def _gathered(self, order: np.ndarray, sizes: Sequence[int]
                  ) -> Iterator[tuple[list[np.ndarray], list[np.ndarray]]]:
        """Consecutive pieces of ``sizes`` rows of ``order``, each gathered from every column."""
        start = 0
        for size in sizes:
            rows = order[start:start + size]
            start += size
            yield ([c.take(rows, self.num_rows) for c in self.x], [c.take(rows, self.num_rows) for c in self.y])

    def batches(self, batch_size: int) -> Iterator[Batch]:
        """Consecutive batches of at most ``batch_size`` rows (evaluation, prediction)."""
        for x, y in self._sequential(max(1, batch_size)):
            n = len(x[0]) if x else len(y[0])
            yield Batch(x=x, y=y, size=n, global_size=n)
