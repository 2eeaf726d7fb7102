"""One dispatcher from what the user passes to a :class:`DataSource` the backends can feed.

Accepted: a Spark DataFrame with ``feature_cols``/``label_cols``; an XShards of
``{"x": ..., "y": ...}`` dicts or of pandas DataFrames; a numpy array, a ``(x, y)`` tuple
or a dict of arrays; a data-creator function ``f(config, batch_size)`` returning the
framework's loader; a Ray Dataset. Anything else is rejected here, on the driver, with a
message that names the argument and what is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orca.core.engine.convert import Part, check_part, shard_to_part
from orca.core.engine.sources import (
    ArraySource,
    CreatorSource,
    DataFrameSource,
    DataSource,
    LocalShardsSource,
    RayDatasetSource,
    RayShardsSource,
    SparkShardsSource,
    file_source,
)


def _cols(value: str | Sequence[str] | None, arg: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{arg} must be a column name or a list of column names, got {value!r}.")
    return list(value)


def is_spark_df(data: Any) -> bool:
    """True for a Spark DataFrame (classic or Spark Connect)."""
    mod = type(data).__module__
    return mod.startswith("pyspark.sql") and type(data).__name__ == "DataFrame"


def _is_ray_dataset(data: Any) -> bool:
    return type(data).__module__.startswith("ray.data") and type(data).__name__ in ("Dataset", "MaterializedDataset")


def is_xshards(data: Any) -> bool:
    """True for an :class:`orca.core.data.XShards`."""
    try:
        from orca.core.data import XShards
    except ImportError:  # pragma: no cover - orca.core.data always ships
        return False
    return isinstance(data, XShards)


def _local_parts(data: Any, arg: str) -> list[Part]:
    """Normalise in-process arrays into one part."""
    if isinstance(data, np.ndarray):
        return [{"x": [data], "y": []}]
    if isinstance(data, tuple) and len(data) == 2:
        part = shard_to_part({"x": data[0], "y": data[1]}, None, None, arg)
        return [part]
    if isinstance(data, dict):
        return [shard_to_part(data, None, None, arg)]
    raise TypeError(f"{arg}: unsupported in-process data {type(data).__name__}")


def _shard_verdict(shard: Any, fcols: list[str] | None, lcols: list[str] | None, need_labels: bool,
                   arg: str) -> tuple[str, str] | None:
    """None when the shard can feed a model, else (exception type name, message)."""
    try:
        part = shard_to_part(shard, fcols, lcols, arg)
        check_part(part, need_labels, arg)
    except KeyError as exc:
        return "ValueError", f"{arg}: {exc.args[0]}"
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, f"{arg}: {exc}" if not str(exc).startswith(arg) else str(exc)
    return None


def spark_column_check(
    df: Any, feature_cols: list[str], label_cols: list[str], arg: str, allow_strings: bool = False
) -> None:
    """Check that the named DataFrame columns exist and hold numbers, arrays or ml Vectors (a label
    column may also be a ``map<string, T>`` of those: a dict of targets).

    Raises:
        ValueError: a missing column (the message lists the DataFrame's columns).
        TypeError: a column of a type no model input can take.
    """
    from pyspark.sql import types as T

    fields = {f.name: f for f in df.schema.fields}
    for role, names in (("feature", feature_cols), ("label", label_cols)):
        for name in names:
            if name not in fields:
                raise ValueError(
                    f"{arg}: {role} column {name!r} not found; the DataFrame has columns {df.columns}. "
                    f"Fix feature_cols/label_cols."
                )
            dtype = fields[name].dataType
            base = dtype
            keyed = role == "label" and isinstance(base, T.MapType) and isinstance(base.keyType, T.StringType)
            if keyed:
                base = base.valueType  # a dict of targets, {key: tensor} for the loss (convert.records)
            while isinstance(base, T.ArrayType):
                base = base.elementType
            ok = isinstance(base, (T.NumericType, T.BooleanType)) or type(base).__name__ == "VectorUDT"
            if isinstance(base, T.StringType) and allow_strings and role == "feature":
                ok = True
            if not ok:
                raise TypeError(
                    f"{arg}: {role} column {name!r} has type {dtype.simpleString()}; it must be numeric, an "
                    "array of numbers or an ml Vector. Encode it first (e.g. StringIndexer, VectorAssembler)."
                )
            if keyed:
                _check_map_keys(df, name, arg)


def _check_map_keys(df: Any, name: str, arg: str) -> None:
    """Refuse a map label column whose rows have different keys (one small Spark job over the keys):
    the loss gets one ``{key: tensor}`` per batch, so every row (on every worker) needs the same keys.

    Raises:
        ValueError: naming the column and two different key sets.
    """
    from pyspark.sql import functions as F

    keys = F.array_sort(F.map_keys(df[name])).alias("keys")
    seen = df.select(keys).where(F.col("keys").isNotNull()).distinct().limit(2).collect()
    if len(seen) > 1:
        a, b = sorted(list(r["keys"]) for r in seen)
        raise ValueError(f"{arg}: label column {name!r} holds maps with different keys ({a} in some rows, {b} in "
                         "others); every row needs the same keys (the loss gets one {key: tensor} per batch). "
                         "Fill in the missing keys or drop those rows first.")


def get_data_source(
    data: Any,
    *,
    feature_cols: str | Sequence[str] | None = None,
    label_cols: str | Sequence[str] | None = None,
    need_labels: bool,
    arg: str = "data",
    allow_creator: bool = True,
    allow_strings: bool = False,
    extra_adapters: Sequence[Callable[[Any], DataSource | None]] = (),
    stack_ray_dataset: bool = False,
) -> DataSource:
    """Validate ``data`` and wrap it in a :class:`DataSource`.

    Args:
        data: what the user passed.
        feature_cols: input columns (DataFrame, pandas XShards, Ray Dataset).
        label_cols: target columns; required with ``need_labels`` for column-based data.
        need_labels: True for fit/evaluate.
        arg: the argument's name, for messages (``data``, ``validation_data``).
        allow_creator: accept a data-creator function.
        allow_strings: accept string feature columns (frameworks with text layers).
        extra_adapters: framework hooks tried first, e.g. for a native loader instance.
        stack_ray_dataset: a Ray Dataset's feature columns of numbers as one ``(n, k)`` input
            (see :class:`~orca.core.engine.sources.RayDatasetSource`).

    Raises:
        TypeError: an unsupported type of data or of column arguments.
        ValueError: missing columns, missing labels, empty data or arrays of different lengths.
    """
    fcols = _cols(feature_cols, "feature_cols")
    lcols = _cols(label_cols, "label_cols")
    for adapter in extra_adapters:
        source = adapter(data)
        if source is not None:
            return source
    if data is None:
        raise ValueError(f"{arg} is None; pass a Spark DataFrame, an XShards, numpy arrays or a data creator.")
    if is_spark_df(data):
        if not fcols:
            raise ValueError(f"{arg} is a Spark DataFrame: give feature_cols=[...] naming the input column(s).")
        if need_labels and not lcols:
            raise ValueError(f"{arg} is a Spark DataFrame: give label_cols=[...] naming the target column(s).")
        spark_column_check(data, fcols, lcols or [], arg, allow_strings)
        return DataFrameSource(data, fcols, lcols or [])
    if _is_ray_dataset(data):
        if not fcols:
            raise ValueError(f"{arg} is a Ray Dataset: give feature_cols=[...].")
        if need_labels and not lcols:
            raise ValueError(f"{arg} is a Ray Dataset: give label_cols=[...].")
        names = data.schema().names
        missing = [c for c in fcols + (lcols or []) if c not in names]
        if missing:
            raise ValueError(f"{arg}: columns {missing} not found; the Ray Dataset has columns {names}.")
        return RayDatasetSource(data, fcols, lcols or [], stack_columns=stack_ray_dataset)
    if is_xshards(data):
        # read_parquet's / read_csv's XShards: checked against what the driver read of the files (Parquet
        # footers, CSV headers and first rows), read by the workers themselves
        source = file_source(data, fcols, lcols, need_labels, arg, allow_strings)
        if source is not None:
            return source
        # validate the first shard where it lives; only the verdict comes back
        labels = lcols if need_labels else (lcols or [])
        try:
            verdict = data._first_map(lambda shard: _shard_verdict(shard, fcols, labels, need_labels, arg))
        except IndexError:
            raise ValueError(f"{arg} is an empty XShards (no shards); pass one with at least one shard of "
                             "rows.") from None
        if verdict is not None:
            kind, message = verdict
            raise {"TypeError": TypeError}.get(kind, ValueError)(message)
        if hasattr(data, "rdd"):
            return SparkShardsSource(data, fcols, lcols)
        return (RayShardsSource if hasattr(data, "refs") else LocalShardsSource)(data, fcols, lcols)
    if isinstance(data, (np.ndarray, dict)) or (isinstance(data, tuple) and len(data) == 2):
        try:
            parts = _local_parts(data, arg)
        except KeyError as exc:
            raise ValueError(f"{arg}: {exc.args[0]}") from None
        check_part(parts[0], need_labels, arg)
        rows = len(parts[0]["x"][0]) if parts[0]["x"] else 0
        if rows == 0:
            raise ValueError(f"{arg} is empty (0 rows); pass at least one row (check the slice or filter "
                             "that made it).")
        return ArraySource(parts, num_rows=rows)
    if callable(data):
        if not allow_creator:
            raise TypeError(f"{arg}: a data-creator function is not accepted here: this call takes data (a Spark "
                            "DataFrame, an XShards or arrays); pass the data itself.")
        return CreatorSource(data)
    raise TypeError(
        f"{arg} of type {type(data).__name__} is not supported; pass a Spark DataFrame (with feature_cols/"
        "label_cols), an XShards, a numpy array / dict {'x':..., 'y':...} / (x, y) tuple, a Ray Dataset, or a "
        "function f(config, batch_size) returning a data loader."
    )
