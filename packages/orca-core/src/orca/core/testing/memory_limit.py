"""A fit under Spark's memory limit on its Python workers, shared by every framework's check.

Spark applies ``spark.executor.pyspark.memory`` to its Python workers as an address-space limit
(``RLIMIT_AS``). :func:`run` starts a Spark application with that limit, generates each worker's
share on the executors (one partition per worker, from a seed per partition and chunk, so the
driver never holds it and :func:`rows` gives any rows again), fits a framework's model on it with
``shuffle=False``, and writes a JSON with each rank's limit, peak address space, peak resident
memory and the bytes the shares took on local disk, and the fitted parameters. :func:`replay`'s
caller computes the same SGD steps in one process to compare.

Framework packages call it from a small job script (``python job.py OUT --limit-mb ...``):
``run(fit_one)`` where ``fit_one(backend, df, callback, workers)`` fits and returns the parameters;
their tests call :func:`check_job` with that script's module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

WIDTH = 1024  # float32 features: 4 KB a row
BATCH = 256
LR = 0.01
GEN_ROWS = 8192  # rows per generated Arrow batch (and per seed)


def rows(part: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of partition ``part``: features ``(n, WIDTH)`` and labels ``(n,)``,
    float32, the same on every call (a noisy linear target, so SGD's path depends on the batches)."""
    xs, ys = [], []
    for chunk in range(start // GEN_ROWS, (stop + GEN_ROWS - 1) // GEN_ROWS):
        rng = np.random.default_rng([part, chunk])
        x = rng.standard_normal((GEN_ROWS, WIDTH), dtype=np.float32)
        y = x[:, :16].sum(1, dtype=np.float32) * np.float32(0.25) + rng.standard_normal(GEN_ROWS, dtype=np.float32)
        lo = max(start, chunk * GEN_ROWS) - chunk * GEN_ROWS
        hi = min(stop, (chunk + 1) * GEN_ROWS) - chunk * GEN_ROWS
        xs.append(x[lo:hi])
        ys.append(y[lo:hi])
    return np.concatenate(xs), np.concatenate(ys)


def global_batches(rows_per_part: int, workers: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The global batches of a fit with ``shuffle=False`` on equal shares of whole steps: each
    step the next ``BATCH // workers`` rows of every partition, in rank order."""
    per = BATCH // workers
    for start in range(0, rows_per_part, GEN_ROWS):
        parts = [rows(p, start, min(start + GEN_ROWS, rows_per_part)) for p in range(workers)]
        for s in range(0, len(parts[0][0]), per):
            yield (np.concatenate([px[s:s + per] for px, _ in parts]),
                   np.concatenate([py[s:s + per] for _, py in parts]))


def frame(spark: Any, workers: int, rows_per_part: int) -> Any:
    """A DataFrame of ``workers`` partitions of ``rows_per_part`` rows (``features array<float>``,
    ``label float``), generated on the executors."""
    import pyarrow as pa

    def gen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for part in b.column(0).to_pylist():
                for start in range(0, rows_per_part, GEN_ROWS):
                    x, y = rows(part, start, min(start + GEN_ROWS, rows_per_part))
                    offsets = pa.array(np.arange(0, (len(x) + 1) * WIDTH, WIDTH, dtype=np.int32))
                    feats = pa.ListArray.from_arrays(offsets, pa.array(x.reshape(-1)))
                    yield pa.RecordBatch.from_arrays([feats, pa.array(y)], names=["features", "label"])

    return spark.range(0, workers, numPartitions=workers).mapInArrow(gen, "features array<float>, label float")


def probe(out: str) -> Any:
    """A callback writing each rank's limit, peak address space (``VmPeak``), peak resident
    memory (``VmHWM``) and spilled bytes (MB) to ``out/rank<r>.json`` at the end of training."""
    from orca.core.engine.callbacks import Callback
    from orca.core.testing.spill import spilled

    class Probe(Callback):
        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            import resource

            status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                          if ":" in line)
            limit = resource.getrlimit(resource.RLIMIT_AS)[0]
            Path(out, f"rank{self.rank}.json").write_text(json.dumps({
                "limit_mb": None if limit == resource.RLIM_INFINITY else limit / (1 << 20),
                "vm_peak_mb": int(status["VmPeak"].split()[0]) / 1024,
                "rss_peak_mb": int(status["VmHWM"].split()[0]) / 1024,
                "on_disk_mb": sum(spilled().values()) / (1 << 20),
            }))

    return Probe()


def run(fit_one: Callable[[str, Any, Any, int], dict[str, Any]], argv: list[str] | None = None) -> None:
    """Parse ``OUT --limit-mb M --share-mb S [--workers W] [--backends a,b]``, start a local Spark
    application whose Python workers have an address-space limit of M MB, and fit
    ``fit_one(backend, df, callback, workers)`` (returning the fitted parameters) on each backend on shares
    of about S MB; write the JSON to OUT."""
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--limit-mb", type=int, required=True)
    p.add_argument("--share-mb", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backends", default="spark,bigdl")
    a = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from orca.core import OrcaContext, init_orca_context, stop_orca_context

    # whole steps of the global batch, so that every step splits it evenly (as global_batches does)
    rows_per_part = -(-a.share_mb * (1 << 20) // (4 * (WIDTH + 1) * BATCH)) * BATCH  # at least share_mb
    init_orca_context(cluster_mode="local", cores=a.workers,
                      conf={"spark.executor.pyspark.memory": f"{a.limit_mb}m",
                            "spark.python.worker.faulthandler.enabled": "true"})
    result: dict[str, Any] = {"limit_mb": a.limit_mb, "workers": a.workers, "rows_per_part": rows_per_part,
                              "share_mb": rows_per_part * (WIDTH + 1) * 4 / (1 << 20), "fits": {}}
    try:
        df = frame(OrcaContext.get_spark_session(), a.workers, rows_per_part)
        for backend in a.backends.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                params = fit_one(backend, df, probe(tmp), a.workers)
                result["fits"][backend] = {
                    "fit_s": time.perf_counter() - t, **params,
                    "ranks": [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(a.workers)]}
    finally:
        stop_orca_context()
    Path(a.out).write_text(json.dumps(result))


def optimizing_jit_env() -> dict[str, str]:
    """This process's environment without a ``-XX:TieredStopAtLevel`` in ``JAVA_TOOL_OPTIONS``.

    The test sessions run their JVMs on C1 alone (noxfile.TEST_JAVA_OPTIONS: a Spark driver starts on
    ~40 % less CPU), but a JVM that streams gigabytes through Arrow, as this job's does, needs C2's
    optimized code: the torch job took 210 CPU-s on C1 alone and 88 with the default JIT (measured
    on 2026-12-07)."""
    env = dict(os.environ)
    options = [o for o in env.pop("JAVA_TOOL_OPTIONS", "").split() if not o.startswith("-XX:TieredStopAtLevel")]
    if options:
        env["JAVA_TOOL_OPTIONS"] = " ".join(options)
    return env


def check_job(job: Any, out: Path, limit_mb: int, backends: list[str], timeout_s: float) -> None:
    """Run a framework's job script (``job``: its module, with ``replay``) with one worker and shares
    of three times ``limit_mb`` on ``backends``, and assert what a test of it asserts: every rank
    ran under the limit Spark applied and stayed under it, its share went to its local disk, and
    each backend's fit has the parameters of one process taking the same SGD steps, to 1e-6."""
    import subprocess

    proc = subprocess.run([sys.executable, str(Path(job.__file__)), str(out), "--limit-mb", str(limit_mb),
                           "--share-mb", str(3 * limit_mb), "--workers", "1", "--backends", ",".join(backends)],
                          capture_output=True, text=True, timeout=timeout_s, env=optimizing_jit_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    share_mb = res["share_mb"]
    assert share_mb >= 3 * limit_mb  # each worker's share is three times its whole address space
    weight, bias = job.replay(res["rows_per_part"], res["workers"])
    for backend in backends:
        fit = res["fits"][backend]
        for rank in fit["ranks"]:
            assert rank["limit_mb"] == limit_mb  # Spark applied the limit to the worker that trained
            assert rank["vm_peak_mb"] <= limit_mb
        # the share went to disk: the worker's local directory held it while it trained
        assert fit["ranks"][0]["on_disk_mb"] >= share_mb * 0.99
        np.testing.assert_allclose(fit["weight"], weight, rtol=0, atol=1e-6)
        assert abs(fit["bias"] - bias) <= 1e-6, (fit["bias"], bias)
