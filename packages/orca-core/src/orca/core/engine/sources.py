"""Typed data sources: one class per kind of input, each knowing how its rows reach a worker.

The dispatcher (:func:`orca.core.engine.adapters.get_data_source`) validates what the user
passed and wraps it in one of these. A launcher then asks the source for its rows in the
launcher's terms: :meth:`DataSource.ray_refs` (parts in Ray's object store, for actors),
:meth:`DataSource.spark_frame` / :meth:`DataSource.spark_parts` (for Spark tasks), and the
Estimator asks it to predict where its rows live (:attr:`DataSource.on_executors`) and to
wrap predictions in the container it came in (:meth:`DataSource.with_predictions`).

A source whose workers can read their rows themselves (the Parquet row groups of
``read_parquet``'s XShards, the files of ``read_csv``'s) gives each worker a :class:`WorkerRead` instead
(:meth:`DataSource.worker_reads`): only that small description travels, and the worker streams
its rows into the same :func:`~orca.core.engine.spill.arrow_feed_builder` a DataFrame's Arrow
batches go to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from orca.core.engine.convert import Part, concat_parts, part_rows, shard_to_part, spark_select, table_to_part
from orca.core.engine.feed import balanced_slices, cut_part
from orca.core.engine.reads import WorkerRead
from orca.core.engine.spill import feed_memory_bytes, shuffle_window_bytes


class DataSource:
    """Validated input data, ready for a launcher.

    Attributes:
        obj: the DataFrame, XShards, list of parts, creator function or Ray Dataset.
        feature_cols: input column names (DataFrame, pandas shards, Ray Dataset).
        label_cols: target column names.
        num_rows: rows when known without a pass over the data (``None`` otherwise).
    """

    #: a function the workers call for their own loader (no rows travel)
    is_creator = False
    #: predicted on the Spark executors, where the rows are (the result stays there too)
    on_executors = False
    #: a short name for messages
    what = "data"

    def __init__(self, obj: Any, feature_cols: Sequence[str] | None = None,
                 label_cols: Sequence[str] | None = None, num_rows: int | None = None) -> None:
        self.obj = obj
        self.feature_cols = list(feature_cols) if feature_cols is not None else None
        self.label_cols = list(label_cols) if label_cols is not None else None
        self.num_rows = num_rows

    def columns(self, need_labels: bool) -> tuple[list[str], list[str]]:
        """Feature and (when ``need_labels``) label column names."""
        return list(self.feature_cols or []), list(self.label_cols or []) if need_labels else []

    def example_features(self, rows: int = 2) -> list[np.ndarray] | None:
        """The features of the first ``rows`` rows, as the workers read them (for an MLflow
        model's input example); ``None`` where the driver cannot see the data (a data creator)."""
        return None

    # ------------------------------------------------------------ Ray
    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        """``(object ref of a part, rows)`` for each part, in order, in Ray's object store."""
        raise TypeError(f"{self.what} cannot be read by Ray workers.")

    # ------------------------------------------------------------ Spark
    def spark_frame(self, need_labels: bool) -> Any:
        """The selected columns as a Spark DataFrame (``None``: this source is not a DataFrame)."""
        return None

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        """An RDD of parts, at least one element per task slot where the data allows."""
        raise TypeError(f"the spark launcher cannot read {self.what} here; pass a DataFrame or an XShards.")

    def spark_worker_parts(self, spark: Any, world: int, need_labels: bool) -> Any:
        """An RDD of ``(worker, part)``: the parts each of ``world`` training workers reads (a
        part may be a :class:`WorkerRead`)."""
        return self.spark_parts(spark, need_labels).zipWithIndex().map(lambda t: (t[1] % world, t[0]))

    def worker_reads(self, world: int, need_labels: bool) -> list[WorkerRead] | None:
        """What each of ``world`` workers reads itself, by rank (``None``: the rows travel to the
        workers as parts)."""
        return None

    # ------------------------------------------------------------ predict
    def predict_on_executors(self, runner_cls: Any, spec: dict[str, Any], state: Any, batch_size: int,
                             output_cols: Sequence[str] | None, threads: int,
                             callbacks: Sequence[Any] = ()) -> Any:
        """Predict on the Spark executors (sources with :attr:`on_executors`), ``callbacks`` bound to
        each executor's runner."""
        raise NotImplementedError

    def with_predictions(self, outs: list[np.ndarray], output_cols: Sequence[str] | None) -> Any:
        """The predictions in the input's container: arrays for in-memory data (one, or a list)."""
        return outs[0] if len(outs) == 1 else outs


#: the most bytes of a DataFrame partition's Arrow batches a Spark task puts into Ray as one object
#: (a partition becomes several): the task moving a partition never holds it whole (a cached
#: DataFrame's partition can be gigabytes; issue #37), and a Ray actor loads its share a block at a time
PUT_BLOCK_BYTES = 32 * 2**20


def put_block_bytes(memory_bytes: int) -> int:
    """The most bytes of Arrow batches put into Ray as one object for workers given
    ``memory_bytes`` (``worker_data_memory_mb``): :data:`PUT_BLOCK_BYTES`, or a streamed share's
    window where that is smaller (so the task's memory follows the setting, as a worker's does)."""
    return min(PUT_BLOCK_BYTES, shuffle_window_bytes(memory_bytes))


class DataFrameSource(DataSource):
    """A Spark DataFrame with ``feature_cols`` / ``label_cols``."""

    on_executors = True
    what = "a Spark DataFrame"

    def spark_frame(self, need_labels: bool) -> Any:
        fcols, lcols = self.columns(need_labels)
        return spark_select(self.obj, fcols + lcols)

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        import pyarrow as pa

        fcols, lcols = self.columns(need_labels)
        put = _ray_putter()
        block_bytes = put_block_bytes(feed_memory_bytes())

        def blocks(batches: Iterator[pa.RecordBatch]) -> Iterator[Part]:
            pending: list[pa.RecordBatch] = []
            size = 0
            for batch in batches:
                if batch.num_rows:
                    pending.append(batch)
                    size += batch.nbytes
                if size >= block_bytes:
                    yield table_to_part(pa.Table.from_batches(pending), fcols, lcols)
                    pending, size = [], 0
            if pending:
                yield table_to_part(pa.Table.from_batches(pending), fcols, lcols)

        def put_arrow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for blob, n in put(blocks(batches)):
                yield pa.RecordBatch.from_pydict({"ref": [blob], "rows": [n]})

        with _spark_errors("reading the data into Ray"):
            rows = self.spark_frame(need_labels).mapInArrow(put_arrow, "ref binary, rows long").collect()
        return _loaded([(r["ref"], int(r["rows"])) for r in rows])

    def example_features(self, rows: int = 2) -> list[np.ndarray] | None:
        fcols, _ = self.columns(False)
        from orca.core.data._arrow import collect_arrow

        table = collect_arrow(self.spark_frame(False).limit(rows))
        return table_to_part(table, fcols, [])["x"] if table.num_rows else None

    def predict_on_executors(self, runner_cls: Any, spec: dict[str, Any], state: Any, batch_size: int,
                             output_cols: Sequence[str] | None, threads: int,
                             callbacks: Sequence[Any] = ()) -> Any:
        from orca.core.engine.predict import predict_dataframe

        return predict_dataframe(runner_cls, spec, state, self.obj, list(self.feature_cols or []), batch_size,
                                 output_cols, threads, callbacks)


class ShardsSource(DataSource):
    """XShards of ``{"x", "y"}`` dicts or pandas DataFrames."""

    what = "an XShards"

    def _part(self, shard: Any, need_labels: bool) -> Part:
        return shard_to_part(shard, self.feature_cols, self.label_cols if need_labels else None)

    def example_features(self, rows: int = 2) -> list[np.ndarray] | None:
        fcols = self.feature_cols
        try:
            x = self.obj._first_map(lambda shard: [a[:rows] for a in shard_to_part(shard, fcols, None, finite=False)["x"]])
        except IndexError:  # no shards
            return None
        return list(x) if x and len(x[0]) else None

    def with_predictions(self, outs: list[np.ndarray], output_cols: Sequence[str] | None) -> Any:
        from orca.core.data import XShards
        from orca.core.engine.predict import add_predictions

        result, start = [], 0
        for shard in self.obj.collect():
            n = part_rows(shard_to_part(shard, self.feature_cols, None, finite=False))
            result.append(add_predictions(shard, [o[start:start + n] for o in outs], output_cols))
            start += n
        return XShards.from_list(result, backend=self.result_backend)

    result_backend = "local"


class SparkShardsSource(ShardsSource):
    """An XShards backed by a Spark RDD."""

    on_executors = True

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        fcols, lcols = self.feature_cols, self.label_cols if need_labels else None
        return self.obj.rdd.map(lambda s: shard_to_part(s, fcols, lcols))

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        fcols, lcols = self.feature_cols, self.label_cols if need_labels else None
        put = _ray_putter()
        rdd = self.obj.rdd.map(lambda shard: shard_to_part(shard, fcols, lcols))
        with _spark_errors("reading the data into Ray"):
            blobs = rdd.mapPartitions(put).collect()
        return _loaded(blobs)

    def predict_on_executors(self, runner_cls: Any, spec: dict[str, Any], state: Any, batch_size: int,
                             output_cols: Sequence[str] | None, threads: int,
                             callbacks: Sequence[Any] = ()) -> Any:
        from orca.core.engine.predict import predict_spark_shards

        return predict_spark_shards(runner_cls, spec, state, self.obj, self.feature_cols, batch_size, output_cols,
                                    threads, callbacks)


class RayShardsSource(ShardsSource):
    """An XShards whose shards are Ray objects."""

    result_backend = "ray"

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        fcols, lcols = self.feature_cols, self.label_cols if need_labels else None
        return _convert_on_ray(self.obj.refs, lambda shards: concat_parts([shard_to_part(s, fcols, lcols)
                                                                           for s in shards]))

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        local = [self._part(s, need_labels) for s in self.obj.collect()]
        return spark.sparkContext.parallelize(local, max(1, len(local)))


class LocalShardsSource(ShardsSource):
    """An XShards held in this process."""

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        import ray

        parts = [self._part(s, need_labels) for s in self.obj.collect()]
        return [(ray.put(p), part_rows(p)) for p in parts]

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        local = [self._part(s, need_labels) for s in self.obj.collect()]
        return spark.sparkContext.parallelize(local, max(1, len(local)))


class FileShardsSource(ShardsSource):
    """The XShards of ``read_parquet``, ``read_csv`` or ``read_json`` (lines), untransformed: each
    worker reads its own part of the files.

    The files are split between the workers by their origin (Parquet: by rows, contiguously, at
    row-group boundaries; CSV / JSON: by bytes, at file boundaries), the same on every launcher.
    Prediction on the Spark executors (Spark XShards) reads the frames, as before: its result
    holds them.
    """

    def __init__(self, obj: Any, feature_cols: Sequence[str], label_cols: Sequence[str]) -> None:
        from orca.core.data._origin import LazyRayXShards, file_origin

        origin = file_origin(obj)
        assert origin is not None
        super().__init__(obj, feature_cols, label_cols, num_rows=origin.num_rows)
        self.origin = origin
        self.on_executors = hasattr(obj, "rdd")  # Spark XShards: predicted where the frames are, as before
        self.result_backend = "ray" if isinstance(obj, LazyRayXShards) else "local"

    def worker_reads(self, world: int, need_labels: bool) -> list[WorkerRead]:
        fcols, lcols = self.columns(need_labels)
        reader = self.origin.batch_reader()
        return [WorkerRead(pieces, fcols, lcols, reader) for pieces in self.origin.split(world)]

    def spark_worker_parts(self, spark: Any, world: int, need_labels: bool) -> Any:
        reads = self.worker_reads(world, need_labels)
        return spark.sparkContext.parallelize(list(enumerate(reads)), world)

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        # evaluation and prediction need no barrier: one task per slot, each reading its share
        slots = max(1, spark.sparkContext.defaultParallelism)
        reads = [r for r in self.worker_reads(slots, need_labels) if r.pieces]
        return spark.sparkContext.parallelize(reads, max(1, len(reads)))

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        raise TypeError("the workers read the files themselves (worker_reads); no parts go to Ray.")

    def example_features(self, rows: int = 2) -> list[np.ndarray] | None:
        fcols, _ = self.columns(False)
        pieces = [p for share in self.origin.split(1) for p in share]
        batch = next(iter(self.origin.batch_reader()(pieces, fcols, batch_rows=rows)), None)
        return table_to_part(batch, fcols, [])["x"] if batch is not None else None

    def predict_on_executors(self, runner_cls: Any, spec: dict[str, Any], state: Any, batch_size: int,
                             output_cols: Sequence[str] | None, threads: int,
                             callbacks: Sequence[Any] = ()) -> Any:
        from orca.core.engine.predict import predict_spark_shards

        return predict_spark_shards(runner_cls, spec, state, self.obj, self.feature_cols, batch_size, output_cols,
                                    threads, callbacks)


#: Arrow types a worker turns into model inputs: numbers and booleans, maybe in (nested) lists
def _streamable(arrow_type: Any, allow_strings: bool) -> bool:
    import pyarrow as pa

    t = arrow_type
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return allow_strings and t is arrow_type
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def file_source(data: Any, feature_cols: list[str] | None, label_cols: list[str] | None, need_labels: bool,
                arg: str, allow_strings: bool = False) -> FileShardsSource | None:
    """A :class:`FileShardsSource` for the untransformed XShards of ``read_parquet``, ``read_csv`` or
    ``read_json`` (lines), checked on the driver against what was read of the files there
    (Parquet footers; CSV headers and first rows); ``None`` for any other data, or for columns of
    a type the workers cannot stream (the frames are read as before, and checked as any pandas
    XShards).

    Raises:
        ValueError: no ``feature_cols`` (or ``label_cols`` where needed), a column a file lacks
            (named, with the file's columns), or files without rows.
    """
    from orca.core.data._origin import file_origin

    origin = file_origin(data)
    if origin is None:
        return None
    reader, kind = origin.reader, origin.kind
    if not feature_cols:
        raise ValueError(f"{arg} is an XShards of pandas DataFrames ({reader}): give feature_cols=[...] "
                         "naming the input column(s).")
    if need_labels and not label_cols:
        raise ValueError(f"{arg}: no labels; give label_cols=[...] naming the target column(s) of the {kind} "
                         "files.")
    labels = label_cols or []
    missing = origin.missing(feature_cols + labels)
    if missing is not None:
        path, lacking, have = missing
        roles = ["feature" if c in feature_cols else "label" for c in lacking]
        named = ", ".join(f"{r} column {c!r}" for r, c in zip(roles, lacking, strict=True))
        option = "columns" if kind == "Parquet" else "usecols"
        read_with = f" (read with {option}={list(origin.columns)})" if origin.columns is not None else ""
        raise ValueError(f"{arg}: {named} not found; the {kind} file {path!r} has columns {have}{read_with}. "
                         "Fix feature_cols/label_cols" + (f" or {reader}'s {option}=" if read_with else "") + ".")
    if origin.empty:
        raise ValueError(f"{arg} is empty (0 rows in its {origin.num_files} {kind} file(s)); pass files with at "
                         "least one row.")
    types = origin.column_types()
    if not all(_streamable(types[c], allow_strings and c in feature_cols) for c in feature_cols + labels):
        return None
    return FileShardsSource(data, feature_cols, labels)


class ArraySource(DataSource):
    """In-process arrays (numpy, ``(x, y)``, ``{"x", "y"}``), normalised into parts."""

    what = "in-memory arrays"

    def example_features(self, rows: int = 2) -> list[np.ndarray] | None:
        part = next((p for p in self.obj if part_rows(p)), None)
        return [a[:rows] for a in part["x"]] if part is not None else None

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        import ray

        return [(ray.put(p), part_rows(p)) for p in self.obj]

    def spark_parts(self, spark: Any, need_labels: bool) -> Any:
        parts = self.obj
        slots = spark.sparkContext.defaultParallelism
        if len(parts) == 1 and part_rows(parts[0]) >= slots:
            p = parts[0]
            idx = np.array_split(np.arange(part_rows(p)), slots)
            parts = [{"x": [a[i] for a in p["x"]], "y": [a[i] for a in p["y"]]} for i in idx]
        return spark.sparkContext.parallelize(parts, len(parts))

    def spark_worker_parts(self, spark: Any, world: int, need_labels: bool) -> Any:
        # the contiguous, balanced row ranges the Ray launcher reads too: the same rows per rank
        slices = balanced_slices([(p, part_rows(p)) for p in self.obj], world)
        items = [(w, cut_part(p, lo, hi)) for w, share in enumerate(slices) for p, lo, hi in share]
        return spark.sparkContext.parallelize(items, max(1, min(len(items), world)))


class CreatorSource(DataSource):
    """A data-creator function ``f(config, batch_size)`` each worker calls for its own loader."""

    is_creator = True
    what = "a data-creator function"


class RayDatasetSource(DataSource):
    """A Ray Dataset with ``feature_cols`` / ``label_cols``.

    With ``stack_columns`` (a framework whose reference read Ray Datasets through Ray's
    ``to_torch``), the feature columns reach the model as one ``(n, k)`` input when every one is a
    number a row (``k`` columns side by side); see :func:`stacked_columns`.
    """

    what = "a Ray Dataset"

    def __init__(self, obj: Any, feature_cols: Sequence[str] | None = None, label_cols: Sequence[str] | None = None,
                 stack_columns: bool = False) -> None:
        super().__init__(obj, feature_cols, label_cols)
        self.stack_columns = stack_columns

    @property
    def pending(self) -> bool:
        """True while the dataset has transforms that have not run yet."""
        return type(self.obj).__name__ != "MaterializedDataset"

    def materialize(self) -> None:
        """Run the pending transforms (their tasks need CPUs: call it while no actor holds them)."""
        if self.pending:
            fcols, lcols = self.columns(True)
            self.obj = self.obj.select_columns(fcols + [c for c in lcols if c not in fcols]).materialize()

    def ray_refs(self, need_labels: bool) -> list[tuple[Any, int]]:
        import pyarrow as pa

        fcols, lcols = self.columns(need_labels)
        stack = self.stack_columns

        def convert(tables: list[Any]) -> Part:
            part = table_to_part(pa.concat_tables(tables), fcols, lcols)
            return stacked_columns(part) if stack else part

        return _convert_on_ray(self.obj.to_arrow_refs(), convert)


def stacked_columns(part: Part) -> Part:
    """``part`` with its features as Ray's ``to_torch`` gave a Ray Dataset's columns: when each is a
    number a row, one ``(n, k)`` array of the ``k`` columns side by side; otherwise as they are.
    Labels stay as they are (a ``(n,)`` class index column as the loss takes it)."""
    x = part["x"]
    if len(x) > 0 and all(a.ndim == 1 for a in x):
        x = [np.stack(x, axis=1) if len(x) > 1 else x[0].reshape(-1, 1)]
    return {**part, "x": x}


def _convert_on_ray(refs: Sequence[Any], convert: Callable[[list[Any]], Part]) -> list[tuple[Any, int]]:
    """``(ref of a part, rows)`` for the Ray objects ``refs``, converted by ``convert`` (a list of
    consecutive objects in, one part out) in zero-CPU tasks (the actors may hold every CPU), at most
    one per CPU of the Ray cluster: a task per object would start a Ray worker process per object
    (a dataset of 64 small blocks: 64 processes, about a minute on two cores)."""
    import ray

    if not refs:
        return []
    tasks = min(len(refs), max(1, int(ray.cluster_resources().get("CPU", 1))))
    bounds = np.linspace(0, len(refs), tasks + 1).astype(int)

    def conv(*objs: Any) -> tuple[Part, int]:
        part = convert(list(objs))
        return part, part_rows(part)

    remote = ray.remote(num_cpus=0, num_returns=2)(conv)
    pairs = [remote.remote(*refs[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return list(zip([p[0] for p in pairs], ray.get([p[1] for p in pairs]), strict=True))


def _spark_errors(what: str) -> Any:
    """A failed Spark job as one OrcaWorkerError naming the Python exception (see spark_backend)."""
    from orca.core.engine.spark_backend import spark_errors

    return spark_errors(what)


def _ray_putter() -> Any:
    """A function for Spark tasks: put each part into Ray from the executor, owned by a holder actor
    of the context (so it outlives Spark's Python worker) on the executor's own Ray node where
    Ray-on-Spark runs one; yields (pickled ref, rows)."""
    import ray.cloudpickle as rpickle

    from orca.core.data._ray import (
        HOLDER_NAMESPACE,
        _connect_ray_in_task,
        holder_names,
        local_holder,
        ray_join,
    )

    names, join = holder_names(), ray_join()

    def put(parts: Iterator[Part]) -> Iterator[tuple[bytes, int]]:
        ray = _connect_ray_in_task(*join)
        holder = ray.get_actor(local_holder(names), namespace=HOLDER_NAMESPACE)
        for part in parts:
            n = part_rows(part)
            if n:
                yield rpickle.dumps(ray.get(holder.adopt.remote(part))[0]), n

    return put


class _HolderRefs(list):  # type: ignore[type-arg]
    """(ref, rows) pairs whose objects the context's holder actor owns: release them after use."""

    held = True


def _loaded(rows: list[tuple[bytes, int]]) -> list[tuple[Any, int]]:
    import ray.cloudpickle as rpickle

    return _HolderRefs((rpickle.loads(blob), n) for blob, n in rows)


def release_held(refs: Sequence[tuple[Any, int]]) -> None:
    """Let the context's holder actor drop objects Spark tasks put there for one call."""
    if not getattr(refs, "held", False) or not refs:
        return
    import logging

    import ray

    from orca.core.data._ray import holder_handles

    try:
        held = [r for r, _ in refs]
        ray.get([h.release.remote(held) for h in holder_handles()], timeout=60)
    except Exception:  # noqa: BLE001 - best effort: the holder dies with the context anyway
        logging.getLogger("orca").debug("could not release Spark-put objects", exc_info=True)
