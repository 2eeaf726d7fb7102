"""What a shard holds, and the row-wise operations every XShards form shares.

A shard is one of:

* ``"pandas"``: a pandas DataFrame or Series (rows are rows);
* ``"arrays"``: an ndarray, or a dict/tuple/list (nested) whose leaves are ndarrays or pandas
  objects, all with the same first dimension (rows are along axis 0);
* ``"sequence"``: a list of plain Python objects (rows are elements);
* ``"object"``: anything else (one row, cannot be split).

Everything here is pure numpy/pandas so it runs the same on the driver, in a Spark task or in
a Ray task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import pandas as pd

SPLITTABLE_KINDS = ("pandas", "arrays", "sequence")

T = TypeVar("T")


def is_leaf(value: Any) -> bool:
    """True for the array-like leaves of a structure (ndarray, DataFrame, Series)."""
    return isinstance(value, (np.ndarray, pd.DataFrame, pd.Series))


def _is_structure(value: Any) -> bool:
    if is_leaf(value):
        return True
    if isinstance(value, dict):
        return len(value) > 0 and all(_is_structure(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return len(value) > 0 and all(_is_structure(v) for v in value)
    return False


def shard_kind(shard: Any) -> str:
    """Classify a shard as ``pandas``, ``arrays``, ``sequence`` or ``object``."""
    if isinstance(shard, (pd.DataFrame, pd.Series)):
        return "pandas"
    if _is_structure(shard):
        return "arrays"
    if isinstance(shard, list):
        return "sequence"
    return "object"


def leaves_with_paths(value: Any, path: str = "data") -> list[tuple[str, Any]]:
    """Flatten a nested dict/tuple/list into ``(path, leaf)`` pairs, in a stable order."""
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for key, item in value.items():
            out.extend(leaves_with_paths(item, f"{path}[{key!r}]"))
        return out
    if isinstance(value, (tuple, list)):
        out = []
        for i, item in enumerate(value):
            out.extend(leaves_with_paths(item, f"{path}[{i}]"))
        return out
    return [(path, value)]


def num_rows(shard: Any) -> int:
    """Rows in a shard: first dimension of arrays/frames, elements of a list, else 1."""
    kind = shard_kind(shard)
    if kind == "pandas":
        return len(shard)
    if kind == "arrays":
        leaf = leaves_with_paths(shard)[0][1]
        if isinstance(leaf, np.ndarray) and leaf.ndim == 0:
            return 1
        return len(leaf)
    if kind == "sequence":
        return len(shard)
    return 1


def slice_rows(shard: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of a splittable shard, keeping its structure."""
    if isinstance(shard, (pd.DataFrame, pd.Series)):
        return shard.iloc[start:stop]
    if isinstance(shard, np.ndarray):
        return shard[start:stop]
    if isinstance(shard, dict):
        return {k: slice_rows(v, start, stop) for k, v in shard.items()}
    if isinstance(shard, tuple):
        return tuple(slice_rows(v, start, stop) for v in shard)
    if isinstance(shard, list) and _is_structure(shard):
        return [slice_rows(v, start, stop) for v in shard]
    if isinstance(shard, list):
        return shard[start:stop]
    raise TypeError(f"cannot split a shard of type {type(shard).__name__} by rows")


def concat_rows(parts: Sequence[Any]) -> Any:
    """Concatenate splittable shards of the same structure along rows (inverse of slicing)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, (pd.DataFrame, pd.Series)):
        return pd.concat(list(parts))
    if isinstance(first, np.ndarray):
        return np.concatenate(list(parts), axis=0)
    if isinstance(first, dict):
        return {k: concat_rows([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(concat_rows([p[i] for p in parts]) for i in range(len(first)))
    if isinstance(first, list) and _is_structure(first):
        return [concat_rows([p[i] for p in parts]) for i in range(len(first))]
    if isinstance(first, list):
        return [item for p in parts for item in p]
    raise TypeError(f"cannot concatenate shards of type {type(first).__name__}")


def balanced_ranges(total: int, n: int) -> list[tuple[int, int]]:
    """Split ``total`` rows into ``n`` contiguous ranges whose sizes differ by at most one."""
    base, extra = divmod(total, n)
    ranges, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def chunks(rows: Iterable[T], size: int = 10) -> Iterator[list[T]]:
    """Group ``rows`` into lists of ``size`` rows, in order (the last holds what is left).

    The reference's ``bigdl.orca.data.image.utils.chunks``: its users build shards from a
    partition's records with it, ``rdd.mapPartitions(lambda it: chunks(it, 5))``. Each chunk is a
    list, so it can be read more than once and in any order (the reference's were one-pass views
    of the shared input, each to be read before the next).

    Args:
        rows: any iterable; it is read once, a chunk at a time.
        size: rows per chunk, an int >= 1.

    Returns:
        An iterator over the chunks; none for no rows.

    Raises:
        ValueError: ``size`` is not an int >= 1.

    Example:
        >>> [c for c in chunks(range(7), 3)]
        [[0, 1, 2], [3, 4, 5], [6]]
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"chunks: size must be an int >= 1 (rows per chunk), got {size!r}.")
    return _chunks(iter(rows), size)


def _chunks(rows: Iterator[T], size: int) -> Iterator[list[T]]:
    while chunk := list(islice(rows, size)):
        yield chunk


def plan_repartition(counts: Sequence[int], n: int) -> list[list[tuple[int, int, int]]]:
    """Plan a row-balanced re-split of sources with ``counts`` rows into ``n`` targets.

    Returns, for each target, the ``(source_index, start, stop)`` slices (local to the source)
    to concatenate in order. A target with no rows gets an empty slice of source 0, so it still
    holds a correctly-typed empty shard.
    """
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    plan: list[list[tuple[int, int, int]]] = []
    for lo, hi in balanced_ranges(int(offsets[-1]), n):
        pieces = []
        for src, count in enumerate(counts):
            s_lo, s_hi = int(offsets[src]), int(offsets[src]) + count
            a, b = max(lo, s_lo), min(hi, s_hi)
            if a < b:
                pieces.append((src, a - s_lo, b - s_lo))
        plan.append(pieces or [(0, 0, 0)])
    return plan


def check_same_length(data: Any) -> int:
    """Validate that every leaf of ``data`` has the same first dimension; return it.

    Raises:
        ValueError: leaves of different lengths (names each path and its length).
        TypeError: a leaf that is not an array, DataFrame or Series.
    """
    pairs = leaves_with_paths(data)
    lengths = []
    for path, leaf in pairs:
        if not is_leaf(leaf) or (isinstance(leaf, np.ndarray) and leaf.ndim == 0):
            raise TypeError(
                f"XShards.partition needs ndarrays (or pandas objects) with a first dimension at "
                f"the leaves of `data`; {path} is a {type(leaf).__name__}."
            )
        lengths.append((path, len(leaf)))
    if len({n for _, n in lengths}) > 1:
        listing = ", ".join(f"{p}: {n}" for p, n in lengths)
        raise ValueError(
            "All arrays passed to XShards.partition must have the same length (first "
            f"dimension); got {listing}."
        )
    return lengths[0][1]


def as_arrays(data: Any) -> Any:
    """Turn lists of scalars at the leaves of ``data`` into ndarrays (containers are kept)."""
    if isinstance(data, dict):
        return {k: as_arrays(v) for k, v in data.items()}
    if isinstance(data, (tuple, list)) and data and all(
        isinstance(v, (dict, tuple, list)) or is_leaf(v) for v in data
    ):
        converted = [as_arrays(v) for v in data]
        return tuple(converted) if isinstance(data, tuple) else converted
    if isinstance(data, (tuple, list)):
        return np.asarray(data)
    return data


def missing_key(shard: Any, key: Any) -> list[Any] | None:
    """The shard's available keys when ``shard[key]`` would fail, else ``None``."""
    if isinstance(shard, pd.DataFrame):
        available = list(shard.columns)
        wanted = key if isinstance(key, list) else [key]
        return None if all(k in shard.columns for k in wanted) else available
    if isinstance(shard, dict):
        return None if key in shard else list(shard.keys())
    if isinstance(shard, (tuple, list, np.ndarray, pd.Series)):
        try:
            shard[key]
        except (IndexError, KeyError, TypeError):
            if isinstance(shard, pd.Series):
                return list(shard.index)
            return list(range(len(shard)))
        return None
    try:
        shard[key]
    except (KeyError, IndexError, TypeError):
        keys = getattr(shard, "keys", None)
        return list(keys()) if callable(keys) else []
    return None


def shard_schema(shard: Any) -> dict[str, Any]:
    """Describe a shard: columns/dtypes for pandas, keys/shapes/dtypes for dicts of arrays.

    The row dimension of array shapes is ``None`` (it varies between shards).
    """
    if isinstance(shard, pd.DataFrame):
        return {
            "type": "pandas",
            "columns": list(shard.columns),
            "dtypes": {str(c): str(t) for c, t in shard.dtypes.items()},
        }
    if isinstance(shard, dict) and _is_structure(shard):
        return {
            "type": "dict",
            "keys": list(shard.keys()),
            "shapes": {k: _shape(v) for k, v in shard.items()},
            "dtypes": {k: _dtype(v) for k, v in shard.items()},
        }
    if isinstance(shard, (tuple, list)) and _is_structure(shard):
        return {
            "type": type(shard).__name__,
            "shapes": [_shape(v) for v in shard],
            "dtypes": [_dtype(v) for v in shard],
        }
    if isinstance(shard, np.ndarray):
        return {"type": "ndarray", "shape": _shape(shard), "dtype": str(shard.dtype)}
    return {"type": type(shard).__name__}


def _shape(value: Any) -> Any:
    if is_leaf(value):
        return (None, *value.shape[1:])
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return [_shape(v) for v in value]


def _dtype(value: Any) -> Any:
    if isinstance(value, pd.DataFrame):
        return {str(c): str(t) for c, t in value.dtypes.items()}
    if is_leaf(value):
        return str(value.dtype)
    if isinstance(value, dict):
        return {k: _dtype(v) for k, v in value.items()}
    return [_dtype(v) for v in value]
