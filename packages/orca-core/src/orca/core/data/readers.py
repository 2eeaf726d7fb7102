"""Read CSV, JSON and Parquet files into XShards of pandas DataFrames.

Paths may be local files, directories, globs or fsspec URLs (or a list of them). Only the
file listing happens on the driver; each file is read with pandas where its partition lives
(a Spark task, a Ray task, or this process for local XShards).

``read_parquet`` also reads the files' footers on the driver (never their data) and returns
XShards that know their row groups (:mod:`orca.core.data._parquet`); ``read_csv`` and
``read_json`` (``lines=True``) read each file's header and a sample of the first rows
(:mod:`orca.core.data._text`). Given to an Estimator, the workers read those files themselves,
as Arrow batches, a bounded chunk at a time; the pandas frames are only read when the XShards
are used as such (:mod:`orca.core.data._origin`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from orca.core.data._files import list_files
from orca.core.data.shards import XShards, default_num_shards, resolve_backend


def _read_files(reader: str, files: list[str], kwargs: dict[str, Any]) -> pd.DataFrame:
    read = getattr(pd, reader)
    frames = []
    for f in files:
        try:
            frames.append(read(f, **kwargs))
        except pd.errors.EmptyDataError:  # an empty file (Spark writes one for an empty partition)
            continue
    if not frames:
        return pd.DataFrame()
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)


def _plan(path: str | list[str], num_shards: int | None, backend: str | None) -> tuple[list[str], str, list[list[str]]]:
    """The files, the XShards' form, and the contiguous groups of files (one per partition)."""
    files = list_files(path)
    form = resolve_backend(backend)
    wanted = default_num_shards(form) if num_shards is None else int(num_shards)
    if wanted < 1:
        raise ValueError(f"num_shards must be >= 1; got {num_shards!r}.")
    n = min(len(files), wanted)
    return files, form, [files[i * len(files) // n : (i + 1) * len(files) // n] for i in range(n)]


def _read(
    reader: str,
    path: str | list[str],
    num_shards: int | None,
    backend: str | None,
    kwargs: dict[str, Any],
) -> XShards:
    files, form, groups = _plan(path, num_shards, backend)
    if form == "spark":
        from orca.core.data._spark import SparkXShards, spark_context

        rdd = spark_context().parallelize(groups, len(groups)).map(lambda g: _read_files(reader, g, kwargs))
        return SparkXShards(rdd)
    if form == "ray":
        from orca.core.data._ray import RayXShards, remote

        task = remote(_read_files)
        return RayXShards([task.remote(reader, g, kwargs) for g in groups])
    from orca.core.data._local import LocalXShards

    return LocalXShards([_read_files(reader, g, kwargs) for g in groups])


def _lazy(reader: str, form: str, groups: list[list[str]], kwargs: dict[str, Any], origin: Any) -> XShards:
    """XShards of ``groups`` that know their files (``origin``); their frames are read by ``reader``
    only when they are used as frames (an Estimator's workers read the files instead)."""
    from orca.core.data import _origin

    if form == "spark":
        from orca.core.data._spark import spark_context

        rdd = spark_context().parallelize(groups, len(groups)).map(lambda g: _read_files(reader, g, kwargs))
        return _origin.spark_shards(rdd, origin)
    if form == "ray":
        from orca.core.data._ray import remote

        def start() -> list[Any]:
            # zero-CPU tasks: they start on first use, maybe while an Estimator's actors hold every CPU
            # (its predictions go back into the frames), one per partition
            task = remote(_read_files).options(num_cpus=0)
            return [task.remote(reader, g, kwargs) for g in groups]

        return _origin.LazyRayXShards(start, origin)
    return _origin.LazyLocalXShards(lambda: [_read_files(reader, g, kwargs) for g in groups], origin)


def _read_parquet(path: str | list[str], num_shards: int | None, backend: str | None,
                  kwargs: dict[str, Any]) -> XShards:
    """``read_parquet``'s XShards, knowing their row groups where the row counts of the footers are
    the rows read (no ``filters`` or other arguments that change the rows or their columns)."""
    if set(kwargs) - {"columns"}:
        return _read("read_parquet", path, num_shards, backend, kwargs)
    from orca.core.data import _parquet as pqs

    files, form, groups = _plan(path, num_shards, backend)
    columns = kwargs.get("columns")
    if isinstance(columns, str) or (columns is not None and not all(isinstance(c, str) for c in columns)):
        raise TypeError(f"read_parquet: columns must be a list of column names, got {columns!r}.")
    origin = pqs.origin_of(files, groups, list(columns) if columns is not None else None)
    return _lazy("read_parquet", form, groups, kwargs, origin)


def _read_text(reader: str, path: str | list[str], num_shards: int | None, backend: str | None,
               kwargs: dict[str, Any]) -> XShards:
    """``read_csv``'s / ``read_json``'s XShards, knowing their files where the workers can read them
    in chunks (:mod:`orca.core.data._text`); else read as before."""
    from orca.core.data import _text

    if not _text.streamable_args(reader, kwargs):
        return _read(reader, path, num_shards, backend, kwargs)
    files, form, groups = _plan(path, num_shards, backend)
    return _lazy(reader, form, groups, kwargs, _text.origin_of(reader, files, groups, kwargs))


def read_csv(
    path: str | list[str], num_shards: int | None = None, backend: str | None = None, **kwargs: Any
) -> XShards:
    """Read CSV files into XShards of pandas DataFrames (one frame per partition).

    Args:
        path: a file, directory, glob or fsspec URL, or a list of them.
        num_shards: at most this many partitions (default: Spark's default parallelism, or
            2); never more than there are files.
        backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
        **kwargs: passed to ``pandas.read_csv`` (``names``, ``usecols``, ``dtype``,
            ``header``, ``sep``, ...).

    Each file's header and the first rows of the first file are read here, on the driver; the
    frames are read, where their partitions live, when the XShards are used as such. Given to
    an Estimator's ``fit``/``evaluate``/``predict`` as they are, each worker reads its own files in
    chunks of 10,000 rows (see *Data bigger than memory* in the docs), each column the model
    reads parsed with the type the first rows gave it (or ``dtype=``'s). With ``chunksize``,
    ``iterator``, ``nrows`` or ``skipfooter`` the frames are read whole, as before.

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).
        ValueError: a file that cannot be read with these arguments (named).

    Examples:
        >>> shards = read_csv("data/*.csv", usecols=["a", "b"], dtype={"a": "float32"})  # doctest: +SKIP
    """
    return _read_text("read_csv", path, num_shards, backend, kwargs)


def read_json(
    path: str | list[str], num_shards: int | None = None, backend: str | None = None, **kwargs: Any
) -> XShards:
    """Read JSON files into XShards of pandas DataFrames (one frame per partition).

    Args:
        path: a file, directory, glob or fsspec URL, or a list of them.
        num_shards: at most this many partitions; never more than there are files.
        backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
        **kwargs: passed to ``pandas.read_json`` (``orient``, ``lines``, ``dtype``, ...).

    With ``lines=True`` (JSON lines) the files are read as ``read_csv``'s are: a header and a
    sample on the driver, and an Estimator's workers read their files in chunks; other JSON is
    read whole, one frame per partition.

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).
        ValueError: with ``lines=True``, a file that cannot be read with these arguments (named).
    """
    return _read_text("read_json", path, num_shards, backend, kwargs)


def read_parquet(
    path: str | list[str], num_shards: int | None = None, backend: str | None = None, **kwargs: Any
) -> XShards:
    """Read Parquet files into XShards of pandas DataFrames (one frame per partition).

    The files' footers are read here, on the driver (never their data): the XShards know their
    row groups and row counts. Given to an Estimator's ``fit``/``evaluate``/``predict`` as they
    are, each worker reads its own row groups as Arrow batches (see *Data bigger than memory*
    in the docs); the pandas frames are read, where their partitions live, only when the
    XShards are used as such (``collect``, ``transform_shard``, ...). A transformation returns
    ordinary XShards. With keyword arguments other than ``columns`` (``filters``, ...) the files
    are read as before, without their row groups.

    Args:
        path: a file, directory (e.g. one Spark wrote), glob or fsspec URL, or a list of them.
        num_shards: at most this many partitions; never more than there are files.
        backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
        **kwargs: passed to ``pandas.read_parquet`` (``columns``, ``filters``, ...).

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).
        ValueError: a file that is not Parquet, or a name of ``columns`` a file lacks.
        TypeError: ``columns`` that is not a list of names.

    Examples:
        >>> shards = read_parquet("data/train/", columns=["features", "label"])  # doctest: +SKIP
        >>> est.fit(shards, feature_cols=["features"], label_cols=["label"])  # doctest: +SKIP
    """
    return _read_parquet(path, num_shards, backend, kwargs)
