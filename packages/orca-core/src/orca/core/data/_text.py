"""Where the XShards of :func:`~orca.core.data.read_csv` and :func:`~orca.core.data.read_json`
(``lines=True``) came from: their files, which an Estimator's workers read themselves in chunks.

On the driver, ``read_csv`` reads each file's header (its column names) and the first
:data:`SAMPLE_ROWS` rows of the first file that has rows, never the rest: the sample gives each
column its type. An Estimator given such XShards, untransformed, splits the files between its
workers (contiguous runs of files balanced by bytes; with fewer files than workers, every
worker reads every file and keeps every ``world``-th chunk of it), and each worker reads its
files with the same pandas reader and arguments, :data:`BATCH_ROWS` rows at a time (a shared file
:data:`SHARED_CHUNK_ROWS` at a time, counted across the shared files), each chunk
turned into one Arrow record batch: no worker holds more than a chunk as pandas.

Chunks are parsed separately, so the columns a model reads are parsed with the types the sample
found (or the ``dtype=`` given): a later row that does not parse as its column's type (a float
in a column of integers, a missing value in a column of integers or booleans) fails the read
with an error that says which file and what to pass as ``dtype=``. Rows come in the files' order.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orca.core.data._origin import balanced_cuts, first_lacking
from orca.core.data._parquet import BATCH_ROWS

#: rows of the first file (with rows) read on the driver to find the columns' types
SAMPLE_ROWS = 10_000
#: rows of a chunk of a file read by several workers (each keeps every ``world``-th chunk)
SHARED_CHUNK_ROWS = 256
#: headers read at once on the driver (remote file systems answer each in a round trip)
_HEADER_THREADS = 16
#: reader arguments that a chunked read does not take, or that change which rows there are
_UNCHUNKED = frozenset({"chunksize", "iterator", "nrows", "skipfooter"})


class _Lacking(Exception):
    """A chunk without a column the model reads (raised as a ValueError naming the file)."""


def streamable_args(reader: str, kwargs: dict[str, Any]) -> bool:
    """Whether the workers can read files of ``reader`` with ``kwargs`` in chunks (else the frames
    are read whole, as any XShards): JSON only as lines (``lines=True``)."""
    if set(kwargs) & _UNCHUNKED:
        return False
    return reader == "read_csv" or (reader == "read_json" and kwargs.get("lines") is True)


@dataclass(frozen=True)
class TextPiece:
    """One file, or the ``part``-th of every ``parts`` chunks of it.

    Attributes:
        path: the file (a local path or an fsspec URL).
        size: its bytes.
        part: which chunks to keep (chunk ``i`` where ``i % parts == part``).
        parts: ``1``: the whole file.
    """

    path: str
    size: int
    part: int = 0
    parts: int = 1

    #: rows are known only once read
    rows = None


@dataclass(frozen=True)
class TextOrigin:
    """The CSV or JSON-lines files an XShards holds, and what the driver learnt of them.

    Attributes:
        reader: ``"read_csv"`` or ``"read_json"``.
        files: every file, in order.
        kwargs: the reader's arguments, as given.
        headers: for each file, its column names (as read).
        types: the Arrow type of each column of the sample.
        dtypes: the pandas type each column of the sample is read with (the ``dtype=`` given, or
            the sample's).
        sampled_rows: rows in the sample (``0``: no file has rows).
        num_groups: partitions of the XShards.
    """

    reader: str
    files: tuple[TextPiece, ...]
    kwargs: dict[str, Any]
    headers: tuple[tuple[str, tuple[Any, ...]], ...]
    types: tuple[tuple[Any, Any], ...]
    dtypes: tuple[tuple[Any, str], ...]
    sampled_rows: int
    num_groups: int

    #: the row count is known only once the files are read
    num_rows = None

    @property
    def kind(self) -> str:
        """What the files are, in messages."""
        return "CSV" if self.reader == "read_csv" else "JSON"

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The ``usecols=`` the files were read with (``None``: all)."""
        cols = self.kwargs.get("usecols")
        return tuple(cols) if isinstance(cols, (list, tuple)) and all(isinstance(c, str) for c in cols) else None

    @property
    def num_files(self) -> int:
        """Files read."""
        return len(self.files)

    @property
    def empty(self) -> bool:
        """Whether no file has a row."""
        return self.sampled_rows == 0

    def column_types(self) -> dict[str, Any]:
        """The Arrow type of each column of the sample."""
        return dict(self.types)

    def missing(self, names: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
        """``(file, names it lacks, its columns)`` for the first file lacking one of ``names``."""
        return first_lacking(self.headers, names)

    def split(self, world: int) -> list[list[TextPiece]]:
        """The files as ``world`` shares: contiguous runs balanced by bytes; with fewer files than
        ``world``, every share has every file, keeping every ``world``-th chunk of it."""
        if len(self.files) >= world:
            return [list(self.files[a:b]) for a, b in balanced_cuts([f.size for f in self.files], world)]
        return [[dataclasses.replace(f, part=r, parts=world) for f in self.files] for r in range(world)]

    def batch_reader(self) -> Callable[[Sequence[TextPiece], Sequence[str]], Iterator[Any]]:
        """What a worker reads its pieces with: ``reader(pieces, columns)`` -> Arrow batches."""
        return functools.partial(read_batches, reader=self.reader, kwargs=self.kwargs, dtypes=dict(self.dtypes))


def _size_and_header(reader: str, path: str, kwargs: dict[str, Any]) -> tuple[int, tuple[Any, ...]]:
    import fsspec
    import pandas as pd

    fs, root = fsspec.core.url_to_fs(path)
    size = int(fs.size(root))
    if size == 0:
        return 0, ()
    try:
        if reader == "read_csv":
            frame = pd.read_csv(path, nrows=0, **kwargs)
        else:
            frame = pd.read_json(path, nrows=1, **kwargs)
    except Exception as exc:
        raise ValueError(f"{reader}: {path!r} could not be read ({type(exc).__name__}: {exc}); check the files and "
                         f"the arguments given to {reader}.") from exc
    return size, tuple(frame.columns)


def _sample(reader: str, files: Sequence[TextPiece], kwargs: dict[str, Any]) -> Any:
    """The first rows of the first file with rows (an empty frame where none has any)."""
    import pandas as pd

    read = getattr(pd, reader)
    frame = None
    for f in files:
        if f.size:
            frame = read(f.path, nrows=SAMPLE_ROWS, **kwargs)
            if len(frame):
                return frame
    return frame if frame is not None else pd.DataFrame()


def origin_of(reader: str, files: Sequence[str], groups: Sequence[Sequence[str]], kwargs: dict[str, Any]
              ) -> TextOrigin:
    """The :class:`TextOrigin` of ``files`` read in ``groups`` (one group per partition): each
    file's size and header, and a sample of the first rows.

    Raises:
        ValueError: a file the reader cannot read (named).
    """
    import pyarrow as pa

    with ThreadPoolExecutor(max_workers=max(1, min(_HEADER_THREADS, len(files)))) as pool:
        found = list(pool.map(lambda f: _size_and_header(reader, f, kwargs), files))
    pieces = tuple(TextPiece(f, size) for f, (size, _) in zip(files, found, strict=True))
    headers = tuple((f, cols) for f, (size, cols) in zip(files, found, strict=True) if size)
    sample = _sample(reader, pieces, kwargs)
    types = tuple(zip(sample.columns, pa.Schema.from_pandas(sample, preserve_index=False).types, strict=True))
    given = kwargs.get("dtype")
    dtypes: dict[str, str] = {}
    if given is None or isinstance(given, dict):
        dtypes = {c: str(t) for c, t in sample.dtypes.items() if t.kind in "iufbO"}
        dtypes.update({c: str(t) for c, t in (given or {}).items()})
    return TextOrigin(reader, pieces, dict(kwargs), headers, types, tuple(dtypes.items()), len(sample), len(groups))


def read_batches(pieces: Sequence[TextPiece], columns: Sequence[str], reader: str, kwargs: dict[str, Any],
                 dtypes: dict[Any, str], batch_rows: int = BATCH_ROWS) -> Iterator[Any]:
    """The rows of ``pieces`` as Arrow record batches of at most ``batch_rows`` rows, in order, with
    only ``columns``, each column parsed as ``dtypes`` says.

    Raises:
        ValueError: a file lacking one of ``columns``, or a value that does not parse as its
            column's type (the file named, and the ``dtype=`` to pass).
    """
    import pandas as pd
    import pyarrow as pa

    read = getattr(pd, reader)
    args = dict(kwargs)
    chunk = 0  # chunks of the files shared with other workers, counted across them
    pinned = {c: t for c, t in dtypes.items() if c in columns}
    if pinned:
        args["dtype"] = {**(args.get("dtype") or {}), **pinned}
    if reader == "read_csv" and "usecols" not in args and "index_col" not in args:
        args["usecols"] = list(columns)  # the parser skips the other columns
    for piece in pieces:
        if not piece.size:
            continue
        try:
            with read(piece.path, chunksize=batch_rows if piece.parts == 1 else SHARED_CHUNK_ROWS, **args) as chunks:
                for frame in chunks:
                    if piece.parts > 1:
                        chunk += 1
                        if (chunk - 1) % piece.parts != piece.part:
                            continue
                    lacking = [c for c in columns if c not in frame.columns]
                    if lacking:
                        raise _Lacking(f"{reader}: the file {piece.path!r} has no column(s) {lacking}; it has "
                                       f"{list(frame.columns)}. Give every file the columns, or fix "
                                       "feature_cols/label_cols.")
                    yield pa.RecordBatch.from_pandas(frame[list(columns)], preserve_index=False)
        except _Lacking as exc:
            raise ValueError(str(exc)) from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"{reader}: {piece.path!r}: {exc}. The workers read each chunk of the files with the "
                             f"column types of the first rows ({pinned}); where later rows hold other values (a float "
                             f"in a column of integers, a missing value), pass dtype={{column: type}} to {reader} "
                             "(e.g. 'float64'), or clean the data.") from exc
