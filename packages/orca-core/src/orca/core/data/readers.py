"""Read CSV, JSON and Parquet files into XShards of pandas DataFrames.

Paths may be local files, directories, globs or fsspec URLs (or a list of them). Only the
file listing happens on the driver; each file is read with pandas where its partition lives
(a Spark task, a Ray task, or this process for local XShards).

``read_parquet`` also reads the files' footers on the driver (never their data) and returns
XShards that know their row groups (:mod:`orca.core.data._parquet`): an Estimator's workers
read those row groups themselves, as Arrow batches, and the pandas frames are only read when
the XShards are used as such.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from orca.core.data._files import list_files
from orca.core.data.shards import XShards, default_num_shards, resolve_backend


def _read_files(reader: str, files: list[str], kwargs: dict[str, Any]) -> pd.DataFrame:
    read = getattr(pd, reader)
    frames = [read(f, **kwargs) for f in files]
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
    if form == "spark":
        from orca.core.data._spark import spark_context

        rdd = spark_context().parallelize(groups, len(groups)).map(lambda g: _read_files("read_parquet", g, kwargs))
        return pqs.spark_shards(rdd, origin)
    if form == "ray":
        from orca.core.data._ray import remote

        def start() -> list[Any]:
            # zero-CPU tasks: they start on first use, maybe while an Estimator's actors hold every CPU
            # (its predictions go back into the frames), one per partition
            task = remote(_read_files).options(num_cpus=0)
            return [task.remote("read_parquet", g, kwargs) for g in groups]

        return pqs.ParquetRayXShards(start, origin)
    return pqs.ParquetLocalXShards(lambda: [_read_files("read_parquet", g, kwargs) for g in groups], origin)


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

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).

    Examples:
        >>> shards = read_csv("data/*.csv", usecols=["a", "b"], dtype={"a": "float32"})  # doctest: +SKIP
    """
    return _read("read_csv", path, num_shards, backend, kwargs)


def read_json(
    path: str | list[str], num_shards: int | None = None, backend: str | None = None, **kwargs: Any
) -> XShards:
    """Read JSON files into XShards of pandas DataFrames (one frame per partition).

    Args:
        path: a file, directory, glob or fsspec URL, or a list of them.
        num_shards: at most this many partitions; never more than there are files.
        backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
        **kwargs: passed to ``pandas.read_json`` (``orient``, ``lines``, ``dtype``, ...).

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).
    """
    return _read("read_json", path, num_shards, backend, kwargs)


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
