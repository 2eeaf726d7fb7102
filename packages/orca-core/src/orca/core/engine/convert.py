"""Turn what a worker receives (Arrow batches, XShards shards) into numpy parts.

A *part* is ``{"x": [arrays], "y": [arrays]}``: one array per model input and per target,
all with the same number of rows. These functions run on Spark executors and Ray workers,
so they import nothing heavier than numpy, pandas and pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

Part = dict[str, list[np.ndarray]]


def arrow_column_to_numpy(col: pa.Array | pa.ChunkedArray, name: str) -> np.ndarray:
    """Convert one Arrow column of scalars or (nested) fixed-length lists to an ndarray.

    Raises:
        ValueError: list rows of different lengths, or nulls.
    """
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks > 1 and not isinstance(col.type, pa.ExtensionType):
            # each chunk as a view, joined by one copy (combine_chunks, then a copy to numpy, made two)
            parts = [arrow_column_to_numpy(c, name) for c in col.chunks]
            parts = [p for p in parts if len(p)] or parts[:1]  # an empty chunk knows no row shape (nor keys)
            shapes = sorted({p.shape[1:] for p in parts})
            if len(shapes) > 1:
                raise ValueError(f"column {name!r} holds arrays of different shapes ({shapes[0]}..{shapes[-1]}); "
                                 "every row must have the same shape.")
            kinds = list(dict.fromkeys(p.dtype for p in parts))
            if len(kinds) > 1 and any(k.names is not None for k in kinds):
                raise ValueError(f"column {name!r} holds maps with different keys or value shapes "
                                 f"({_describe_records(kinds[0])} and {_describe_records(kinds[1])}); every row "
                                 "must have the same keys, each with values of one shape.")
            return np.concatenate(parts)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        raise ValueError(
            f"column {name!r} has {col.null_count} null value(s); drop or fill them first "
            f"(df.na.drop(subset=[{name!r}]) or df.na.fill(...))."
        )
    if pa.types.is_map(col.type):
        return _map_to_records(col, name)
    if isinstance(col.type, pa.ExtensionType):  # e.g. Ray Data's tensor columns know their shape
        values = col.to_numpy(zero_copy_only=False)
        return np.stack(values) if values.dtype == object else values
    shape = [len(col)]
    arr = col
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        if pa.types.is_fixed_size_list(arr.type):
            width = arr.type.list_size
        else:
            offsets = np.asarray(arr.offsets)
            lengths = np.diff(offsets)
            if len(lengths) and (lengths != lengths[0]).any():
                raise ValueError(
                    f"column {name!r} holds arrays of different lengths "
                    f"({int(lengths.min())}..{int(lengths.max())}); every row must have the same shape."
                )
            width = int(lengths[0]) if len(lengths) else 0
            if len(arr) and offsets[0] != 0:
                arr = arr.slice(0)  # normalise offsets
        shape.append(width)
        arr = arr.flatten()
        if arr.null_count:
            raise ValueError(f"column {name!r} has null elements inside its arrays.")
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        values = np.asarray(arr.to_pylist(), dtype=object)
    elif pa.types.is_decimal(arr.type):  # a Spark DecimalType column: float64, as the reference's conversion gave
        values = arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    else:
        values = arr.to_numpy(zero_copy_only=False)
    return values.reshape(shape)


# ---------------------------------------------------------------------------- keyed arrays (records)
# A dict of arrays with one row per sample (a map<string, ...> label column, a model's dict output)
# travels as one numpy *structured* array: a field per key, each with its own dtype and row shape.
# It slices, shuffles, concatenates, spills to disk and pickles as any array does, so the engine's
# one-array-per-input (and per-output) plumbing carries it unchanged.


def records(mapping: Any, where: str) -> np.ndarray:
    """One structured array holding ``mapping``'s arrays (``{key: array of n rows}``, values may be
    such dicts themselves), a field per key in ``mapping``'s order.

    Args:
        mapping: a dict of string keys to array-likes with the same number of rows.
        where: what produced ``mapping``, for errors.

    Raises:
        ValueError: an empty dict, a 0-d value or values with different numbers of rows.
        TypeError: a key that is not a string, or a value that is neither an array nor such a dict.
    """
    if not mapping:
        raise ValueError(f"{where} gave an empty dict; a dict output needs at least one key.")
    fields: list[tuple[str, np.ndarray]] = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"{where} gave a dict with the key {key!r} ({type(key).__name__}); keys must be strings.")
        arr = records(value, f"{where}[{key!r}]") if isinstance(value, dict) else np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"{where}[{key!r}] is {type(value).__name__}, not an array of numbers.")
        if arr.ndim == 0:
            raise ValueError(f"{where}[{key!r}] is a single value (0-d); give one row per sample.")
        fields.append((key, arr))
    rows = {len(a) for _, a in fields}
    if len(rows) > 1:
        sizes = ", ".join(f"{k!r}: {len(a)}" for k, a in fields)
        raise ValueError(f"{where} gave a dict whose values have different numbers of rows ({sizes}); each value "
                         "needs one row per sample.")
    out = np.empty(rows.pop(), np.dtype([(k, a.dtype, a.shape[1:]) for k, a in fields]))
    for key, arr in fields:
        out[key] = arr
    return out


def as_mapping(arr: np.ndarray) -> dict[str, Any]:
    """A structured array (:func:`records`) as ``{key: array}`` (nested records as nested dicts)."""
    assert arr.dtype.names is not None
    return {k: as_mapping(arr[k]) if arr.dtype[k].names is not None else np.ascontiguousarray(arr[k])
            for k in arr.dtype.names}


def user_value(value: Any) -> Any:
    """What a caller gets of an output the engine carried: a structured array becomes its dict of
    arrays (:func:`as_mapping`), a list or tuple is converted element by element, anything else is
    returned as it is."""
    if isinstance(value, np.ndarray) and value.dtype.names is not None:
        return as_mapping(value)
    if isinstance(value, (list, tuple)):
        return type(value)(user_value(v) for v in value)
    return value


def _describe_records(dtype: np.dtype) -> str:
    """``{'a': float32 (3,), 'b': float32}``: a structured dtype's keys and value shapes."""
    parts = []
    for key in dtype.names or ():
        sub = dtype[key]
        parts.append(f"{key!r}: {sub.base}" + (f" {sub.shape}" if sub.shape else ""))
    return "{" + ", ".join(parts) + "}"


def _map_to_records(col: Any, name: str) -> np.ndarray:
    """A ``map<string, T>`` column (``T`` numbers or fixed-length lists of them) as a structured
    array, a field per key (sorted, so that every batch of the column gets the same dtype).

    Raises:
        ValueError: rows with different keys (the first such row named), duplicate keys, null values.
    """
    import pyarrow.compute as pc

    n = len(col)
    offsets = np.asarray(col.offsets, dtype=np.int64)  # absolute positions in the (unsliced) keys/items
    keys, items = col.keys, col.items
    if n == 0:
        return np.empty(0, np.dtype([]))

    def row_keys(r: int) -> list[Any]:
        return keys.slice(int(offsets[r]), int(offsets[r + 1] - offsets[r])).to_pylist()

    first = row_keys(0)
    if not first or not all(isinstance(k, str) for k in first) or len(set(first)) != len(first):
        raise ValueError(f"column {name!r}: row 0's map has the keys {first}; a map column needs the same "
                         "non-empty set of string keys in every row.")
    names = sorted(first)
    lengths = np.diff(offsets)
    index = pc.index_in(keys.slice(int(offsets[0]), int(offsets[-1] - offsets[0])), value_set=pa.array(names))
    idx = index.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    bad = lengths != len(names)
    if not bad.any():
        idx = idx.reshape(n, len(names))
        order = np.argsort(idx, axis=1, kind="stable")
        bad = (np.take_along_axis(idx, order, axis=1) != np.arange(len(names))).any(axis=1)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"column {name!r}: every row's map must have the same keys, but row 0 has {names} and "
                         f"row {r} has {sorted(row_keys(r), key=str)}; fill in the missing keys (or drop those rows) "
                         "first.")
    positions = offsets[:-1, None] + order  # (row, key) -> the entry holding that key's value
    return records({key: arrow_column_to_numpy(items.take(pa.array(positions[:, j])), f"{name}[{key!r}]")
                    for j, key in enumerate(names)}, f"column {name!r}")


def table_to_part(
    table: pa.Table | pa.RecordBatch, feature_cols: Sequence[str], label_cols: Sequence[str]
) -> Part:
    """Convert Arrow data with the named columns into a part.

    Raises:
        ValueError: see :func:`arrow_column_to_numpy`; and, for training or evaluation data (with
            ``label_cols``), NaN or Inf in a named column (see :func:`check_finite`).
    """
    part = {
        "x": [arrow_column_to_numpy(table.column(c), c) for c in feature_cols],
        "y": [arrow_column_to_numpy(table.column(c), c) for c in label_cols],
    }
    if label_cols:
        check_finite(part, "data", list(feature_cols), list(label_cols))
    return part


def _as_list(value: Any) -> list[np.ndarray]:
    if isinstance(value, (list, tuple)):
        return [np.asarray(v) for v in value]
    return [np.asarray(value)]


def _frame_column(frame: pd.DataFrame, name: str) -> np.ndarray:
    series = frame[name]
    if series.dtype == object and len(series) and isinstance(series.iloc[0], (list, tuple, np.ndarray)):
        return np.stack([np.asarray(v) for v in series])
    return series.to_numpy()


def shard_to_part(
    shard: Any, feature_cols: Sequence[str] | None, label_cols: Sequence[str] | None, where: str = "data",
    finite: bool = True
) -> Part:
    """Convert one XShards shard (a ``{"x", "y"}`` dict or a pandas DataFrame) into a part.

    A shard with labels (training or evaluation data) must hold only finite numbers (unless
    ``finite`` is False: the shard is only counted or predicted). ``where`` names the data in errors.

    Raises:
        KeyError: a named column or the ``"x"`` key is missing.
        TypeError: a shard of an unsupported type.
        ValueError: NaN or Inf in a shard with labels.
    """
    if isinstance(shard, pd.DataFrame):
        if not feature_cols:
            raise ValueError("XShards of pandas DataFrames need feature_cols (and label_cols to train).")
        missing = [c for c in list(feature_cols) + list(label_cols or []) if c not in shard.columns]
        if missing:
            raise KeyError(f"columns {missing} not found in the shard; it has {list(shard.columns)}.")
        part = {
            "x": [_frame_column(shard, c) for c in feature_cols],
            "y": [_frame_column(shard, c) for c in (label_cols or [])],
        }
        if label_cols and finite:
            check_finite(part, where, list(feature_cols), list(label_cols))
        return part
    if isinstance(shard, dict):
        if "x" not in shard:
            raise KeyError(f"an XShards shard must hold an 'x' key (and 'y' to train); it has {list(shard)}.")
        part = {"x": _as_list(shard["x"]), "y": _as_list(shard["y"]) if "y" in shard else []}
        if part["y"] and finite:
            check_finite(part, where)
        return part
    raise TypeError(
        f"XShards shards must be dicts {{'x': ..., 'y': ...}} or pandas DataFrames, not {type(shard).__name__}."
    )


def part_rows(part: Part) -> int:
    """Rows in a part (0 for an empty one)."""
    arrays = part["x"] + part["y"]
    return len(arrays[0]) if arrays else 0


def concat_parts(parts: Sequence[Part]) -> Part:
    """One part holding the rows of ``parts`` in order (parts without rows add nothing)."""
    full = [p for p in parts if part_rows(p)] or list(parts[:1])
    if len(full) == 1:
        return full[0]
    return {k: [np.concatenate([p[k][i] for p in full]) for i in range(len(full[0][k]))] for k in ("x", "y")}


def _array_name(kind: str, i: int, names: Sequence[str] | None) -> str:
    what = "feature" if kind == "x" else "label"
    if names is not None and i < len(names):
        return f"{what} column {names[i]!r}"
    return f"{what} array #{i} ('{kind}')"


def _leaves(a: np.ndarray, key: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """``("", a)`` for a plain array; ``("['k']", a['k'])``... for each field of a structured one."""
    if a.dtype.names is None:
        yield key, a
        return
    for name in a.dtype.names:
        yield from _leaves(a[name], f"{key}[{name!r}]")


def check_finite(part: Part, where: str, feature_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
    """Refuse NaN and Inf in the float arrays of a part (training and evaluation data).

    One pass over each float array; integer and boolean arrays cannot hold them.

    Raises:
        ValueError: naming the column (or array), how many values and the first row.
    """
    for kind, names in (("x", feature_names), ("y", label_names)):
        for i, whole in enumerate(part[kind]):
            for key, a in _leaves(whole):
                # a finite sum means finite values (NaN and Inf carry into it) and takes no memory; only a sum
                # that is not (a NaN, an Inf, or finite values overflowing it) needs the element-wise look
                if a.dtype.kind not in "fc" or np.isfinite(a.sum()) or np.isfinite(a).all():
                    continue
                bad = ~np.isfinite(a)
                first = int(np.argwhere(bad.reshape(len(a), -1).any(axis=1))[0][0])
                raise ValueError(
                    f"{where}: {_array_name(kind, i, names)}{key} holds {int(bad.sum())} NaN/Inf value(s) (the "
                    f"first in row {first}); a model cannot train or be scored on them. Drop or fill them first "
                    "(df.na.drop / df.na.fill, or np.nan_to_num / a mask for arrays)."
                )


def check_class_indices(labels: Any, num_classes: int, loss: str, ignore_index: int | None = None) -> None:
    """Refuse class-index labels outside ``0..num_classes-1`` for a loss that takes class indices
    (cross-entropy with integer targets): a framework either fails with an index error that names
    neither the column nor the fix, or (mxnet's ``pick``) clips the label and trains on a wrong one.

    Args:
        labels: the batch's labels (array-like of integers, any shape).
        num_classes: the model's number of outputs along the class axis.
        loss: the loss's name, for the message.
        ignore_index: a label value the loss skips (torch's ``ignore_index``, Keras's ``ignore_class``).

    Raises:
        ValueError: naming the first label out of range, the model's class count and the fix.
    """
    a = np.asarray(labels)
    if a.size == 0 or a.dtype.kind not in "biuf":
        return
    flat = a.reshape(-1)
    bad = (flat < 0) | (flat >= num_classes) | (flat != np.round(flat) if a.dtype.kind == "f" else False)
    if ignore_index is not None:
        bad &= flat != ignore_index
    if not bad.any():
        return
    first = flat[np.argmax(bad)]
    value = int(first) if float(first).is_integer() else float(first)
    raise ValueError(
        f"{loss}: label {value!r} is out of range for a model with {num_classes} outputs, which takes class "
        f"indices 0..{num_classes - 1} ({int(bad.sum())} label(s) of this batch are outside it). Re-index the labels "
        f"to 0..{num_classes - 1} (e.g. with StringIndexer, or y - y.min()), or give the model more outputs."
    )


def check_part(part: Part, need_labels: bool, where: str) -> None:
    """Validate a part: same row counts, numeric dtypes, labels present when training, and (when
    training or evaluating) only finite values.

    Raises:
        ValueError: rows differ between inputs and targets, labels are missing, or NaN/Inf.
        TypeError: a non-numeric input or target.
    """
    if need_labels and not part["y"]:
        raise ValueError(f"{where}: no labels; give label_cols (DataFrame/pandas) or a 'y' key (dict shards).")
    lengths = {len(a) for a in part["x"] + part["y"]}
    if len(lengths) > 1:
        raise ValueError(f"{where}: inputs and targets have different numbers of rows {sorted(lengths)}; pass "
                         "features and labels with one row per sample (the same length).")
    for kind in ("x", "y"):
        for i, a in enumerate(part[kind]):
            if any(leaf.dtype.kind not in "biuf" for _, leaf in _leaves(a)):
                what = "feature" if kind == "x" else "label"
                raise TypeError(
                    f"{where}: {what} #{i} has dtype {a.dtype}, which is not numeric; encode it as numbers "
                    "first (e.g. StringIndexer for a string column)."
                )
    if need_labels:
        check_finite(part, where)


def spark_select(df: Any, cols: Sequence[str]) -> Any:
    """Select ``cols``, turning ml Vector columns into arrays (Arrow cannot carry Vectors)."""
    from pyspark.sql import functions as F

    fields = {f.name: f for f in df.schema.fields}
    exprs = []
    for name in dict.fromkeys(cols):
        if type(fields[name].dataType).__name__ == "VectorUDT":
            from pyspark.ml.functions import vector_to_array

            exprs.append(vector_to_array(F.col(name)).alias(name))
        else:
            exprs.append(F.col(name))
    return df.select(*exprs)
