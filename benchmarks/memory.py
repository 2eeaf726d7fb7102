"""Worker memory against data size (issue #18): a torch fit on a cached DataFrame of 1 KB rows
(256 float32 features and a label, 2 partitions, 2 workers x 1 thread) at x1, x4, x16 of a base
size, on the ``spark`` and ``bigdl`` backends, with the share in memory (the default) and
streamed to the worker's local disk (``worker_data_memory_mb`` below the share).

Each fit runs in a fresh process (a fresh Spark application, so fresh Python workers): a
callback on every worker reports the process's peak resident memory (``VmHWM``: everything the
worker ever held, the torch import included) at the end of the fit. A row's ratio is the peak at
xN over the peak at x1 (target for the disk path at the largest scale: <= 1.2), and the
training throughput of the second epoch (rows/s, reading the share the workers hold) at xN
over x1 (target >= 0.9).

    python benchmarks/memory.py --out memory.json [--quick]       (an environment with orca-torch)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WIDTH = 256  # float32 features: 1 KB a row
DISK_MB = 8.0  # worker_data_memory_mb of the disk path: far below every share here


def _peak_callback_cls() -> Any:
    from orca.core.engine.callbacks import Callback

    class PeakMemory(Callback):
        """Writes this worker's peak RSS and current anonymous RSS (MB) at the end of the fit."""

        def __init__(self, out: str) -> None:
            self.out = out

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                          if ":" in line)
            mb = {k: int(status[k].split()[0]) / 1024 for k in ("VmHWM", "RssAnon")}
            Path(self.out, f"rank{self.rank}.json").write_text(json.dumps(mb))

    return PeakMemory


def one_fit(backend: str, rows: int, memory_mb: float | None, out: str) -> dict[str, Any]:
    """Fit once in this process (a fresh context) and return peak memory per rank and throughput."""
    import cloudpickle
    import numpy as np
    import torch
    from harness import cached_df, local_spark
    from torch import nn

    from orca.core import OrcaContext, stop_orca_context
    from orca.torch import Estimator

    spark = local_spark({"spark.driver.maxResultSize": "4g"})
    try:
        if memory_mb is not None:
            OrcaContext.worker_data_memory_mb = memory_mb
        rng = np.random.default_rng(0)
        x = rng.standard_normal((rows, WIDTH), dtype=np.float32)
        y = (x[:, :8].sum(1, keepdims=True)).astype(np.float32)
        df = cached_df(spark, {"features": x, "label": y[:, 0]}, 2)
        del x, y
        peak_cls = _peak_callback_cls()
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        torch.manual_seed(0)
        model = nn.Linear(WIDTH, 1)
        est = Estimator.from_torch(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                   loss=nn.MSELoss(), backend=backend, workers_per_node=2)
        t = time.perf_counter()
        hist = est.fit(df, epochs=2, batch_size=256, feature_cols=["features"], label_cols=["label"],
                       callbacks=[peak_cls(out)])
        fit_s = time.perf_counter() - t
        est.shutdown()
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in (0, 1)]
        # the second epoch: training from the share the workers hold (in memory or on disk)
        return {"rows": rows, "fit_s": fit_s, "rows_per_s": rows / hist[-1]["epoch_time_s"],
                "peak_mb": max(r["VmHWM"] for r in ranks), "ranks": ranks}
    finally:
        stop_orca_context()


def measure(base_rows: int, scales: list[int], backends: list[str], timeout_s: float) -> dict[str, Any]:
    """Every (backend, mode, scale) in its own process (``--one``, through the harness's run_child)."""
    from harness import run_child

    res: dict[str, Any] = {"base_rows": base_rows, "width": WIDTH, "disk_mb": DISK_MB, "runs": []}
    for backend in backends:
        for mode in ("memory", "disk"):
            for s in scales:
                out = run_child("memory.py", ["--one", backend, str(base_rows * s),
                                              str(DISK_MB if mode == "disk" else -1)], timeout_s)
                run: dict[str, Any] = {"backend": backend, "mode": mode, "scale": s, **out}
                res["runs"].append(run)
                print(f"  {backend:6} {mode:6} x{s:<3} "
                      + (f"peak {run['peak_mb']:8.0f} MB  {run['rows_per_s']:10,.0f} rows/s" if "peak_mb" in run
                         else f"FAILED: {run.get('error')}"), flush=True)
    return res


def rows_from(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: peak worker memory and throughput at each scale against x1, per backend and mode."""
    from harness import ratio, row

    out: list[dict[str, Any]] = []
    top = max(r["scale"] for r in res["runs"])
    for backend in sorted({r["backend"] for r in res["runs"]}):
        for mode in ("memory", "disk"):
            runs = {r["scale"]: r for r in res["runs"] if r["backend"] == backend and r["mode"] == mode}
            base = runs.get(1, {})
            for s, r in sorted(runs.items()):
                if s == 1:
                    continue
                label = "in memory" if mode == "memory" else f"streamed to disk ({res['disk_mb']:g} MB in memory)"
                target = "<= 1.2" if mode == "disk" and s == top else None
                out.append(row("memory", f"torch {backend}: worker peak RSS x{s} / x1, share {label}",
                               r.get("peak_mb"), "MB", ratio(r.get("peak_mb"), base.get("peak_mb")), target,
                               scale=f"x{s}", note=r.get("error", "")[-200:] or None))
                out.append(row("memory", f"torch {backend}: throughput x{s} / x1, share {label}",
                               r.get("rows_per_s"), "rows/s", ratio(r.get("rows_per_s"), base.get("rows_per_s")),
                               ">= 0.9" if mode == "disk" and s == top else None, scale=f"x{s}"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="base 8,192 rows, x1 and x4")
    p.add_argument("--rows", type=int, default=None, help="base rows (default 32,768; quick 8,192)")
    p.add_argument("--backends", default="spark,bigdl")
    p.add_argument("--one", nargs=3, metavar=("BACKEND", "ROWS", "MEMORY_MB"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        backend, rows, memory = a.one[0], int(a.one[1]), float(a.one[2])
        with tempfile.TemporaryDirectory() as tmp:
            res = one_fit(backend, rows, memory if memory >= 0 else None, tmp)
        Path(a.out).write_text(json.dumps(res))
        return
    base = a.rows or (8192 if a.quick else 32768)
    scales = [1, 4] if a.quick else [1, 4, 16]
    res = measure(base, scales, a.backends.split(","), timeout_s=600)
    res["rows"] = rows_from(res)
    Path(a.out).write_text(json.dumps(res, indent=1))
    from harness import fmt

    for r in res["rows"]:
        print(f"{r['name']:75} {fmt(r['value'], 1):>12} {r['unit']:7} ratio {fmt(r['ratio'], 2):>6}  "
              f"target {r['target'] or '-'}")


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
