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


class Rows(Protocol):
    """What the training loop reads a worker's share through: the in-memory :class:`Feed` or a
    share on disk (:class:`orca.core.engine.spill.DiskFeed`)."""

    num_rows: int

    def train_batches(self, counts: Sequence[int], rank: int, batch_size: int, epoch: int = 0,
                      shuffle: bool = True, seed: int = 0) -> Iterator[Batch]:
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

    def _take(self, idx: np.ndarray | slice) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return [a[idx] for a in self.x], [a[idx] for a in self.y]

    def train_batches(
        self,
        counts: Sequence[int],
        rank: int,
        batch_size: int,
        epoch: int = 0,
        shuffle: bool = True,
        seed: int = 0,
    ) -> Iterator[Batch]:
        """Yield this worker's batches of one training epoch, in lock-step with the others.

        Args:
            counts: rows held by every worker, indexed by rank (the same list everywhere).
            rank: this worker's rank.
            batch_size: the global batch size.
            epoch: epoch number (varies the shuffle).
            shuffle: shuffle the local rows each epoch.
            seed: base seed of the shuffle.
        """
        world = len(counts)
        total = int(sum(counts))
        steps = steps_per_epoch(total, batch_size)
        per_worker = [split_sizes(int(c), steps) for c in counts]
        mine = per_worker[rank]
        order: np.ndarray | None = None
        if shuffle and self.num_rows:
            order = np.random.default_rng([seed, epoch, rank]).permutation(self.num_rows)
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
