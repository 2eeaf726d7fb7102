"""A worker's share of the data, and the step plan that keeps every worker in lock-step.

Every worker of a training run takes exactly the same number of steps per epoch, whatever
its share of the data (including none at all): its rows are split into ``steps`` nearly
equal local batches, and each batch carries a loss weight so that averaging the gradients
over workers gives exactly the gradient of the global batch. That is why uneven, skewed
and empty partitions never hang a collective here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

#: ``(part or a reference to it, first row, end row)``: a contiguous row range of one part.
Slice = tuple[Any, int, int]


@dataclass
class Batch:
    """One local batch.

    Attributes:
        x: model inputs, one array per input.
        y: targets, one array per target (empty for prediction).
        size: rows in this batch (may be 0 on a worker whose share ran out).
        weight: multiply the batch's mean loss by this before averaging gradients over
            workers: ``size * world_size / global_batch_rows``.
        global_size: rows of the global batch this local batch belongs to.
    """

    x: list[np.ndarray]
    y: list[np.ndarray]
    size: int
    weight: float = 1.0
    global_size: int = 0


def split_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``np.array_split(range(n), parts)``."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def balanced_slices(refs: Sequence[tuple[Any, int]], world: int) -> list[list[Slice]]:
    """Cut the concatenation of parts into ``world`` contiguous row ranges, sized as
    ``np.array_split`` would (the first ``total % world`` ranges one row longer).

    Every launcher splits in-process data this way, so the same data gives every worker the
    same rows on every backend.

    Args:
        refs: ``(part or reference, rows)`` in order.
        world: number of workers.

    Returns:
        For each worker, the slices ``(ref, start, stop)`` it reads, in order.
    """
    total = sum(n for _, n in refs)
    bounds = [0]
    for size in split_sizes(total, world):
        bounds.append(bounds[-1] + size)
    out: list[list[Slice]] = [[] for _ in range(world)]
    offset = 0
    for ref, n in refs:
        for w in range(world):
            lo, hi = max(bounds[w], offset), min(bounds[w + 1], offset + n)
            if lo < hi:
                out[w].append((ref, lo - offset, hi - offset))
        offset += n
    return out


def cut_part(part: dict[str, list[np.ndarray]], start: int, stop: int) -> dict[str, list[np.ndarray]]:
    """Rows ``start:stop`` of a part (views, no copy)."""
    return {"x": [a[start:stop] for a in part["x"]], "y": [a[start:stop] for a in part["y"]]}


def steps_per_epoch(total_rows: int, batch_size: int) -> int:
    """Global steps for one pass over ``total_rows`` with global ``batch_size``."""
    return max(1, -(-total_rows // batch_size)) if total_rows > 0 else 0


#: what ``fit(shuffle=...)`` takes (see :func:`check_shuffle`)
SHUFFLE_MODES = (True, False, "full", "window")
#: chunks per shuffle window: the window shuffle takes each window from this many places of the share
CHUNKS_PER_WINDOW = 16
#: the smallest shuffle window, in bytes of rows
MIN_WINDOW_BYTES = 1 << 20


def check_shuffle(shuffle: Any) -> bool | str:
    """``shuffle`` if ``fit`` takes it, else a ``ValueError`` naming the choices.

    ``True`` shuffles as the share allows: exactly (a permutation of every row) while it is in
    memory, by windows once it is on disk; ``"full"`` is the exact shuffle always (a share on
    disk is then read row by row in the permutation's order: exact, slower); ``"window"`` is
    the window shuffle always (chunks of rows in a random order, rows shuffled within a window
    of chunks); ``False`` keeps each worker's rows in order.
    """
    if isinstance(shuffle, bool) or (isinstance(shuffle, str) and shuffle in ("full", "window")):
        return shuffle
    raise ValueError(f"shuffle={shuffle!r} is not a shuffle mode: use True (exact while a worker's share is in "
                     "memory, by windows once it is on disk), 'full' (exact always), 'window' (by windows "
                     "always) or False (rows in order).")


def window_rows(row_bytes: int, window_bytes: int) -> int:
    """Rows of one shuffle window: as many rows of ``row_bytes`` as ``window_bytes`` holds (at least one)."""
    return max(1, int(window_bytes) // max(1, int(row_bytes)))


def window_plan(num_rows: int, rows_per_window: int, rng: np.random.Generator
                ) -> Iterator[tuple[list[tuple[int, int]], np.ndarray]]:
    """The window shuffle of ``num_rows`` rows: chunks of ``rows_per_window //``
    :data:`CHUNKS_PER_WINDOW` rows in a random order, grouped into windows; for each window, its
    chunks' ``(start, stop)`` spans and where each of its rows goes (``places[k]``: the position
    in the window of the window's ``k``-th row, counted through its spans in order)."""
    window = max(1, rows_per_window)
    chunk = max(1, window // CHUNKS_PER_WINDOW)
    per_window = max(1, window // chunk)
    starts = np.arange(0, num_rows, chunk)[rng.permutation(-(-num_rows // chunk))]
    for w in range(0, len(starts), per_window):
        spans = [(int(a), min(num_rows, int(a) + chunk)) for a in starts[w:w + per_window]]
        yield spans, rng.permutation(sum(b - a for a, b in spans))


def window_order(num_rows: int, rows_per_window: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of one epoch under the window shuffle, in order (the order a share on disk is read
    in, as indices: an in-memory share shuffled by windows yields the same batches)."""
    orders = []
    for spans, places in window_plan(num_rows, rows_per_window, rng):
        order = np.empty(len(places), np.int64)
        order[places] = np.concatenate([np.arange(a, b) for a, b in spans])
        orders.append(order)
    return np.concatenate(orders) if orders else np.zeros(0, np.int64)


class Rows(Protocol):
    """What the training loop reads a worker's share through: the in-memory :class:`Feed` or a
    share on disk (:class:`orca.core.engine.spill.DiskFeed`)."""

    num_rows: int

    def train_batches(self, counts: Sequence[int], rank: int, batch_size: int, epoch: int = 0,
                      shuffle: bool | str = True, seed: int = 0, window_bytes: int = MIN_WINDOW_BYTES
                      ) -> Iterator[Batch]:
        """This worker's batches of one training epoch, in lock-step with the others."""

    def batches(self, batch_size: int) -> Iterator[Batch]:
        """Consecutive batches of at most ``batch_size`` rows."""


class Feed:
    """The rows one worker holds: inputs ``x`` and targets ``y`` as lists of numpy arrays.

    Args:
        x: inputs, one array per model input, all with the same first dimension.
        y: targets (may be empty for prediction).
    """

    def __init__(self, x: Sequence[np.ndarray], y: Sequence[np.ndarray] = ()) -> None:
        self.x = list(x)
        self.y = list(y)
        lengths = {len(a) for a in self.x + self.y}
        if len(lengths) > 1:
            raise ValueError(f"inputs and targets have different numbers of rows: {sorted(lengths)}")
        self.num_rows = lengths.pop() if lengths else 0

    @classmethod
    def concat(cls, parts: Sequence[dict[str, list[np.ndarray]]]) -> Feed:
        """Join normalised parts (``{"x": [...], "y": [...]}``) into one feed."""
        parts = [p for p in parts if p is not None]
        if not parts:
            return cls([], [])
        nx, ny = len(parts[0]["x"]), len(parts[0].get("y") or [])
        x = [np.concatenate([p["x"][i] for p in parts]) for i in range(nx)]
        y = [np.concatenate([p["y"][i] for p in parts]) for i in range(ny)]
        return cls(x, y)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row over every array."""
        return int(sum(a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64)) for a in self.x + self.y))

    def _take(self, idx: np.ndarray | slice) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return [a[idx] for a in self.x], [a[idx] for a in self.y]

    def train_batches(
        self,
        counts: Sequence[int],
        rank: int,
        batch_size: int,
        epoch: int = 0,
        shuffle: bool | str = True,
        seed: int = 0,
        window_bytes: int = MIN_WINDOW_BYTES,
    ) -> Iterator[Batch]:
        """Yield this worker's batches of one training epoch, in lock-step with the others.

        Args:
            counts: rows held by every worker, indexed by rank (the same list everywhere).
            rank: this worker's rank.
            batch_size: the global batch size.
            epoch: epoch number (varies the shuffle).
            shuffle: how to shuffle the local rows each epoch (:func:`check_shuffle`; ``True``: exactly).
            seed: base seed of the shuffle.
            window_bytes: bytes of rows in one window of the window shuffle.
        """
        world = len(counts)
        total = int(sum(counts))
        steps = steps_per_epoch(total, batch_size)
        per_worker = [split_sizes(int(c), steps) for c in counts]
        mine = per_worker[rank]
        order: np.ndarray | None = None
        rng = np.random.default_rng([seed, epoch, rank])
        if shuffle == "window" and self.num_rows:
            order = window_order(self.num_rows, window_rows(self.row_bytes, window_bytes), rng)
        elif shuffle and self.num_rows:
            order = rng.permutation(self.num_rows)
        start = 0
        for step in range(steps):
            size = mine[step]
            global_size = sum(w[step] for w in per_worker)
            idx: np.ndarray | slice = (
                order[start : start + size] if order is not None else slice(start, start + size)
            )
            start += size
            x, y = self._take(idx)
            weight = size * world / global_size if global_size else 0.0
            yield Batch(x=x, y=y, size=size, weight=weight, global_size=global_size)

    def batches(self, batch_size: int) -> Iterator[Batch]:
        """Yield consecutive batches of at most ``batch_size`` rows (evaluation, prediction)."""
        for start in range(0, self.num_rows, max(1, batch_size)):
            sl = slice(start, start + batch_size)
            x, y = self._take(sl)
            n = len(x[0]) if x else 0
            yield Batch(x=x, y=y, size=n, global_size=n)
