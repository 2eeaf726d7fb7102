"""Orca PyTorch Estimator benchmark: overhead against plain torch, 2-worker scaling, start-up.

    nox -s bench -- --quick        smoke run, about 3-4 minutes (2 cores)
    nox -s bench                   full run, about 10-12 minutes (2 cores)
    python benchmarks/run.py --backends ray --rows 8192   (from an environment with orca-torch)

Each configuration (backend x workers, each worker 1 intra-op thread) runs in a fresh process
(``benchmarks/child.py``) with its own local Orca context, so start-up is measured cold. Inside,
the plain single-process torch loop (``benchmarks/common.py``) and ``est.fit`` alternate, so both
see the same machine load. ``benchmarks/native_ddp.py`` adds plain torch DDP on 2 processes as
the machine's own ceiling for 2-worker scaling. The model is an MLP 784-512-512-10 on synthetic
data, SGD with momentum, global batch 128 (about 9 ms a step on one core).

Prints a Markdown table and writes everything (raw per-epoch times too) to
``benchmarks/results/torch.json``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import median, rates  # noqa: E402

TARGET_RATIO = 0.97
TARGET_EFFICIENCY = 0.9


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env


def _run(script: str, args: list[str], timeout: float) -> dict:
    """Run a helper script in a fresh interpreter; return the JSON it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        log = Path(tmp) / "log.txt"
        cmd = [sys.executable, str(HERE / script), *args, "--out", str(out)]
        t = time.perf_counter()
        with open(log, "w") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_env(), timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            tail = log.read_text()[-4000:]
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
        result = json.loads(out.read_text())
        result["process_s"] = time.perf_counter() - t
        return result


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "n/a"


def _fmt(v: float, digits: int = 0) -> str:
    return "n/a" if v != v else f"{v:,.{digits}f}"


def _status(value: float, target: float) -> str:
    if value != value:
        return "not measured"
    return "met" if value >= target else f"**MISSED** (target >= {target})"


def summarize(children: list[dict], ddp: dict | None) -> dict:
    """Medians over every steady-state epoch of every round of every process of a configuration."""
    summary: dict = {"configs": {}}
    for c in children:
        key = f"{c['backend']}_{c['workers']}x1"
        s = summary["configs"].setdefault(key, {"backend": c["backend"], "workers": c["workers"], "orca": [],
                                                 "native": [], "paired": [], "best_orca": 0.0,
                                                 "context_s": [], "ray_s": [], "first_fit_s": [], "ready_s": [],
                                                 "fit_overhead_s": [], "first_epoch_extra_s": []})
        for k in ("context_s", "ray_s", "first_fit_s", "ready_s"):
            if k in c:
                s[k].append(c[k])
        for rnd in c["rounds"]:
            o = rates(rnd["orca"])
            s["orca"] += o
            s["fit_overhead_s"].append(rnd["fit_overhead_s"])
            steady = [e["epoch_time_s"] for e in rnd["orca"][1:]]
            if steady:
                s["first_epoch_extra_s"].append(rnd["orca"][0]["epoch_time_s"] - median(steady))
            if "native" in rnd:
                n = rates(rnd["native"])
                s["native"] += n
                s["paired"].append(median(o) / median(n))
    out: dict = {"configs": {}}
    for key, s in summary["configs"].items():
        out["configs"][key] = {
            "backend": s["backend"], "workers": s["workers"],
            "samples_per_s": median(s["orca"]), "samples_per_s_best": max(s["orca"], default=float("nan")),
            "native_samples_per_s": median(s["native"]),
            "native_samples_per_s_best": max(s["native"], default=float("nan")),
            "ratio_vs_native": median(s["orca"]) / median(s["native"]) if s["native"] else float("nan"),
            "ratio_vs_native_best": (max(s["orca"]) / max(s["native"])) if s["native"] else float("nan"),
            "ratio_vs_native_paired_rounds": s["paired"],
            **{k: median(s[k]) for k in ("context_s", "ray_s", "first_fit_s", "ready_s", "fit_overhead_s",
                                          "first_epoch_extra_s")},
        }
    for backend in ("ray", "spark"):
        one, two = out["configs"].get(f"{backend}_1x1"), out["configs"].get(f"{backend}_2x1")
        if one and two:
            out[f"{backend}_efficiency_2x1"] = two["samples_per_s"] / (2 * one["samples_per_s"])
            out[f"{backend}_efficiency_2x1_best"] = two["samples_per_s_best"] / (2 * one["samples_per_s_best"])
    if ddp:
        nat = [r for rnd in ddp["rounds"] for r in rates(rnd["native"])]
        d2 = [r for rnd in ddp["rounds"] for r in rates(rnd["ddp2"])]
        out["native_ddp"] = {"native_samples_per_s": median(nat), "ddp2_samples_per_s": median(d2),
                             "efficiency_2x1": median(d2) / (2 * median(nat)),
                             "efficiency_2x1_best": max(d2) / (2 * max(nat))}
    return out


def table(summary: dict) -> str:
    cfg = summary["configs"]
    lines = ["| measurement | orca samples/s | reference samples/s | ratio (median) | ratio (best epochs) | target |",
             "|---|---:|---:|---:|---:|---|"]
    for backend in ("ray", "spark"):
        c = cfg.get(f"{backend}_1x1")
        if c:
            lines.append(f"| {backend} 1 worker x 1 thread vs plain torch loop (1 thread) | {_fmt(c['samples_per_s'])} "
                         f"| {_fmt(c['native_samples_per_s'])} | {_fmt(c['ratio_vs_native'], 3)} "
                         f"| {_fmt(c['ratio_vs_native_best'], 3)} | {_status(c['ratio_vs_native'], TARGET_RATIO)} |")
    for backend in ("ray", "spark"):
        one, two = cfg.get(f"{backend}_1x1"), cfg.get(f"{backend}_2x1")
        if one and two:
            eff = summary[f"{backend}_efficiency_2x1"]
            lines.append(f"| {backend} 2 workers x 1 thread vs 2 x (1 x 1): efficiency | {_fmt(two['samples_per_s'])} "
                         f"| 2 x {_fmt(one['samples_per_s'])} | {_fmt(eff, 3)} "
                         f"| {_fmt(summary[f'{backend}_efficiency_2x1_best'], 3)} "
                         f"| {_status(eff, TARGET_EFFICIENCY)} |")
    d = summary.get("native_ddp")
    if d:
        lines.append(f"| reference: plain torch DDP 2 processes x 1 thread vs 2 x plain loop | "
                     f"{_fmt(d['ddp2_samples_per_s'])} | 2 x {_fmt(d['native_samples_per_s'])} "
                     f"| {_fmt(d['efficiency_2x1'], 3)} | {_fmt(d['efficiency_2x1_best'], 3)} | (no target: the machine's ceiling) |")
    lines += ["", "| start-up (median, s) | context ready | Ray started | first fit (1 step): workers ready "
              "| process start to ready | fixed cost per later fit | first epoch of a fit, extra |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for key, c in cfg.items():
        lines.append(f"| {key} | {_fmt(c['context_s'], 1)} | {_fmt(c['ray_s'], 1)} | {_fmt(c['first_fit_s'], 1)} "
                     f"| {_fmt(c['ready_s'], 1)} | {_fmt(c['fit_overhead_s'], 2)} | {_fmt(c['first_epoch_extra_s'], 2)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: fewer rows, rounds and processes (~3 min)")
    p.add_argument("--backends", default="ray,spark", help="comma-separated: ray, spark")
    p.add_argument("--rows", type=int, help="training rows (default 8192; 4096 with --quick)")
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--epochs", type=int, default=4, help="epochs per timed fit (the first is left out)")
    p.add_argument("--rounds", type=int, help="timed fits per process (default 3; 2 with --quick)")
    p.add_argument("--repeats", type=int, help="processes per configuration (default 2; 1 with --quick)")
    p.add_argument("--no-ddp", action="store_true", help="skip the plain torch DDP reference")
    p.add_argument("--out", default=str(HERE / "results" / "torch.json"))
    a = p.parse_args(argv)
    rows = a.rows or (4096 if a.quick else 8192)
    rounds = a.rounds or (2 if a.quick else 3)
    repeats = a.repeats or (1 if a.quick else 2)
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    common_args = ["--rows", str(rows), "--batch-size", str(a.batch_size), "--epochs", str(a.epochs)]

    t_start = time.perf_counter()
    load_before = _loadavg()
    print(f"benchmark: {rows} rows, batch {a.batch_size}, {a.epochs} epochs x {rounds} rounds x {repeats} "
          f"process(es) per configuration; backends {backends}; load average {load_before}", flush=True)
    children = []
    for rep in range(repeats):
        for backend in backends:
            for workers in (1, 2):
                args = ["--backend", backend, "--workers", str(workers), "--rounds", str(rounds), *common_args]
                if workers == 1:
                    args.append("--native")
                print(f"  [{rep + 1}/{repeats}] {backend} {workers} worker(s) x 1 thread ...", end=" ", flush=True)
                c = _run("child.py", args, timeout=900)
                print(f"{median([r for rnd in c['rounds'] for r in rates(rnd['orca'])]):,.0f} samples/s "
                      f"({c['process_s']:.0f} s)", flush=True)
                children.append(c)
    ddp = None
    if not a.no_ddp:
        print("  plain torch: 1 process vs DDP 2 processes ...", end=" ", flush=True)
        ddp = _run("native_ddp.py", ["--rounds", str(1 if a.quick else rounds), *common_args], timeout=900)
        print(f"({ddp['process_s']:.0f} s)", flush=True)

    summary = summarize(children, ddp)
    md = table(summary)
    print()
    print(md)
    result = {
        "benchmark": "orca.torch Estimator.fit vs plain torch",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": _loadavg()},
        "settings": {"rows": rows, "batch_size": a.batch_size, "epochs": a.epochs, "rounds": rounds,
                     "repeats": repeats, "quick": a.quick, "model": "MLP 784-512-512-10, SGD lr 0.01 momentum 0.9",
                     "threads_per_worker": 1},
        "targets": {"ratio_vs_native": TARGET_RATIO, "efficiency_2x1": TARGET_EFFICIENCY},
        "summary": summary,
        "table_markdown": md,
        "children": children,
        "native_ddp": ddp,
        "total_s": time.perf_counter() - t_start,
    }
    try:
        import torch

        result["machine"]["torch"] = torch.__version__
    except ImportError:  # pragma: no cover
        pass
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out} in {result['total_s']:.0f} s; load average now {result['machine']['load_average_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
