"""Where the XShards of :func:`~orca.core.data.read_parquet` came from: their Parquet row groups.

``read_parquet`` reads each file's footer on the driver (the metadata only, never a data page)
and keeps the list of *pieces*, ``(file, row group, rows)``, with the XShards it returns. The
pandas frames themselves are read only when something asks for them (``collect``,
``transform_shard``, ...), as before. An Estimator given such XShards knows their row count
at once and lets each worker read its own row groups as Arrow record batches
(:func:`read_batches`): no worker, task or driver ever holds the data as pandas. A
transformation (``transform_shard``, ``repartition``, ...) returns ordinary XShards, which no
longer know where their rows came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orca.core.data._origin import balanced_cuts, file_origin, first_lacking

#: rows of one Arrow record batch a worker reads at a time (Spark's ``maxRecordsPerBatch``)
BATCH_ROWS = 10_000
#: footers read at once on the driver (remote file systems answer each in a round trip)
_FOOTER_THREADS = 16


@dataclass(frozen=True)
class Piece:
    """One row group of one Parquet file.

    Attributes:
        path: the file (a local path or an fsspec URL).
        row_group: the row group's index in the file.
        rows: its rows, from the footer.
    """

    path: str
    row_group: int
    rows: int


@dataclass(frozen=True)
class ParquetOrigin:
    """The Parquet row groups an XShards holds, in the XShards' row order.

    Attributes:
        pieces: every non-empty row group, file by file, in order.
        columns: the ``columns=`` the files were read with (``None``: all).
        schemas: for each file, its column names and their Arrow types (as read).
        group_rows: rows of each partition of the XShards.
    """

    pieces: tuple[Piece, ...]
    columns: tuple[str, ...] | None
    schemas: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    group_rows: tuple[int, ...]

    #: what the files are, and the reader they came from (in messages)
    kind = "Parquet"
    reader = "read_parquet"

    @property
    def num_rows(self) -> int:
        """Rows of all files (from their footers)."""
        return sum(p.rows for p in self.pieces)

    def column_types(self) -> dict[str, Any]:
        """The Arrow type of each column every file has (the first file's type), in order."""
        if not self.schemas:
            return {}
        common = dict(self.schemas[0][1])
        for _, fields in self.schemas[1:]:
            names = {n for n, _ in fields}
            common = {n: t for n, t in common.items() if n in names}
        return common

    def missing(self, names: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
        """``(file, names it lacks, its columns)`` for the first file lacking one of ``names``."""
        return first_lacking([(path, [n for n, _ in fields]) for path, fields in self.schemas], names)

    def split(self, world: int) -> list[list[Piece]]:
        """Cut the pieces into ``world`` contiguous runs balanced by rows, at row-group boundaries.

        Each cut goes to the row-group boundary nearest to ``k / world`` of the rows, so a share
        differs from an even one by at most half a row group; a worker may get none (fewer row
        groups than workers). The lock-step plan takes uneven shares as they are.
        """
        return [list(self.pieces[a:b]) for a, b in balanced_cuts([p.rows for p in self.pieces], world)]

    @property
    def empty(self) -> bool:
        """Whether the files have no row."""
        return self.num_rows == 0

    @property
    def num_files(self) -> int:
        """Files read."""
        return len(self.schemas)

    @property
    def num_groups(self) -> int:
        """Partitions of the XShards."""
        return len(self.group_rows)

    def batch_reader(self) -> Callable[[Sequence[Piece], Sequence[str]], Iterator[Any]]:
        """What a worker reads its pieces with: ``reader(pieces, columns)`` -> Arrow batches."""
        return read_batches


def _footer(path: str) -> tuple[list[int], list[tuple[str, Any]]]:
    """Rows of each row group and the Arrow schema's fields of one file, from its footer."""
    import fsspec
    import pyarrow.parquet as pq

    try:
        with fsspec.open(path, "rb") as f:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
    except Exception as exc:
        raise ValueError(f"read_parquet: {path!r} is not a readable Parquet file ({type(exc).__name__}: {exc}); "
                         "point read_parquet at Parquet files only.") from exc
    rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return rows, [(f.name, f.type) for f in schema]


def read_footers(files: Sequence[str], columns: Sequence[str] | None) -> tuple[list[Piece], list[Any]]:
    """The pieces of ``files`` and each file's ``(path, fields)``, from the footers alone.

    Raises:
        ValueError: a file that is not Parquet, or a name of ``columns`` a file lacks (named,
            with the file's columns).
    """
    with ThreadPoolExecutor(max_workers=max(1, min(_FOOTER_THREADS, len(files)))) as pool:
        footers = list(pool.map(_footer, files))
    pieces: list[Piece] = []
    schemas = []
    for path, (rows, fields) in zip(files, footers, strict=True):
        if columns is not None:
            have = dict(fields)
            lacking = [c for c in columns if c not in have]
            if lacking:
                raise ValueError(f"read_parquet: columns {lacking} not found in {path!r}; it has columns "
                                 f"{[n for n, _ in fields]}. Fix columns=[...].")
            fields = [(c, have[c]) for c in columns]
        schemas.append((path, tuple(fields)))
        pieces.extend(Piece(path, i, n) for i, n in enumerate(rows) if n)
    return pieces, schemas


def read_batches(pieces: Sequence[Piece], columns: Sequence[str], batch_rows: int = BATCH_ROWS) -> Iterator[Any]:
    """The rows of ``pieces`` as Arrow record batches of at most ``batch_rows`` rows, in order,
    with only ``columns``; each file is opened once (through fsspec) for its run of row groups."""
    import fsspec
    import pyarrow.parquet as pq

    i = 0
    while i < len(pieces):
        path = pieces[i].path
        groups = []
        while i < len(pieces) and pieces[i].path == path:
            groups.append(pieces[i].row_group)
            i += 1
        with fsspec.open(path, "rb") as f:
            yield from pq.ParquetFile(f).iter_batches(batch_size=batch_rows, row_groups=groups,
                                                      columns=list(columns), use_threads=False)


def parquet_origin(data: Any) -> ParquetOrigin | None:
    """Where an XShards came from, if it is an untransformed result of ``read_parquet``."""
    origin = file_origin(data)
    return origin if isinstance(origin, ParquetOrigin) else None


def origin_of(files: Sequence[str], groups: Sequence[Sequence[str]], columns: Sequence[str] | None
              ) -> ParquetOrigin:
    """The :class:`ParquetOrigin` of ``files`` read in ``groups`` (one group per partition)."""
    pieces, schemas = read_footers(files, columns)
    per_file: dict[str, int] = {}
    for p in pieces:
        per_file[p.path] = per_file.get(p.path, 0) + p.rows
    group_rows = tuple(sum(per_file.get(f, 0) for f in g) for g in groups)
    return ParquetOrigin(tuple(pieces), tuple(columns) if columns is not None else None, tuple(schemas),
                         group_rows)
