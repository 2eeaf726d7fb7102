"""Read CSV, JSON and Parquet files into XShards of pandas DataFrames.

Paths may be local files, directories, globs or fsspec URLs (or a list of them). Only the
file listing happens on the driver; each file is read with pandas where its partition lives
(a Spark task, a Ray task, or this process for local XShards).
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


def _read(
    reader: str,
    path: str | list[str],
    num_shards: int | None,
    backend: str | None,
    kwargs: dict[str, Any],
) -> XShards:
    files = list_files(path)
    form = resolve_backend(backend)
    wanted = default_num_shards(form) if num_shards is None else int(num_shards)
    if wanted < 1:
        raise ValueError(f"num_shards must be >= 1; got {num_shards!r}.")
    n = min(len(files), wanted)
    # contiguous groups of files, one group (and one pandas frame) per partition
    groups = [files[i * len(files) // n : (i + 1) * len(files) // n] for i in range(n)]
    if form == "spark":
        from orca.core.data._spark import SparkXShards, spark_context

        rdd = spark_context().parallelize(groups, n).map(lambda g: _read_files(reader, g, kwargs))
        return SparkXShards(rdd)
    if form == "ray":
        from orca.core.data._ray import RayXShards, remote

        task = remote(_read_files)
        return RayXShards([task.remote(reader, g, kwargs) for g in groups])
    from orca.core.data._local import LocalXShards

    return LocalXShards([_read_files(reader, g, kwargs) for g in groups])


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

    Args:
        path: a file, directory (e.g. one Spark wrote), glob or fsspec URL, or a list of them.
        num_shards: at most this many partitions; never more than there are files.
        backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
        **kwargs: passed to ``pandas.read_parquet`` (``columns``, ``filters``, ...).

    Returns:
        XShards of pandas DataFrames.

    Raises:
        FileNotFoundError: ``path`` matches no file (the path is named).
    """
    return _read("read_parquet", path, num_shards, backend, kwargs)
