"""Rows a worker reads itself, where it runs (:class:`WorkerRead`), instead of rows sent to it.

A data source (:mod:`orca.core.engine.sources`) hands each worker one of these; the launchers
(:mod:`orca.core.engine.spark_backend`, :mod:`orca.core.engine.ray_backend`) recognise it and let
the worker stream its rows. It lives below both, so neither needs the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


class WorkerRead:
    """Rows a worker reads itself, where it runs: row groups of Parquet files, or CSV / JSON-lines
    files (or every n-th chunk of them), as Arrow batches.

    Small and picklable: this is what travels to the worker instead of its rows.

    Args:
        pieces: what to read, in order (:class:`orca.core.data._parquet.Piece`,
            :class:`orca.core.data._text.TextPiece`).
        feature_cols: input column names.
        label_cols: target column names (empty for prediction).
        reader: ``reader(pieces, columns)`` -> Arrow batches (the origin's ``batch_reader()``);
            default: Parquet row groups.
    """

    def __init__(self, pieces: Sequence[Any], feature_cols: Sequence[str], label_cols: Sequence[str],
                 reader: Callable[[Sequence[Any], Sequence[str]], Iterator[Any]] | None = None) -> None:
        self.pieces = list(pieces)
        self.feature_cols, self.label_cols = list(feature_cols), list(label_cols)
        self.reader = reader

    @property
    def num_rows(self) -> int | None:
        """Rows to read, from the files' metadata (Parquet footers); ``None`` where only reading
        them tells (CSV, JSON)."""
        rows = [p.rows for p in self.pieces]
        return None if any(r is None for r in rows) else sum(rows)

    def batches(self) -> Iterator[Any]:
        """The rows as Arrow record batches, in order, with the named columns only."""
        from orca.core.data._parquet import read_batches

        return (self.reader or read_batches)(self.pieces, list(dict.fromkeys(self.feature_cols + self.label_cols)))

    def fill(self, memory_bytes: int | None) -> Any:
        """Read the rows into a new :func:`~orca.core.engine.spill.arrow_feed_builder` (in memory up
        to ``memory_bytes``, then on local disk, one batch at a time) and return it, unfinished."""
        from orca.core.engine.liveness import beat
        from orca.core.engine.spill import arrow_feed_builder

        builder = arrow_feed_builder(self.feature_cols, self.label_cols, memory_bytes)
        for batch in self.batches():
            beat("loading its data")
            if batch.num_rows:
                builder.add(batch, batch.nbytes)
        return builder

    def load(self, memory_bytes: int | None) -> Any:
        """The rows as a worker's share (:class:`~orca.core.engine.feed.Feed` or, past
        ``memory_bytes``, :class:`~orca.core.engine.spill.DiskFeed`)."""
        return self.fill(memory_bytes).finish()

    def __repr__(self) -> str:
        return f"WorkerRead({len(self.pieces)} pieces, {self.num_rows} rows)"
