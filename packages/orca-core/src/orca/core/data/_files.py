"""File listing and per-shard pickle files, for local paths and any fsspec URL."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import fsspec

from orca.core.data.shards import XShards

_PICKLE_PREFIX = "part-"
_PICKLE_SUFFIX = ".pkl"


def _fs_and_path(path: str) -> tuple[Any, str]:
    fs, root = fsspec.core.url_to_fs(path)
    return fs, root


def _unstrip(fs: Any, original: str, path: str) -> str:
    """Give a path listed by ``fs`` back its protocol, so executors open the same file."""
    if "://" not in original:
        return path
    return fs.unstrip_protocol(path)


def list_files(path: str | list[str], what: str = "data") -> list[str]:
    """Expand a path, a directory, a glob, or a list of them into sorted file paths.

    Files whose name starts with ``_`` or ``.`` (``_SUCCESS``, ``.crc``) are skipped.

    Raises:
        FileNotFoundError: a path that matches no file (the path is named).
    """
    paths = [path] if isinstance(path, str) else list(path)
    out: list[str] = []
    for p in paths:
        fs, root = _fs_and_path(p)
        if any(ch in root for ch in "*?["):
            matches = sorted(fs.glob(root))
        elif fs.isdir(root):
            matches = sorted(fs.find(root))
        elif fs.exists(root):
            matches = [root]
        else:
            raise FileNotFoundError(f"No such file or directory: {p!r}")
        files = [m for m in matches if not m.rsplit("/", 1)[-1].startswith(("_", ".")) and fs.isfile(m)]
        if not files:
            raise FileNotFoundError(f"No {what} files found at {p!r}")
        out.extend(_unstrip(fs, p, m) for m in files)
    return out


def write_partition(path: str, partition_index: int, shards: list[Any]) -> int:
    """Write each shard of one partition to ``part-<partition>-<index>.pkl``; return the count."""
    fs, root = _fs_and_path(path)
    fs.makedirs(root, exist_ok=True)
    for j, shard in enumerate(shards):
        name = f"{root.rstrip('/')}/{_PICKLE_PREFIX}{partition_index:05d}-{j:05d}{_PICKLE_SUFFIX}"
        with fs.open(name, "wb") as f:
            cloudpickle.dump(shard, f, protocol=pickle.HIGHEST_PROTOCOL)
    return len(shards)


def read_pickle_file(path: str) -> Any:
    """Load one shard file."""
    with fsspec.open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 - only behind XShards.load_pickle(allow_pickle=True)


def load_pickle(path: str, backend: str) -> XShards:
    """Load a directory written by ``save_pickle``: one shard per file, read where they land."""
    files = [
        f
        for f in list_files(path, what="pickle")
        if f.rsplit("/", 1)[-1].startswith(_PICKLE_PREFIX) and f.endswith(_PICKLE_SUFFIX)
    ]
    if not files:
        raise FileNotFoundError(f"No pickle shard files (part-*.pkl) found at {path!r}")
    if backend == "spark":
        from orca.core.data._spark import SparkXShards, spark_context

        rdd = spark_context().parallelize(files, len(files)).map(read_pickle_file)
        return SparkXShards(rdd)
    if backend == "ray":
        from orca.core.data._ray import RayXShards, remote

        return RayXShards([remote(read_pickle_file).remote(f) for f in files])
    from orca.core.data._local import LocalXShards

    return LocalXShards([read_pickle_file(f) for f in files])
