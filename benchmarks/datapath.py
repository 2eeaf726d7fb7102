"""Part 3: moving a Spark DataFrame of numeric array columns into per-worker numpy batches.

Run in a fresh process by ``run.py`` (``python benchmarks/datapath.py --rows N --scales 1,4,16 --out F``).
One local Orca context (``local[2]``); the DataFrame (``features array<float>[784]``, ``label long``,
2 partitions) is cached and counted before any timing. Each method is timed ``--repeats`` times,
methods interleaved, median reported:

- ``arrow-bare``: ``df.mapInArrow`` whose tasks only walk the Arrow batches (the limit).
- ``orca``: what ``fit`` without validation data does in each Spark task: ``adapters.get_data_source``
  and ``spark_select`` on the driver; in the task the Arrow batches become a part
  (``convert.table_to_part``), a ``feed.Feed``, and every lock-step training batch of one epoch
  (``Feed.train_batches``).
- ``orca-with-validation``: the same with the split tag column and its filter, which ``fit`` adds
  when validation data travels in the same stage (the filter copies every row).
- ``toPandas``: ``df.toPandas()`` on the driver, then the array column stacked into one ndarray.
- ``petastorm``: ``make_spark_converter(df)`` (materialises Parquet) and one pass of its torch
  DataLoader; or the exact error when petastorm does not install or run here.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WIDTH = 784
BATCH = 128


def make_x(rows: int) -> tuple[np.ndarray, np.random.Generator]:
    """The benchmark's feature rows (fixed seed), and the generator to draw labels from."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((rows, WIDTH), dtype=np.float32), rng


def make_df(spark: Any, rows: int, parts: int = 2) -> Any:
    from harness import cached_df

    x, rng = make_x(rows)
    return cached_df(spark, {"features": x, "label": rng.integers(0, 10, rows)}, parts)


def bare_arrow(df: Any) -> int:
    def task(batches):
        import pyarrow as pa

        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return sum(r["n"] for r in df.mapInArrow(task, "n long").collect())


def orca_path(df: Any, tag_filter: bool = False) -> int:
    """What ``SparkWorkerGroup.fit`` does with a DataFrame, minus the barrier and the training:
    per task ``table_to_part``, a ``Feed`` and every lock-step batch of one shuffled epoch (with
    ``tag_filter``: first the split tag column and its filter, as when validation data comes along)."""
    from pyspark.sql import functions as F

    from orca.core.engine.adapters import get_data_source, spark_select
    from orca.core.engine.convert import table_to_part
    from orca.core.engine.feed import Feed
    from orca.core.engine.spark_backend import TAG

    src = get_data_source(df, feature_cols=["features"], label_cols=["label"], need_labels=True)
    fcols, lcols = src.feature_cols, src.label_cols
    sdf = spark_select(src.obj, fcols + lcols)
    if tag_filter:
        sdf = sdf.withColumn(TAG, F.lit(0))
    world = sdf.rdd.getNumPartitions()

    def task(batches):
        import pyarrow as pa

        nonempty = [b for b in batches if b.num_rows]
        n = 0
        if nonempty:
            table = pa.Table.from_batches(nonempty)
            train = table.filter(pa.array(table.column(TAG).to_numpy() == 0)) if tag_filter else table
            part = table_to_part(train, fcols, lcols)
            feed = Feed(part["x"], part["y"])
            # the other workers' counts do not change this worker's work: equal shares
            for b in feed.train_batches([feed.num_rows] * world, 0, BATCH * world):
                n += b.size
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return sum(r["n"] for r in sdf.mapInArrow(task, "n long").collect())


def to_pandas(df: Any) -> int:
    pdf = df.toPandas()
    x = np.stack(pdf["features"].to_numpy())
    y = pdf["label"].to_numpy()
    return len(x) if len(x) == len(y) else -1


class Petastorm:
    def __init__(self, spark: Any, tmp: str) -> None:
        from petastorm.spark import SparkDatasetConverter, make_spark_converter

        spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "file://" + tmp)
        self.make = make_spark_converter

    def __call__(self, df: Any) -> tuple[int, float]:
        t = time.perf_counter()
        conv = self.make(df)
        convert_s = time.perf_counter() - t
        n = 0
        try:
            with conv.make_torch_dataloader(batch_size=BATCH, num_epochs=1) as loader:
                for batch in loader:
                    n += len(batch["label"])
        finally:
            conv.delete()
        return n, convert_s


#: the Spark settings this part needs (toPandas brings the x16 data to the driver)
SPARK_CONF = {"spark.driver.maxResultSize": "4g"}


def main() -> None:
    from harness import scaled_child_main

    scaled_child_main(measure, default_rows=8192, conf=SPARK_CONF)


def measure(spark: Any, base_rows: int, scales: list[int], repeats: int) -> dict:
    """Every method at every scale on ``spark`` (a local Orca context's session); the raw result."""
    res: dict = {"rows": base_rows, "width": WIDTH, "bytes_per_row": WIDTH * 4 + 8, "repeats": repeats,
                 "scales": {}}
    tmp = tempfile.mkdtemp(prefix="orca-bench-petastorm-")
    try:
        try:
            peta: Any = Petastorm(spark, tmp)
        except Exception as exc:  # noqa: BLE001 - any failure of the optional peer is reported, exactly
            peta = None
            res["petastorm_error"] = f"{type(exc).__name__}: {exc}"
        methods: dict[str, Any] = {"arrow-bare": bare_arrow, "orca": orca_path, "toPandas": to_pandas,
                                   "orca-with-validation": lambda df: orca_path(df, tag_filter=True)}
        for s in scales:
            rows = base_rows * s
            df = make_df(spark, rows)
            times: dict[str, list[float]] = {m: [] for m in methods}
            extra: dict[str, list[float]] = {"petastorm": [], "petastorm_convert": []}
            for fn in methods.values():  # warm-up: Python workers started, code paths loaded
                fn(df)
            for _ in range(repeats):
                for m, fn in methods.items():
                    t = time.perf_counter()
                    n = fn(df)
                    times[m].append(time.perf_counter() - t)
                    assert n == rows, (m, n, rows)
                if peta is not None and "petastorm_error" not in res:
                    try:
                        t = time.perf_counter()
                        n, conv_s = peta(df)
                        extra["petastorm"].append(time.perf_counter() - t)
                        extra["petastorm_convert"].append(conv_s)
                    except Exception as exc:  # noqa: BLE001 - reported in the table, not fatal
                        res["petastorm_error"] = f"{type(exc).__name__}: {exc}"
                        res["petastorm_traceback"] = traceback.format_exc()[-3000:]
            times.update({k: v for k, v in extra.items() if v})
            res["scales"][str(s)] = {"rows": rows, "times_s": times,
                                     "median_s": {k: statistics.median(v) for k, v in times.items()}}
            df.unpersist()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def rows_from(res: dict) -> list[dict]:
    """Table rows: rows/s and MB/s of each method, ratio against the bare Arrow read."""
    from harness import ratio, row

    out: list[dict] = []
    if "error" in res:
        return [row("data", "data path (all methods)", None, "rows/s", target=">= 0.8", note=res["error"])]
    bpr = res["bytes_per_row"]
    names = {"orca": "Orca data path (adapters/convert/feed) vs bare mapInArrow read",
             "toPandas": "toPandas + np.stack (driver) vs bare mapInArrow read",
             "petastorm": "Petastorm make_spark_converter + torch loader vs bare mapInArrow read",
             "arrow-bare": "bare mapInArrow read (the limit)",
             "orca-with-validation": "Orca data path with fit's train/validation split filter vs bare read"}
    for s, sc in res["scales"].items():
        med = sc["median_s"]
        bare = sc["rows"] / med["arrow-bare"]
        for m, target in (("orca", ">= 0.8"), ("orca-with-validation", None), ("toPandas", None), ("petastorm", None),
                          ("arrow-bare", None)):
            v = sc["rows"] / med[m] if m in med else None
            note = res.get("petastorm_error", "not run") if m == "petastorm" and v is None else None
            extra = {"mb_per_s": v * bpr / 1e6 if v else None, "note": note, "rows": sc["rows"]}
            if m == "petastorm" and "petastorm_convert" in med:
                extra["petastorm_convert_s"] = med["petastorm_convert"]
            rel = ratio(v, bare) if m != "arrow-bare" else None
            if s == "1":
                out.append(row("data", names[m], v, "rows/s", rel, target, **extra))
            out.append(row("scale", f"data path {m}, rows/s (ratio: vs bare read)", v, "rows/s", rel,
                           scale=int(s), **extra))
    return out


if __name__ == "__main__":
    main()
