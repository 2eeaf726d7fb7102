"""Worker memory and throughput against data size (issue #18): Orca's torch backends and their
peers, side by side, at x1, x4, x16, x64 of a base of 32,768 rows of 1 KB (x64: 2 GB).

The data: 256 float32 features and a label (the sum of the first 8), written once per scale to
Parquet in a temporary directory (2 files, one per worker) by ``spark.range`` + ``mapInArrow``
from a numpy generator seeded per Arrow batch, so that no process ever holds the whole
DataFrame; every measurement reads those files (``spark.read.parquet``: 2 partitions).

The model: Linear 256 -> 1, MSE, SGD, global batch 256, 2 workers x 1 intra-op thread, 2 epochs.

- ``orca-<backend>`` for ``spark``, ``bigdl``, ``ray`` (the partitions go to the Ray actors
  through Ray's object store) and ``horovod`` (Ray actors as ``ray``, Horovod's all-reduce; only
  where ``horovod.torch`` imports, else its rows say how to install it), each with the share in memory (the default) and streamed to
  local disk (``worker_data_memory_mb=8``, below every share; 1 in the quick run, whose x1 share is
  4 MB; docs/data-and-memory.md).
- ``torch-distributor`` and ``ray-train``: see ``memory_peers.py``.
- ``petastorm``: a row with the reason it is n/a, or its error, when it does not import.

Memory: the peak *anonymous* resident memory of each training process (``RssAnon``: heap,
Arrow and numpy buffers; not the mapped libraries, not the page cache a share on disk is read
through, not Ray's shared-memory object store), sampled every 50 ms from outside by
``memory_peers.AnonPeaks`` over the process's whole life (import and load included), and its
``VmHWM`` (the kernel's peak of the whole resident set) as the process reports it at the end.
A row's value is the busiest of the 2 workers. Spark's JVM, Ray Data's read tasks and
TorchDistributor's Spark task (which writes the partition to an Arrow file) are other processes
and not counted. Throughput: rows/s of the second epoch (rank 0, every worker in lock-step).

Targets at the largest scale for Orca's share on disk: peak anonymous RSS <= 1.2 x that at x1,
throughput >= 0.9 x x1. The data path (``datapath``, one process per scale, 3 repeats
interleaved after an untimed bare read, median): rows/s of a ``mapInArrow`` job over the Parquet files whose tasks do what
an Orca worker does to load its share (``arrow_feed_builder``: in memory, or streamed to disk as
above) and then draw one shuffled epoch of lock-step batches from it, against the *bare read*:
the same job whose tasks only turn each Arrow batch into numpy arrays. Target >= 0.9.

Each measurement runs in its own fresh process (``harness.run_child``) with a timeout.

    python benchmarks/memory.py --out memory.json [--quick]       (an environment with orca-torch)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from memory_peers import (
    BATCH,
    EPOCHS,
    LR,
    WIDTH,
    WORKERS,
    AnonPeaks,
    read_parquet,
    read_reports,
    worker_report,
)

DISK_MB = 8.0  # worker_data_memory_mb of the disk path: far below every share here (16 MB at x1)
QUICK_DISK_MB = 1.0  # the quick run's x1 share is 4 MB
ORCA = ("orca-spark", "orca-bigdl", "orca-ray", "orca-horovod")
PEERS = ("torch-distributor", "ray-train")
SYSTEMS = (*ORCA, *PEERS)
REPEATS = 3  # of the data path's jobs
#: what Spark needs to read each Parquet file as one partition (up to the x64 files' 1 GB)
SPARK_CONF = {"spark.driver.maxResultSize": "4g", "spark.sql.files.maxPartitionBytes": "4g"}


def settings(quick: bool, rows: int | None = None, systems: tuple[str, ...] = SYSTEMS) -> dict[str, Any]:
    """What a run measures (``run.py`` records it with the part)."""
    return {"base_rows": rows or (8192 if quick else 32768), "scales": [1, 4] if quick else [1, 4, 16, 64],
            "systems": list(systems), "disk_mb": QUICK_DISK_MB if quick else DISK_MB, "width": WIDTH, "sample_s": 0.05,
            "model": f"torch Linear({WIDTH}, 1), MSE, 1 KB rows, {WORKERS} workers x 1 thread, "
                     f"{EPOCHS} epochs, batch {BATCH}"}


def child_timeout_s(scale: int) -> float:
    """One measurement's timeout: start-up plus ~6 s per x1 (TorchDistributor's per-row loader
    is the slowest, ~20 s per x1 and 2 epochs on the quiet 2-core machine)."""
    return 300 + 30 * scale


# ---------------------------------------------------------------------------------------- data


def _gen_batches(batches: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    for b in batches:
        ids = b.column("id").to_numpy()
        if not len(ids):
            continue
        rng = np.random.default_rng([0, int(ids[0])])
        x = rng.standard_normal((len(ids), WIDTH), dtype=np.float32)
        offsets = pa.array(np.arange(0, x.size + 1, WIDTH, dtype=np.int32))
        yield pa.RecordBatch.from_arrays(
            [pa.ListArray.from_arrays(offsets, pa.array(x.reshape(-1))), pa.array(x[:, :8].sum(1))],
            ["features", "label"])


def write_data(rows: int, path: str) -> dict[str, Any]:
    """Write ``rows`` rows to Parquet under ``path`` (one file per worker), batch by batch."""
    from harness import local_spark

    from orca.core import stop_orca_context

    spark = local_spark(SPARK_CONF)
    try:
        t = time.perf_counter()
        (spark.range(0, rows, numPartitions=WORKERS)
         .mapInArrow(_gen_batches, "features array<float>, label float").write.parquet(path))
        return {"rows": rows, "write_s": time.perf_counter() - t,
                "bytes": sum(p.stat().st_size for p in Path(path).glob("*.parquet"))}
    finally:
        stop_orca_context()


# ------------------------------------------------------------------------------------ Orca fits


def _report_callback_cls() -> Any:
    from orca.core.engine.callbacks import Callback

    class Report(Callback):
        """Writes this worker's pid and peak RSS at the end of the fit (see ``worker_report``)."""

        def __init__(self, out: str) -> None:
            self.out = out

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            worker_report(self.out, f"rank{self.rank}")

    return Report


def orca_fit(backend: str, rows: int, memory_mb: float | None, data_dir: str, out: str,
             peaks: AnonPeaks) -> list[float]:
    """Fit once in this process (a fresh context); the epochs' seconds."""
    import cloudpickle
    import memory_peers
    import torch
    from harness import local_spark
    from torch import nn

    from orca.core import OrcaContext, stop_orca_context
    from orca.torch import Estimator

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(memory_peers)
    spark = local_spark(SPARK_CONF)
    try:
        if memory_mb is not None:
            OrcaContext.worker_data_memory_mb = memory_mb
        df = read_parquet(spark, data_dir)
        torch.manual_seed(0)
        model = nn.Linear(WIDTH, 1)
        est = Estimator.from_torch(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                   loss=nn.MSELoss(), backend=backend, workers_per_node=WORKERS, use_tqdm=False)
        hist = est.fit(df, epochs=EPOCHS, batch_size=BATCH, feature_cols=["features"], label_cols=["label"],
                       callbacks=[_report_callback_cls()(out)])
        est.shutdown()
        return [e["epoch_time_s"] for e in hist]
    finally:
        stop_orca_context()


def one_fit(system: str, rows: int, memory_mb: float | None, data_dir: str) -> dict[str, Any]:
    """One system's fit in this process, its workers' memory watched; rows/s and the busiest worker's peaks."""
    import memory_peers

    with tempfile.TemporaryDirectory() as out, AnonPeaks() as peaks:
        t = time.perf_counter()
        if system in ORCA:
            epoch_s = orca_fit(system.split("-", 1)[1], rows, memory_mb, data_dir, out, peaks)
        elif system == "torch-distributor":
            epoch_s = memory_peers.run_distributor(rows, data_dir, out)
        elif system == "ray-train":
            epoch_s = memory_peers.run_ray_train(rows, data_dir, out)
        else:
            raise ValueError(f"system: {system!r}; one of {SYSTEMS}")
        wall = time.perf_counter() - t
        time.sleep(0.1)  # a last sample
        ranks = read_reports(out, peaks)
    if len(ranks) != WORKERS:
        raise RuntimeError(f"{len(ranks)} worker reports, expected {WORKERS}")
    anon = [r["anon_peak_mb"] for r in ranks]
    return {"rows": rows, "wall_s": wall, "epoch_s": epoch_s, "rows_per_s": rows / epoch_s[-1],
            "anon_peak_mb": max(anon) if None not in anon else None,
            "vmhwm_mb": max(r["vmhwm_mb"] for r in ranks), "ranks": ranks, "samples": peaks.samples}


# ------------------------------------------------------------------------------------ data path


def data_path(rows: int, data_dir: str, disk_mb: float, repeats: int = REPEATS) -> dict[str, Any]:
    """Rows/s of the bare read and of Orca's load (in memory, on disk), interleaved; medians."""
    from harness import local_spark

    from orca.core import stop_orca_context

    spark = local_spark(SPARK_CONF)
    try:
        df = read_parquet(spark, data_dir)
        jobs = {"bare": lambda: _bare_read(df), "orca-memory": lambda: _orca_load(df, None),
                "orca-disk": lambda: _orca_load(df, int(disk_mb * (1 << 20)))}
        jobs["bare"]()  # starts the Python workers, reads the files once: not timed
        times: dict[str, list[float]] = {k: [] for k in jobs}
        for _ in range(repeats):
            for name, job in jobs.items():
                t = time.perf_counter()
                n = job()
                times[name].append(time.perf_counter() - t)
                if n != rows:
                    raise RuntimeError(f"{name} saw {n} rows of {rows}")
        return {"rows": rows, "times_s": times,
                "rows_per_s": {k: rows / statistics.median(v) for k, v in times.items()}}
    finally:
        stop_orca_context()


def _bare_read(df: Any) -> int:
    def task(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        n = 0
        for b in batches:
            x = b.column(0).flatten().to_numpy().reshape(b.num_rows, -1)
            y = b.column(1).to_numpy()
            n += min(len(x), len(np.asarray(y)))
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return sum(r["n"] for r in df.mapInArrow(task, "n long").collect())


def _orca_load(df: Any, memory_bytes: int | None) -> int:
    """What an Orca worker does with its partition before training (spark_backend's load), and
    one shuffled epoch of lock-step batches drawn from the share."""
    def task(batches: Any) -> Any:
        import pyarrow as pa

        from orca.core.engine.spill import arrow_feed_builder, close_feeds

        builder = arrow_feed_builder(["features"], ["label"], memory_bytes)
        for b in batches:
            if b.num_rows:
                builder.add(b, b.nbytes)
        feed = builder.finish()
        n = 0
        try:
            for batch in feed.train_batches([feed.num_rows] * WORKERS, 0, BATCH * WORKERS):
                n += batch.size
        finally:
            close_feeds(feed)
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return sum(r["n"] for r in df.mapInArrow(task, "n long").collect())


# ---------------------------------------------------------------------------------- the driver


def petastorm_note() -> str:
    """Why Petastorm has no row here: it is not installed, or the error its import gives."""
    import pyarrow

    try:
        from petastorm.spark import make_spark_converter  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name == "petastorm":
            return ("petastorm: not installed here; petastorm 0.13.1 (the latest) installs, but its import "
                    f"fails on pyarrow >= 16 (here {pyarrow.__version__}): ModuleNotFoundError: No module named "
                    "'pyarrow.filesystem' (petastorm/utils.py: from pyarrow.filesystem import LocalFileSystem)")
        return f"petastorm: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        return f"petastorm: {type(exc).__name__}: {exc}"
    return "petastorm: imports, but is not measured here"


def measure(base_rows: int, scales: list[int], systems: list[str], disk_mb: float = DISK_MB,
            log: Any = print) -> dict[str, Any]:
    """Every (system, mode, scale) and the data path at each scale, each in its own process."""
    from harness import horovod_missing, run_child

    res: dict[str, Any] = {"base_rows": base_rows, "width": WIDTH, "disk_mb": disk_mb, "scales": scales,
                           "runs": [], "data": {}, "petastorm": petastorm_note()}
    tmp = tempfile.mkdtemp(prefix="orca-bench-memory-")
    try:
        for s in scales:
            rows, path = base_rows * s, os.path.join(tmp, f"x{s}")
            t = time.perf_counter()
            made = run_child("memory.py", ["--make-data", str(rows), path], child_timeout_s(s))
            res["data"][f"x{s}"] = made
            log(f"  x{s}: {rows:,} rows to Parquet ({time.perf_counter() - t:.0f} s)"
                + (f" FAILED: {made['error']}" if "error" in made else ""))
            if "error" in made:
                continue
            dp = run_child("memory.py", ["--one", "datapath", str(rows), str(disk_mb), path], child_timeout_s(s))
            res["runs"].append({"system": "datapath", "mode": "-", "scale": s, **dp})
            log(f"  {'data path':18} x{s:<3} " + ("FAILED: " + dp["error"] if "error" in dp else "  ".join(
                f"{k} {v:,.0f} rows/s" for k, v in dp["rows_per_s"].items())))
            for system in systems:
                if system == "orca-horovod" and (why := horovod_missing()):
                    res["runs"] += [{"system": system, "mode": m, "scale": s, "error": why} for m in ("memory", "disk")]
                    log(f"  {system:18} x{s:<3} n/a: {why}")
                    continue
                for mode in ("memory", "disk") if system in ORCA else ("-",):
                    out = run_child("memory.py", ["--one", system, str(rows), str(disk_mb if mode == "disk" else -1),
                                                  path], child_timeout_s(s))
                    run = {"system": system, "mode": mode, "scale": s, **out}
                    res["runs"].append(run)
                    log(f"  {system:18} {mode:6} x{s:<3} " + (
                        f"anon peak {_mb(run['anon_peak_mb'])} MB  VmHWM {_mb(run['vmhwm_mb'])} MB  "
                        f"{run['rows_per_s']:10,.0f} rows/s  ({run['process_s']:.0f} s)" if "rows_per_s" in run
                        else f"FAILED: {run.get('error')}"))
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _mb(v: float | None) -> str:
    return "n/a" if v is None else f"{v:6.0f}"


def label(system: str, mode: str, disk_mb: float = DISK_MB) -> str:
    """A system and mode as a row and the plot name them."""
    if system in ORCA:
        where = "share in memory" if mode == "memory" else f"share streamed to disk ({disk_mb:g} MB in memory)"
        return f"Orca {system.split('-', 1)[1]}, {where}"
    return {"torch-distributor": "TorchDistributor (DataFrame partitions, Arrow file per worker)",
            "ray-train": "Ray Train + Ray Data (read_parquet)"}.get(system, system)


def rows_from(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: each system's peak anonymous RSS and throughput at each scale against its x1;
    Orca against each peer at the largest scale; the data path against the bare read."""
    from harness import ratio, row

    out: list[dict[str, Any]] = []
    runs = [r for r in res["runs"] if r["system"] != "datapath"]
    scales = sorted({r["scale"] for r in res["runs"]})
    top, disk_mb = max(scales, default=1), res["disk_mb"]
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["system"], r["mode"]), {})[r["scale"]] = r
    for (system, mode), at in by.items():
        base, name, streamed = at.get(1, {}), label(system, mode, disk_mb), system in ORCA and mode == "disk"
        for s, r in sorted(at.items()):
            note = r.get("error", "")[-200:] or (f"VmHWM {r['vmhwm_mb']:.0f} MB" if r.get("vmhwm_mb") else None)
            out.append(row("memory", f"{name}: worker peak anonymous RSS x{s} (ratio: / x1)", r.get("anon_peak_mb"),
                           "MB", ratio(r.get("anon_peak_mb"), base.get("anon_peak_mb")) if s > 1 else None,
                           "<= 1.2" if streamed and s == top and s > 1 else None, scale=f"x{s}",
                           vmhwm_mb=r.get("vmhwm_mb"), note=note))
            out.append(row("memory", f"{name}: rows/s of epoch 2, x{s} (ratio: / x1)", r.get("rows_per_s"),
                           "rows/s", ratio(r.get("rows_per_s"), base.get("rows_per_s")) if s > 1 else None,
                           ">= 0.9" if streamed and s == top and s > 1 else None, scale=f"x{s}"))
    for system in (s for s in ORCA if (s, "disk") in by):
        mine = by[(system, "disk")].get(top, {})
        for peer in (p for p in PEERS if (p, "-") in by):
            theirs = by[(peer, "-")].get(top, {})
            for key, unit, what in (("anon_peak_mb", "MB", "peak anonymous RSS"), ("rows_per_s", "rows/s", "rows/s")):
                out.append(row("memory", f"{label(system, 'disk', disk_mb)} vs {label(peer, '-')}: {what} at x{top} "
                                         "(ratio: Orca / peer)", mine.get(key), unit,
                               ratio(mine.get(key), theirs.get(key)), None, reference=theirs.get(key),
                               scale=f"x{top}"))
    for r in (r for r in res["runs"] if r["system"] == "datapath"):
        rates = r.get("rows_per_s", {})
        for mode in ("memory", "disk"):
            where = "in memory" if mode == "memory" else f"streamed to disk ({disk_mb:g} MB)"
            out.append(row("memory", f"data path x{r['scale']}: Orca's load of a share {where} + one epoch's "
                                     "batches vs the bare mapInArrow read", rates.get(f"orca-{mode}"), "rows/s",
                           ratio(rates.get(f"orca-{mode}"), rates.get("bare")), ">= 0.9",
                           reference=rates.get("bare"), scale=f"x{r['scale']}", note=r.get("error")))
    out.append(row("memory", "Petastorm (make_spark_converter + its torch loader)", None, "rows/s",
                   note=res.get("petastorm")))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="base 8,192 rows, x1 and x4")
    p.add_argument("--rows", type=int, default=None, help="base rows (default 32,768; quick 8,192)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    p.add_argument("--one", nargs=4, metavar=("SYSTEM", "ROWS", "MEMORY_MB", "DATA_DIR"), help=argparse.SUPPRESS)
    p.add_argument("--make-data", nargs=2, metavar=("ROWS", "DIR"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.make_data:
        res = write_data(int(a.make_data[0]), a.make_data[1])
    elif a.one:
        system, rows, memory, data_dir = a.one[0], int(a.one[1]), float(a.one[2]), a.one[3]
        res = data_path(rows, data_dir, memory) if system == "datapath" else one_fit(
            system, rows, memory if memory >= 0 else None, data_dir)
    else:
        s = settings(a.quick, a.rows)
        systems = [x for x in a.systems.split(",") if x]
        unknown = sorted(set(systems) - set(SYSTEMS))
        if unknown:
            p.error(f"--systems: unknown {unknown}; choose from {list(SYSTEMS)}")
        t = time.perf_counter()
        res = measure(s["base_rows"], s["scales"], systems, s["disk_mb"])
        res["rows"] = rows_from(res)
        res["total_s"] = time.perf_counter() - t
        from harness import fmt, verdict

        for r in res["rows"]:
            print(f"{r['name'][:110]:110} {fmt(r['value'], 1):>12} {r['unit']:7} ratio {fmt(r['ratio'], 2):>6}  "
                  f"target {r['target'] or '-':7} {verdict(r)}")
        print(f"total {res['total_s']:.0f} s")
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
