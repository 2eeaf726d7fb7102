"""Orca against its peers, the torch-environment parts: training, data path, batch inference.

    nox -s bench -- --quick       the whole suite as a smoke run (this, then bench_tf,
                                  bench_openvino, bench_report), under 5 minutes on 2 quiet cores
    nox -s bench                  the measured run (under 30 minutes)
    python benchmarks/run.py --parts data --quick    (from an environment with orca-torch)

Parts (see docs/benchmarks.md for the method):

- ``train``: PyTorch training, 2 workers x 1 thread: Orca ``ray``/``spark``/``bigdl`` against Ray
  Train's ``TorchTrainer`` and Spark's ``TorchDistributor``; Orca 1 worker against the plain torch
  loop; start-up (first call to first step); data scales x1, x4, x16 (``train.py``).
- ``data``: Spark DataFrame -> per-worker numpy batches: Orca's data path against a bare
  ``mapInArrow`` read, ``toPandas`` and Petastorm (``datapath.py``).
- ``inference``: Orca ``predict`` (torch) on a DataFrame against ``predict_batch_udf`` and Ray Data
  ``map_batches`` (``inference.py``).
- ``memory``: a worker's peak memory and throughput against data size, its share in memory and
  streamed to disk (``memory.py``; docs/data-and-memory.md).
- ``startup``: process start to first training step, phase by phase, Orca's three backends against
  Ray Train and TorchDistributor, a fresh process per system and repeat (``startup.py``; issue #21).

Each part writes ``benchmarks/results/<part>.json`` (rows + raw numbers); ``report.py`` merges
every part's JSON (tf and openvino included) into one table and a PNG.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import datapath
import inference
import memory
import report
import startup
import train
from harness import loadavg, run_child, write_part

PARTS = ("train", "data", "inference", "memory", "startup")


def _log(msg: str) -> None:
    print(msg, flush=True)


def data_settings(quick: bool) -> dict:
    return {"rows": 2048 if quick else 8192, "scales": [1, 4] if quick else [1, 4, 16], "repeats": 1 if quick else 5,
         "columns": "features array<float>[784], label long; 2 partitions; cached", "batch_size": datapath.BATCH}


def inference_settings(quick: bool) -> dict:
    return {"rows": 4096 if quick else 16384, "scales": [1, 4] if quick else [1, 4, 16], "repeats": 1 if quick else 5,
            "batch_size": inference.BATCH, "model": "MLP 784-512-512-10, eval, 1 thread per worker, 2 workers"}


def run_data(quick: bool) -> tuple[list[dict], dict, dict]:
    s = data_settings(quick)
    _log(f"  data path: {s['rows']} rows x {s['scales']}, {s['repeats']} repeats ...")
    res = run_child("datapath.py", ["--rows", str(s["rows"]), "--scales", ",".join(map(str, s["scales"])),
                                    "--repeats", str(s["repeats"])], 900 if quick else 1500)
    _log(f"      {'FAILED: ' + res['error'] if 'error' in res else 'done'} ({res.get('process_s', 0):.0f} s)")
    return datapath.rows_from(res), res, s


def run_inference(quick: bool) -> tuple[list[dict], dict, dict]:
    s = inference_settings(quick)
    _log(f"  inference: {s['rows']} rows x {s['scales']}, {s['repeats']} repeats ...")
    res = run_child("inference.py", ["--rows", str(s["rows"]), "--scales", ",".join(map(str, s["scales"])),
                                     "--repeats", str(s["repeats"])], 900 if quick else 1500)
    _log(f"      {'FAILED: ' + res['error'] if 'error' in res else 'done'} ({res.get('process_s', 0):.0f} s)")
    return inference.rows_from(res), res, s


def run_memory(quick: bool) -> tuple[list[dict], dict, dict]:
    s = memory.settings(quick)
    _log(f"  memory: {s['base_rows']} rows x {s['scales']}, {', '.join(s['systems'])} ...")
    res = run_child("memory.py", ["--quick"] if quick else [], 1200 if quick else 3600)
    _log(f"      {'FAILED: ' + res['error'] if 'error' in res else 'done'} ({res.get('process_s', 0):.0f} s)")
    rows = res.get("rows") or [{"part": "memory", "name": "worker memory against data size", "value": None,
                                "unit": "MB", "ratio": None, "target": "<= 1.2", "note": res.get("error")}]
    return rows, res, s


def run_startup(quick: bool) -> tuple[list[dict], dict, dict]:
    repeats = 1 if quick else 3
    _log(f"  start-up, phase by phase: {len(startup.SYSTEMS)} systems x {repeats} cold starts ...")
    rows, raw = startup.measure(quick, repeats, log=_log)
    _log(startup.table(rows))
    return rows, raw, startup.settings(quick, repeats)


def run_data_and_inference() -> dict[str, tuple[list[dict], dict, dict]]:
    """The quick run's data path and inference parts in one process (one cold Spark start, not two)."""
    ds, inf = data_settings(True), inference_settings(True)
    assert ds["scales"] == inf["scales"] and ds["repeats"] == inf["repeats"]
    _log(f"  data path ({ds['rows']} rows) and inference ({inf['rows']} rows) x {ds['scales']}, one process ...")
    res = run_child("data_inference.py", ["--data-rows", str(ds["rows"]), "--inference-rows", str(inf["rows"]),
                                          "--scales", ",".join(map(str, ds["scales"])),
                                          "--repeats", str(ds["repeats"])], 900)
    _log(f"      {'FAILED: ' + res['error'] if 'error' in res else 'done'} ({res.get('process_s', 0):.0f} s)")
    shared = "quick run: the data path and inference parts share one process"
    data_res, inf_res = (res, res) if "error" in res else (res["data"], res["inference"])
    return {"data": (datapath.rows_from(data_res), data_res, dict(ds, note=shared)),
            "inference": (inference.rows_from(inf_res), inf_res, dict(inf, note=shared))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: small data, 1 repetition")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    a = p.parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"--parts: unknown {unknown}; choose from {list(PARTS)}")
    t0 = time.perf_counter()
    _log(f"benchmark suite ({'quick' if a.quick else 'full'}), parts {parts}; load average {loadavg()}")
    all_rows = []
    # quick: data and inference share one process; both parts' records show its time
    shared_load, t = loadavg(), time.perf_counter()
    shared = run_data_and_inference() if a.quick and {"data", "inference"} <= set(parts) else {}
    shared_s = time.perf_counter() - t
    for part in parts:
        started, load = time.perf_counter(), loadavg()
        if part in shared:
            started, load = time.perf_counter() - shared_s, shared_load
            rows, raw, settings = shared[part]
        elif part == "train":
            rows, raw = train.measure(a.quick, _log)
            settings = train.settings(a.quick)
        elif part == "data":
            rows, raw, settings = run_data(a.quick)
        elif part == "memory":
            rows, raw, settings = run_memory(a.quick)
        elif part == "startup":
            rows, raw, settings = run_startup(a.quick)
        else:
            rows, raw, settings = run_inference(a.quick)
        settings["quick"] = a.quick
        write_part(part, rows, settings, raw, started, load)
        all_rows += rows
    _log("")
    _log(report.markdown(all_rows))
    _log(f"\ntorch-environment parts done in {time.perf_counter() - t0:.0f} s; load average now {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
