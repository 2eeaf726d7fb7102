"""File listing and per-shard pickle files, for local paths and any fsspec URL."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import fsspec

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


def write_partition(path: str, partition_index: int, shards: list[Any], safe: bool = False) -> int:
    """Write each shard of one partition to ``part-<partition>-<index>`` + ``.pkl`` (a pickle), or
    with ``safe`` to ``.parquet`` (a pandas DataFrame) / ``.npz`` (an array or a dict of arrays:
    data only, see :func:`write_safe_shard`); return the count."""
    fs, root = _fs_and_path(path)
    fs.makedirs(root, exist_ok=True)
    for j, shard in enumerate(shards):
        stem = f"{root.rstrip('/')}/{_PICKLE_PREFIX}{partition_index:05d}-{j:05d}"
        if safe:
            write_safe_shard(fs, stem, shard)
            continue
        with fs.open(stem + _PICKLE_SUFFIX, "wb") as f:
            cloudpickle.dump(shard, f, protocol=pickle.HIGHEST_PROTOCOL)
    return len(shards)


#: the key a shard that is one array is stored under in its ``.npz``
_ARRAY_KEY = "__array__"


def _plain_array(name: str, value: Any) -> Any:
    import numpy as np

    if not isinstance(value, np.ndarray):
        raise TypeError(f"XShards.save: {name} is a {type(value).__name__}, not a numpy array; save writes "
                        "pandas DataFrames and numpy arrays (or dicts of them). Use save_pickle for other shards.")
    if value.dtype.hasobject:
        raise TypeError(f"XShards.save: {name} holds Python objects (dtype object), which only a pickle can "
                        "store; convert it (e.g. strings to a fixed-width dtype) or use save_pickle.")
    return value


def write_safe_shard(fs: Any, stem: str, shard: Any) -> None:
    """Write ``shard`` as data only: a pandas DataFrame as Parquet, a numpy array or a dict of
    str -> numpy array as ``.npz`` (numeric or fixed-width dtypes; nothing pickled).

    Raises:
        TypeError: any other shard, or arrays of Python objects (the message names save_pickle).
    """
    import io

    import numpy as np
    import pandas as pd

    if isinstance(shard, pd.DataFrame):
        with fs.open(stem + ".parquet", "wb") as f:
            shard.to_parquet(f, index=False)
        return
    if isinstance(shard, dict):
        bad = [k for k in shard if not isinstance(k, str) or k == _ARRAY_KEY]
        if bad:
            raise TypeError(f"XShards.save: dict shards need string keys (other than {_ARRAY_KEY!r}); got {bad!r}.")
        arrays = {k: _plain_array(f"shard key {k!r}", v) for k, v in shard.items()}
    else:
        arrays = {_ARRAY_KEY: _plain_array("a shard", shard)}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with fs.open(stem + ".npz", "wb") as f:
        f.write(buf.getvalue())


def read_safe_file(path: str) -> Any:
    """Load one shard file written by :func:`write_safe_shard` (nothing in it can run)."""
    import io

    import numpy as np
    import pandas as pd

    with fsspec.open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".parquet"):
        return pd.read_parquet(io.BytesIO(raw))
    with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return arrays[_ARRAY_KEY] if list(arrays) == [_ARRAY_KEY] else arrays


def read_pickle_file(path: str) -> Any:
    """Load one shard file."""
    with fsspec.open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 - only behind XShards.load_pickle(allow_pickle=True)


def pickle_files(path: str) -> list[str]:
    """The shard files of a directory written by ``save_pickle`` (one shard per file)."""
    files = [
        f
        for f in list_files(path, what="pickle")
        if f.rsplit("/", 1)[-1].startswith(_PICKLE_PREFIX) and f.endswith(_PICKLE_SUFFIX)
    ]
    if not files:
        raise FileNotFoundError(f"No pickle shard files (part-*.pkl) found at {path!r}")
    return files


def safe_files(path: str) -> list[str]:
    """The shard files of a directory written by ``XShards.save`` (one shard per file)."""
    files = [
        f
        for f in list_files(path, what="shard")
        if f.rsplit("/", 1)[-1].startswith(_PICKLE_PREFIX) and f.endswith((".parquet", ".npz"))
    ]
    if not files:
        pickles = any(f.endswith(_PICKLE_SUFFIX) for f in list_files(path, what="shard"))
        raise FileNotFoundError(f"No shard files (part-*.parquet / part-*.npz) found at {path!r}"
                                + ("; it holds pickles from save_pickle: read them with XShards.load_pickle"
                                   if pickles else ""))
    return files
