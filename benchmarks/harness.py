"""What every part of the benchmark suite shares, without importing any framework.

A *row* is one comparison, the same shape in every part (and in the parts other people
write, ``tf_fit.py`` and ``openvino_predict.py``)::

    {"name": "...", "value": 1234.0, "unit": "samples/s", "ratio": 1.02, "target": ">= 0.97"}

plus optional keys: ``part`` (training, tf, data, inference, scale, ...), ``reference``
(the peer's value), ``note`` (why a value is n/a, what missed), ``scale`` (x1, x4, x16).
``value``/``ratio`` are ``None`` where nothing was measured ("n/a").

Child processes are always run with a timeout: a benchmark may be slow, never hang.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
NOT_YET = "not available yet"  # what a backend still being written raises


def env() -> dict[str, str]:
    """The environment every child gets: loopback Spark, Ray without token auth, this interpreter."""
    e = dict(os.environ)
    e.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    e.setdefault("RAY_AUTH_MODE", "disabled")
    e.setdefault("PYSPARK_PYTHON", sys.executable)
    e.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    e.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # the peers' worker processes (torchrun under TorchDistributor, Ray Train's actors) import
    # benchmarks/common.py by name
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), e.get("PYTHONPATH", "")) if p)
    e.setdefault("RAY_TRAIN_ENABLE_STATE_TRACKING", "0")
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return e


def run_child(script: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``benchmarks/<script> ARGS --out FILE`` in a fresh interpreter; return its JSON.

    A timeout or a failure does not raise: the result is ``{"error": "...", "log_tail": "..."}``
    so that one broken comparison shows as n/a in the table instead of stopping the suite.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        log = Path(tmp) / "log.txt"
        cmd = [sys.executable, str(HERE / script), *args, "--out", str(out)]
        t = time.perf_counter()
        with open(log, "w") as fh:
            # own process group, so a timeout can end the child's Spark JVM and Ray workers too
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env(), start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc = None
        wall = time.perf_counter() - t
        tail = log.read_text(errors="replace")[-3000:]
        if rc is None:
            return {"error": f"timed out after {timeout:.0f} s", "log_tail": tail, "process_s": wall}
        if rc != 0 or not out.exists():
            return {"error": f"exit {rc}: {last_error_line(tail)}", "log_tail": tail, "process_s": wall}
        result = json.loads(out.read_text())
        result["process_s"] = wall
        return result


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def last_error_line(text: str) -> str:
    """The last line that looks like an exception (``SomeError: ...``), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*", ln):
            return ln[:400]
    return lines[-1][:400] if lines else "(no output)"


def child_args(default_rows: int) -> Any:
    """The arguments every scaled child benchmark takes: ``--rows --scales --repeats --out``."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=default_rows)
    p.add_argument("--scales", default="1,4,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", required=True)
    return p.parse_args()


def scaled_child_main(measure: Any, default_rows: int, conf: dict[str, str] | None = None) -> None:
    """The ``main`` of a scaled child benchmark: parse :func:`child_args`, run
    ``measure(spark, rows, scales, repeats)`` in a fresh local Orca context, write its result to ``--out``."""
    from orca.core import stop_orca_context

    a = child_args(default_rows)
    spark = local_spark(conf)
    try:
        res = measure(spark, a.rows, [int(v) for v in a.scales.split(",")], a.repeats)
    finally:
        stop_orca_context()
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


def cached_df(spark: Any, columns: dict[str, Any], parts: int) -> Any:
    """A cached DataFrame of numpy ``columns`` in ``parts`` partitions, built from an Arrow table (no
    Python object per row): an array of 2 or more dimensions becomes an ``array<float>`` column of
    its flattened rows, a 1-D array a plain column."""
    import numpy as np
    import pyarrow as pa

    cols = {}
    for name, values in columns.items():
        values = np.asarray(values)
        if values.ndim > 1:
            flat = np.ascontiguousarray(values, np.float32).reshape(len(values), -1)
            offsets = pa.array(np.arange(0, flat.size + 1, flat.shape[1], dtype=np.int32))
            cols[name] = pa.ListArray.from_arrays(offsets, pa.array(flat.reshape(-1)))
        else:
            cols[name] = pa.array(values)
    df = spark.createDataFrame(pa.table(cols)).repartition(parts).cache()
    df.count()
    return df


def local_spark(conf: dict[str, str] | None = None, cores: int = 2) -> Any:
    """A local Orca context (``local[cores]``, 4 GB driver for the x16 data) and its Spark session."""
    from orca.core import init_orca_context

    ctx = init_orca_context(cluster_mode="local", cores=cores, conf={
        "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "4g", **(conf or {})})
    spark = ctx.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def median(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def rates(epochs: list[dict[str, Any]], skip_first: bool = True) -> list[float]:
    """Samples/s of each epoch (``num_samples / epoch_time_s``), leaving out the first when there are others."""
    eps = epochs[1:] if skip_first and len(epochs) > 1 else epochs
    return [e["num_samples"] / e["epoch_time_s"] for e in eps if e["epoch_time_s"] > 0]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def row(part: str, name: str, value: float | None, unit: str, ratio_: float | None = None,
        target: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"part": part, "name": name, "value": value, "unit": unit, "ratio": ratio_, "target": target, **extra}


def verdict(r: dict[str, Any]) -> str:
    """``met`` / ``MISSED`` / ``n/a`` / ``-`` for a row's ratio against its target (``">= 0.97"``, ``"<= 1.0"``
    or a bare number meaning ``>=``)."""
    target, value = r.get("target"), r.get("ratio")
    if target in (None, "", "-"):
        return "-"
    if value is None:
        return "n/a"
    if isinstance(target, (int, float)):
        op, bound = ">=", float(target)
    else:
        m = re.match(r"\s*(>=|<=|>|<|≥|≤)?\s*([0-9.]+)", str(target))
        if not m:
            return "-"
        op, bound = (m.group(1) or ">=").replace("≥", ">=").replace("≤", "<="), float(m.group(2))
    ok = {">=": value >= bound, ">": value > bound, "<=": value <= bound, "<": value < bound}[op]
    return "met" if ok else "**MISSED**"


def loadavg() -> list[float]:
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def write_part(name: str, rows: list[dict[str, Any]], settings: dict[str, Any], raw: Any, started: float,
               load_before: list[float], out: Path | None = None) -> Path:
    """Write ``benchmarks/results/<name>.json`` (or ``out``: rows + raw data) and return its path."""
    import platform

    out = out or RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"part": name, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                       "load_average_before": load_before, "load_average_after": loadavg()},
           "settings": settings, "rows": rows, "raw": raw, "total_s": time.perf_counter() - started}
    out.write_text(json.dumps(doc, indent=1, default=str))
    return out


def fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def horovod_missing() -> str | None:
    """Why the ``horovod`` backend and Horovod's rows have no numbers here (the rows' note), or None
    when ``horovod.torch`` imports (it imports torch: call it where torch may be imported)."""
    from orca.core.horovod_install import COMMAND

    try:
        import horovod.torch  # noqa: F401
    except (ImportError, OSError):  # OSError: a build whose torch extension does not load
        return f"horovod not installed: {COMMAND.format(framework='torch')}"
    return None
