"""Prediction where the data lives: Spark DataFrames and Spark-backed XShards stay on the
executors, with the model broadcast once and built once per Python worker; the result is
the same container with a ``prediction`` column/key (or one per ``output_cols``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from orca.core.engine.addrspace import economize
from orca.core.engine.callbacks import Callback, callbacks_blob, load_callbacks
from orca.core.engine.connect import is_connect, launch_context
from orca.core.engine.convert import shard_to_part, spark_select, table_to_part, user_value
from orca.core.engine.feed import Feed
from orca.core.engine.loop import run_predict
from orca.core.engine.runner import solo_runner
from orca.core.engine.spark_backend import broadcast_runner, cached_runner, runner_digest


def _arrow_type(arr: np.ndarray) -> Any:
    """The Arrow type of an output's column: its dtype in one list per dimension past the rows; a
    structured (dict) output is a struct of its keys (see :func:`_value_type`)."""
    import pyarrow as pa

    base = _struct_type(arr.dtype) if arr.dtype.names is not None else pa.from_numpy_dtype(arr.dtype)
    for _ in range(arr.ndim - 1):
        base = pa.list_(base)
    return base


def _struct_type(dtype: np.dtype) -> Any:
    """A dict output's struct: a field per key, each its value's type (:func:`_value_type`)."""
    import pyarrow as pa

    return pa.struct([pa.field(k, _value_type(dtype[k])) for k in dtype.names or ()])


def _value_type(sub: np.dtype) -> Any:
    """The type of one key of a dict output: its values per row, a ``(1,)`` row squeezed to a
    number as a top-level ``(n, 1)`` output is."""
    import pyarrow as pa

    base = _struct_type(sub.base) if sub.base.names is not None else pa.from_numpy_dtype(sub.base)
    for _ in (sub.shape if sub.shape != (1,) else ()):
        base = pa.list_(base)
    return base


def _arrow_column(arr: np.ndarray, typ: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_struct(typ):
        children = []
        for field in typ:
            value = arr[field.name]
            if value.ndim == 2 and value.shape[1] == 1 and not pa.types.is_list(field.type):
                value = value[:, 0]
            children.append(_arrow_column(np.ascontiguousarray(value), field.type))
        return pa.StructArray.from_arrays(children, fields=list(typ))
    if arr.ndim == 1:
        return pa.array(arr, type=typ)
    flat: Any = pa.array(arr.reshape(-1), type=pa.from_numpy_dtype(arr.dtype))
    for dim in reversed(arr.shape[1:]):
        offsets = np.arange(0, len(flat) + 1, dim, dtype=np.int32)
        flat = pa.ListArray.from_arrays(pa.array(offsets), flat)
    return flat.cast(typ)


def output_names(n_outputs: int, output_cols: Sequence[str] | None) -> list[str]:
    """Column names for the model's outputs: ``prediction`` or the user's ``output_cols``.

    Raises:
        ValueError: ``output_cols`` does not match the number of outputs.
    """
    if output_cols is None:
        return ["prediction"] if n_outputs == 1 else [f"prediction_{i}" for i in range(n_outputs)]
    if len(output_cols) != n_outputs:
        raise ValueError(f"output_cols={list(output_cols)} names {len(output_cols)} columns but the model "
                         f"returns {n_outputs} output(s).")
    return list(output_cols)


#: output columns learnt by a one-row probe, per (runner digest, feature column types): a model
#: that predicts again with the same weights on the same kind of DataFrame skips the probe job
_PROBES: dict[tuple[Any, ...], tuple[int, list[bool], list[Any]]] = {}
_PROBES_KEPT = 16


def _probe_outputs(runner_cls: Any, spec: dict[str, Any], state: Any, df: Any, feature_cols: list[str],
                   key: tuple[Any, ...], callbacks: Sequence[Callback] = ()) -> tuple[int, list[bool], list[Any]]:
    """(number of outputs, which are squeezed (n, 1) outputs, their Arrow types), from one row
    predicted on the driver (with ``callbacks`` bound: a custom prediction step's mistakes fail
    here, on the driver, before any Spark job), or from the cache."""
    hit = _PROBES.get(key)
    if hit is not None:
        return hit
    from orca.core.data._arrow import collect_arrow

    probe_tbl = collect_arrow(spark_select(df, feature_cols).limit(1))
    if probe_tbl.num_rows == 0:
        raise ValueError("predict: the DataFrame is empty, so the model's output columns cannot be inferred; "
                         "predict a DataFrame with at least one row.")
    probe_part = table_to_part(probe_tbl, feature_cols, [])
    # (copies of the callbacks: the caller's objects stay unbound, as they were)
    probe = run_predict(solo_runner(runner_cls, spec, state), Feed(probe_part["x"]), 1,
                        load_callbacks(callbacks_blob(callbacks)))
    # a numeric (n, k) output, k = 1 too, becomes an ml DenseVector per row, as the reference's did
    # (:func:`_as_ml_vectors`); another (n, 1) output (strings, booleans) a value per row
    squeeze = [p.ndim == 2 and p.shape[1] == 1 and not (p.dtype.names is None and p.dtype.kind in "iuf")
               for p in probe]
    types = [_arrow_type(p[:, 0] if sq else p) for p, sq in zip(probe, squeeze, strict=True)]
    if len(_PROBES) >= _PROBES_KEPT:
        _PROBES.pop(next(iter(_PROBES)))
    _PROBES[key] = (len(probe), squeeze, types)
    return _PROBES[key]


def predict_dataframe(runner_cls: Any, spec: dict[str, Any], state: Any, df: Any, feature_cols: list[str],
                      batch_size: int, output_cols: Sequence[str] | None, threads: int,
                      callbacks: Sequence[Callback] = ()) -> Any:
    """Return ``df`` with prediction column(s), computed lazily on the executors.

    The output schema comes from predicting one row on the driver (a ``limit(1)`` job), once
    per model state, feature column types and ``callbacks``: an empty DataFrame can be predicted
    only after that (it then gives an empty result). Each Python worker keeps the model it built
    for the next call with the same state; ``callbacks`` are bound to it for each batch.

    Each top-level output is one column (named by ``output_cols``, else ``prediction`` or
    ``prediction_<i>``), laid out as the reference's: an ``(n,)`` output a number per row, a
    numeric ``(n, k)`` output (``k = 1`` too) an ml ``DenseVector`` per row, an ``(n, k, m, ...)``
    one nested arrays, a dict output (a structured array, see
    :func:`orca.core.engine.convert.records`) a struct with a field per key. Several outputs without
    ``output_cols`` share one ``prediction`` column, an array of each row's outputs (each an array
    of numbers), when each is a number or a vector per row.
    """
    import pyarrow as pa
    from pyspark.sql import SparkSession

    spark = df.sparkSession if is_connect(df) else SparkSession.getActiveSession() or df.sparkSession
    bc = broadcast_runner(launch_context(spark), runner_cls, spec, state, threads)
    blob = callbacks_blob(callbacks)
    try:
        key = (bc.value[0], tuple((c, df.schema[c].dataType.simpleString()) for c in feature_cols),
               runner_digest(blob) if blob else None)
        n_outputs, squeeze, types = _probe_outputs(runner_cls, spec, state, df, feature_cols, key, callbacks)
        # several outputs, no output_cols: one ``prediction`` column of each row's outputs, as the reference
        joined = _joined_type(types) if output_cols is None and n_outputs > 1 else None
        names = ["prediction"] if joined is not None else output_names(n_outputs, output_cols)
        col_types = [joined] if joined is not None else types
        clash = [n for n in names if n in df.columns]
        if clash:
            raise ValueError(f"predict: output column(s) {clash} already exist in the DataFrame; "
                             "pass output_cols=[...].")
    except BaseException:
        bc.destroy()
        raise

    def predict_batch(rb: pa.RecordBatch, cols: list[str], cbs: Sequence[Callback]) -> list[Any]:
        if rb.num_rows == 0:
            return [pa.array([], type=typ) for typ in col_types]
        outs = run_predict(cached_runner(bc), Feed(table_to_part(rb, cols, [])["x"]), batch_size, cbs)
        if joined is not None:
            return [_joined_column(outs, joined)]
        return [_arrow_column(arr[:, 0] if sq else arr, typ)
                for arr, typ, sq in zip(outs, types, squeeze, strict=True)]

    if len(names) == 1:
        try:
            from pyspark.sql.functions import ArrowUDFType, arrow_udf  # Spark >= 4.1
        except ImportError:
            pass
        else:
            return _as_ml_vectors(
                _predict_with_arrow_udf(df, feature_cols, names[0], col_types[0], predict_batch, arrow_udf,
                                        ArrowUDFType.SCALAR_ITER, blob), names, col_types)
    # Several outputs, or Spark < 4.1: every column goes through Python and back. ml Vector
    # columns cannot cross Arrow, so only they get an array copy; other columns are read as
    # they are (a copy of each sent every feature to the Python workers twice).
    tmp = [f"__orca_x{i}" if _is_vector(df, c) else c for i, c in enumerate(feature_cols)]
    copies = [_as_array(df, c).alias(t) for c, t in zip(feature_cols, tmp, strict=True) if t != c]
    inner = df.select("*", *copies) if copies else df
    out_schema = _to_spark_schema(df, names, col_types)
    keep = list(df.columns)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        economize()
        cbs = load_callbacks(blob)
        for rb in batches:
            if rb.num_rows == 0:
                continue
            cols = [rb.column(rb.schema.get_field_index(c)) for c in keep]
            yield pa.RecordBatch.from_arrays(cols + predict_batch(rb, tmp, cbs), names=keep + names)

    return _as_ml_vectors(inner.mapInArrow(task, out_schema), names, col_types)


def _numeric(typ: Any) -> bool:
    """Whether an Arrow type is a number (an ml Vector holds numbers only: not booleans, not strings)."""
    import pyarrow as pa

    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ))


def _as_ml_vectors(out: Any, names: list[str], types: list[Any]) -> Any:
    """The reference's layout of the prediction columns: a column of one numeric vector per row
    becomes ml ``DenseVector`` s (``pyspark.ml.functions.array_to_vector``, on the JVM).

    The joined ``prediction`` column of several outputs stays an array of arrays, where the
    reference's was an array of vectors: Spark 4's Arrow ``toPandas`` cannot convert an array of
    vectors of different lengths (``ValueError: ... inhomogeneous shape``), the common case of a
    model with heads of different widths."""
    import pyarrow as pa
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    for name, typ in zip(names, types, strict=True):
        if pa.types.is_list(typ) and _numeric(typ.value_type):
            out = out.withColumn(name, array_to_vector(F.col(name)))
    return out


def _joined_type(types: list[Any]) -> Any:
    """The Arrow type of one column holding every output of a row (``list<list<T>>``: output ``i``
    is the row's ``(k_i,)`` vector, a number as a ``(1,)`` one, as the reference's list of
    vectors), or None when an output is not numeric or has more than one dimension per row (those
    keep a column each: ``prediction_<i>``)."""
    import pyarrow as pa

    values = []
    for typ in types:
        if _numeric(typ):
            values.append(typ)
        elif pa.types.is_list(typ) and _numeric(typ.value_type):
            values.append(typ.value_type)
        else:
            return None
    common = np.result_type(*[t.to_pandas_dtype() for t in values])
    return pa.list_(pa.list_(pa.from_numpy_dtype(common)))


def _joined_column(outs: list[np.ndarray], typ: Any) -> Any:
    """Row ``r`` of the result: ``[outs[0][r], outs[1][r], ...]``, each output a ``(n, k_i)`` array."""
    import pyarrow as pa

    dtype = typ.value_type.value_type.to_pandas_dtype()
    n, widths = len(outs[0]), [int(np.prod(o.shape[1:])) for o in outs]
    flat = np.concatenate([o.reshape(n, -1).astype(dtype, copy=False) for o in outs], axis=1).reshape(-1)
    inner = np.concatenate([[0], np.cumsum(np.tile(widths, n))]).astype(np.int32)
    vectors = pa.ListArray.from_arrays(pa.array(inner), pa.array(flat, type=typ.value_type.value_type))
    rows = pa.ListArray.from_arrays(pa.array(np.arange(0, n * len(outs) + 1, len(outs), dtype=np.int32)), vectors)
    return rows.cast(typ)


def _predict_with_arrow_udf(df: Any, feature_cols: list[str], name: str, typ: Any, predict_batch: Any,
                            arrow_udf: Any, scalar_iter: Any, blob: bytes | None) -> Any:
    """One output column through an Arrow UDF: only the features travel to Python and only the
    predictions come back (``mapInArrow`` sends every column both ways; measured on a 784-float
    feature column: 0.93 -> 1.07 of ``predict_batch_udf``, see docs/benchmarks.md)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    # the struct's fields keep the user's names, so that an error in the worker names the column
    fields = list(feature_cols) if len(set(feature_cols)) == len(feature_cols) else \
        [f"f{i}" for i in range(len(feature_cols))]

    def task(arrays: Iterator[Any]) -> Iterator[Any]:
        economize()
        cbs = load_callbacks(blob)
        for arr in arrays:
            yield predict_batch(pa.RecordBatch.from_struct_array(arr), fields, cbs)[0]

    with warnings.catch_warnings():  # it prefers type hints; ours would need pyarrow at import time
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(task, returnType=_to_spark_schema(df.select([]), [name], [typ]).fields[0].dataType,
                        functionType=scalar_iter)
    return df.withColumn(name, udf(F.struct(*[_as_array(df, c).alias(f) for c, f in
                                              zip(feature_cols, fields, strict=True)])))


def _is_vector(df: Any, name: str) -> bool:
    return type(df.schema[name].dataType).__name__ == "VectorUDT"


def _as_array(df: Any, name: str) -> Any:
    from pyspark.sql import functions as F

    if _is_vector(df, name):
        from pyspark.ml.functions import vector_to_array

        return vector_to_array(F.col(name))
    return F.col(name)


def _to_spark_schema(df: Any, names: list[str], types: list[Any]) -> Any:
    from pyspark.sql import types as T

    def conv(t: Any) -> Any:
        import pyarrow as pa

        if pa.types.is_list(t):
            return T.ArrayType(conv(t.value_type))
        if pa.types.is_struct(t):
            return T.StructType([T.StructField(f.name, conv(f.type)) for f in t])
        return {
            pa.float32(): T.FloatType(), pa.float64(): T.DoubleType(), pa.int64(): T.LongType(),
            pa.int32(): T.IntegerType(), pa.int16(): T.ShortType(), pa.int8(): T.ByteType(),
            pa.bool_(): T.BooleanType(),
        }.get(t, T.DoubleType())

    fields = list(df.schema.fields) + [T.StructField(n, conv(t)) for n, t in zip(names, types, strict=True)]
    return T.StructType(fields)


def add_predictions(shard: Any, outs: list[np.ndarray], output_cols: Sequence[str] | None) -> Any:
    """Attach predictions to a shard: a key of a dict, or column(s) of a pandas DataFrame.

    A dict output (a structured array) becomes a dict of arrays in a dict shard, and a column of
    per-row dicts in a pandas shard (a ``(1,)`` value squeezed to a number, as a Spark struct's).
    """
    names = output_names(len(outs), output_cols)
    if isinstance(shard, pd.DataFrame):
        shard = shard.copy()
        for name, arr in zip(names, outs, strict=True):
            if arr.dtype.names is not None:
                shard[name] = _row_dicts(arr)
                continue
            if arr.ndim == 2 and arr.shape[1] == 1:
                arr = arr[:, 0]
            shard[name] = list(arr) if arr.ndim > 1 else arr
        return shard
    out = dict(shard)
    if output_cols is None and len(outs) > 1:
        out["prediction"] = user_value(list(outs))
    else:
        for name, arr in zip(names, outs, strict=True):
            out[name] = user_value(arr)
    return out


def _row_dicts(arr: np.ndarray) -> list[dict[str, Any]]:
    """Each row of a structured array as ``{key: value}`` (nested records as nested dicts)."""
    assert arr.dtype.names is not None
    columns: dict[str, list[Any]] = {}
    for key in arr.dtype.names:
        value = arr[key]
        if value.dtype.names is not None:
            columns[key] = _row_dicts(value)
            continue
        if value.ndim == 2 and value.shape[1] == 1:
            value = value[:, 0]
        columns[key] = list(value)
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def predict_spark_shards(runner_cls: Any, spec: dict[str, Any], state: Any, shards: Any,
                         feature_cols: list[str] | None, batch_size: int, output_cols: Sequence[str] | None,
                         threads: int, callbacks: Sequence[Callback] = ()) -> Any:
    """Predict a Spark-backed XShards on the executors (``callbacks`` bound to each executor's
    runner); returns a Spark-backed XShards."""
    rdd = shards.rdd
    bc = broadcast_runner(rdd.context, runner_cls, spec, state, threads)
    blob = callbacks_blob(callbacks)

    def task(items: Iterator[Any]) -> Iterator[Any]:
        economize()
        runner = cached_runner(bc)
        cbs = load_callbacks(blob)
        for shard in items:
            part = shard_to_part(shard, feature_cols, None, finite=False)
            outs = run_predict(runner, Feed(part["x"]), batch_size, cbs)
            if not outs:  # an empty shard: no batch ran, so the outputs' shapes are unknown here
                outs = [np.empty((0,), np.float32)] * (len(output_cols) if output_cols else 1)
            yield add_predictions(shard, outs, output_cols)

    return type(shards)(rdd.mapPartitions(task))
