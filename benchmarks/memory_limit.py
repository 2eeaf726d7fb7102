"""A fit whose every worker's share is three times Spark's memory limit on its Python workers
(issue #18): ``spark.executor.pyspark.memory``, which Spark applies as an address-space limit.

For each framework installed here (torch: ``spark`` and ``bigdl`` backends; Keras: ``bigdl``),
the framework's job script (``packages/orca-<fw>/tests/memory_limit_job.py``, see
``orca.core.testing.memory_limit``) runs in a fresh process with a limit just above what the
framework needs before any data (torch ~1.1 GB, TF ~2.5 GB of address space), 2 workers, each
given a share of 3x the limit, generated on the executors, one epoch without shuffling. A row:
the share over the limit (the target: >= 3, and the fit completing), each worker's peak address
space, and how far the fitted weights are from one process taking the same SGD steps.

    python benchmarks/run_part.py memory_limit memory_limit [--quick]   (quick: shares of 1.1x)

It writes tens of GB to the spill directory (the system's temporary directory): 2 x 3 x the limit.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import env, row

#: per framework: (the package's tests folder, the import that says it is installed, backends,
#: the limit in MB: a little above the framework's address space before data)
FRAMEWORKS = {"torch": ("orca-torch", "orca.torch", "spark,bigdl", 1300),
              "keras": ("orca-tf", "orca.tf", "bigdl", 2700)}


def _job(folder: str, limit_mb: int, share_mb: int, backends: str, timeout_s: float) -> dict[str, Any]:
    tests = HERE.parent / "packages" / folder / "tests"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fit.json"
        proc = subprocess.run([sys.executable, str(tests / "memory_limit_job.py"), str(out), "--limit-mb",
                               str(limit_mb), "--share-mb", str(share_mb), "--backends", backends],
                              capture_output=True, text=True, timeout=timeout_s, env=env(), cwd=tests)
        if proc.returncode != 0 or not out.exists():
            errors = [line for line in proc.stderr.splitlines() if "Error" in line and not line.startswith("\t")]
            return {"error": (errors or proc.stderr.strip().splitlines() or ["no output"])[-1][-500:],
                    "log_tail": proc.stderr[-4000:]}
        res = json.loads(out.read_text())
    sys.path.insert(0, str(tests))
    try:
        import memory_limit_job  # the framework's replay of the same steps

        weight, bias = memory_limit_job.replay(res["rows_per_part"], res["workers"])
    finally:
        sys.path.remove(str(tests))
        sys.modules.pop("memory_limit_job", None)
    for fit in res["fits"].values():
        fit["max_abs_diff"] = float(max(np.abs(np.asarray(fit["weight"]) - weight).max(), abs(fit["bias"] - bias)))
        del fit["weight"]
    return res


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows per framework and backend: the share over the limit, target >= 3 (quick: 1.1)."""
    rows = []
    times = 1.1 if quick else 3.0
    for name, (folder, module, backends, limit_mb) in FRAMEWORKS.items():
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            continue
        print(f"    {name}: limit {limit_mb} MB, shares of {times:g}x ...", flush=True)
        res = _job(folder, limit_mb, int(limit_mb * times), backends, timeout_s=1400)
        for backend in backends.split(","):
            fit = res.get("fits", {}).get(backend)
            label = f"{name} {backend}: a worker's share / Spark's Python memory limit ({limit_mb} MB), fit completes"
            if fit is None:
                rows.append(row("memory", label, None, "x", None, f">= {times:g}", note=str(res.get("error"))))
                continue
            ranks = fit["ranks"]
            rows.append(row("memory", label, res["share_mb"], "MB", res["share_mb"] / limit_mb, f">= {times:g}",
                            note=f"peak address space {max(r['vm_peak_mb'] for r in ranks):.0f} MB, peak RSS "
                                 f"{max(r['rss_peak_mb'] for r in ranks):.0f} MB, weights within "
                                 f"{fit['max_abs_diff']:.1e} of one process, fit {fit['fit_s']:.0f} s"))
    return rows
