"""Start-up, phase by phase (issue #21): where the seconds go from a fresh process to the first
training step, for Orca's ``bigdl``, ``spark`` and ``ray`` backends (``orca.torch`` Estimator, 2
workers x 1 thread, local; ``ray`` also with Ray asked for up front, ``orca-ray-up-front``: issue
#40), Ray Train's ``TorchTrainer`` (2 workers) and Spark's ``TorchDistributor`` (2 processes,
local), on the train part's model and first-scale data.

    python benchmarks/startup.py --out benchmarks/results/startup.json [--quick] [--repeats N]
    python benchmarks/run.py --parts startup          (part ``startup`` of the suite)
    python benchmarks/startup.py --plot-only          (redraw docs/benchmarks/startup.png; matplotlib)

Every system runs in a fresh child process per repeat (this file with ``--child SYSTEM``), so each
start-up is cold. The child records wall-clock times, relative to its own process's creation time
(``psutil``), at the end of each phase:

  imports  interpreter and framework imports (orca.torch / ray.train / pyspark, and torch)
  engine   init_orca_context + Spark session; ray.init; SparkSession. ``orca-ray-up-front``:
           ``init_orca_context(init_ray_on_spark=True)``, Ray's head started alongside the JVM and
           a Ray node (2 CPUs) from a Spark job, all in this phase
  ray      Ray started (Orca ``ray`` backend only: Orca starts Ray lazily; empty elsewhere)
  data     the data cached: a Spark DataFrame (Orca), a materialized Ray Dataset (Ray Train);
           TorchDistributor has no data path (its processes build their share in the train function)
  call     the Estimator / TorchTrainer / TorchDistributor built, fit / run called
  worker   rank 0's worker process created (psutil ``create_time`` inside the worker). A process that
           existed before the call (a Spark Python worker reused or forked by Spark's daemon, a
           worker Ray started ahead) is clamped to the call and counted in ``clamped``
  begin    training begins in the worker: Orca's ``Callback.on_train_begin`` on rank 0 (after the
           framework import, model build, data load and rendezvous); the peers' first line of the
           train function after their process-group setup
  step     rank 0's first optimizer step done

Orca's rows start with the driver JVM's class archive that a user has from their second start on
(``orca.core._jvm_cache``; primed in this run's own cache by one untimed start before measuring);
``orca-bigdl-no-archive`` is the first start on a Spark installation (``jvm_class_cache=False``).

Then, in the same session, a second Estimator / TorchTrainer / TorchDistributor of the same model
trains one step: its call to its first step is reported apart (a notebook user's next model; Orca's
``ray`` backend keeps the first Estimator's actors warm for it, ``OrcaSettings.warm_workers_s``).

The rank-0 worker writes its times to files (as ``common.first_step_callback`` does) and the child
collects them. Rows (one per system): the median of each phase's duration and the median total,
process start to first step; Orca's ``bigdl`` and ``ray`` rows carry issue #21's targets (10 s, 12 s)
as their reference. ``report.py`` draws the stacked bars from the JSON (the torch environment has
no matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import RESULTS, cached_df, fmt, loadavg, median, row, run_child, write_part

SYSTEMS = ("orca-bigdl", "orca-spark", "orca-ray", "orca-ray-up-front", "orca-bigdl-no-archive", "ray-train",
           "torch-distributor")
#: Orca systems that are not just a backend: (backend, init_orca_context settings)
ORCA_VARIANTS = {"orca-bigdl-no-archive": ("bigdl", {"jvm_class_cache": False}),
                 "orca-ray-up-front": ("ray", {"init_ray_on_spark": True})}
#: how long measure() waits for the JVM class archive its priming start builds
ARCHIVE_WAIT_S = 300
STAMPS = ("imports", "engine", "ray", "data", "call", "worker", "begin", "step")
LABELS = {"imports": "imports", "engine": "engine start", "ray": "Ray start", "data": "data cached",
          "call": "Estimator / trainer built", "worker": "call to worker process", "begin": "worker set-up to train begin",
          "step": "first step"}
# issue #21 (and #40 for the up-front ray row): process start to first step, s
TARGETS = {"orca-bigdl": 10.0, "orca-ray": 12.0, "orca-ray-up-front": 12.0, "orca-bigdl-no-archive": 10.0}
WORKERS, BATCH = 2, 128
TIMEOUT_S = 300
PNG = HERE.parent / "docs" / "benchmarks" / "startup.png"


# ------------------------------------------------------------------------------ worker side


def _stamp(directory: str, name: str) -> None:
    """Rank 0 in the worker: this moment and this process's creation time, to ``<name>.json``."""
    import psutil

    me = psutil.Process(os.getpid())
    parent = me.parent()
    rec = {"t": time.time(), "created": me.create_time(), "pid": me.pid,
           "parent": parent and {"created": parent.create_time(), "cmd": " ".join(parent.cmdline()[:3])[:200]}}
    with open(os.path.join(directory, f"{name}.json"), "w") as fh:
        json.dump(rec, fh)


def _orca_callback(directory: str) -> Any:
    from orca.torch import Callback

    class Stamps(Callback):
        def __init__(self) -> None:
            self.directory = directory

        def __setstate__(self, state: dict) -> None:  # unpickled in a worker, with fit's job
            self.__dict__.update(state)
            _stamp(directory, f"arrived-{os.getpid()}")

        def on_train_begin(self, logs: dict | None = None) -> None:
            if self.rank == 0:
                _stamp(directory, "begin")

        def on_batch_end(self, step: int, logs: dict | None = None) -> None:
            if self.rank == 0 and not getattr(self, "_done", False):
                self._done = True
                _stamp(directory, "step")

    return Stamps()


def _one_step(model: Any, xb: Any, yb: Any) -> None:
    import common
    from torch import nn

    opt = common.make_optimizer(model)
    opt.zero_grad(set_to_none=True)
    nn.CrossEntropyLoss()(model(xb), yb).backward()
    opt.step()


def _ray_train_loop(config: dict) -> None:
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    if rank == 0:
        _stamp(config["dir"], "begin")
    import common
    import ray.train.torch
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(common.make_model())
    shard = ray.train.get_dataset_shard("train")
    batch = next(iter(shard.iter_torch_batches(batch_size=config["batch_size"] // WORKERS)))
    _one_step(model, batch["features"], batch["label"])
    if rank == 0:
        _stamp(config["dir"], "step")


def _distributor_fn(rows: int, batch_size: int, directory: str) -> None:
    import common
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        _stamp(directory, "begin")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = common.synthetic(rows)
    lo = rank * rows // world
    xb, yb = torch.from_numpy(x[lo:lo + batch_size // world]), torch.from_numpy(y[lo:lo + batch_size // world])
    _one_step(torch.nn.parallel.DistributedDataParallel(common.make_model()), xb, yb)
    if rank == 0:
        _stamp(directory, "step")
    dist.destroy_process_group()


# ------------------------------------------------------------------------------- child side


def _orca(backend: str, rows: int, tmp: str, mark: Any, settings: dict | None = None) -> None:
    import cloudpickle
    import common
    from torch import nn

    from orca.core import init_orca_context, stop_orca_context
    from orca.torch import Estimator

    cloudpickle.register_pickle_by_value(common)
    mark("imports")
    ctx = init_orca_context(cluster_mode="local", cores=WORKERS, conf={"spark.ui.showConsoleProgress": "false"},
                            **(settings or {}))
    spark = ctx.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    mark("engine")
    try:
        if backend == "ray":
            ctx.ray_runtime()
            mark("ray")
        x, y = common.synthetic(rows)
        df = cached_df(spark, {"features": x, "label": y}, WORKERS)
        mark("data")
        est = Estimator.from_torch(model=common.make_model, optimizer=common.make_optimizer,
                                   loss=nn.CrossEntropyLoss(), backend=backend, workers_per_node=WORKERS,
                                   use_tqdm=False)
        mark("call")
        est.fit(df, epochs=1, max_steps=1, batch_size=BATCH, feature_cols=["features"], label_cols=["label"],
                callbacks=[_orca_callback(tmp)])
        est.shutdown()
        # the next Estimator in the same session (a notebook's second model): its call to first step
        est = Estimator.from_torch(model=common.make_model, optimizer=common.make_optimizer,
                                   loss=nn.CrossEntropyLoss(), backend=backend, workers_per_node=WORKERS,
                                   use_tqdm=False)
        mark("next_call")
        est.fit(df, epochs=1, max_steps=1, batch_size=BATCH, feature_cols=["features"], label_cols=["label"],
                callbacks=[_orca_callback(next_dir(tmp))])
        est.shutdown()
    finally:
        stop_orca_context()


def _ray_train(rows: int, tmp: str, mark: Any) -> None:
    import cloudpickle
    import common
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    cloudpickle.register_pickle_by_value(common)
    mark("imports")
    # as in train_peers.py: logical CPUs leave room for the controller and Ray Data's coordinator
    ray.init(num_cpus=WORKERS + 2, include_dashboard=False, address="local", log_to_driver=False)
    mark("engine")
    try:
        x, y = common.synthetic(rows)
        table = pa.table({"features": ArrowTensorArray.from_numpy(x), "label": pa.array(y)})
        ds = ray.data.from_arrow(table).materialize()
        mark("data")
        trainer = TorchTrainer(
            _ray_train_loop, train_loop_config={"batch_size": BATCH, "dir": tmp},
            scaling_config=ScalingConfig(num_workers=WORKERS, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(tmp, "ray_results"), name="startup"),
            datasets={"train": ds})
        mark("call")
        trainer.fit()
        trainer = TorchTrainer(
            _ray_train_loop, train_loop_config={"batch_size": BATCH, "dir": next_dir(tmp)},
            scaling_config=ScalingConfig(num_workers=WORKERS, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(tmp, "ray_results"), name="startup-next"),
            datasets={"train": ds})
        mark("next_call")
        trainer.fit()
    finally:
        ray.shutdown()


def _distributor(rows: int, tmp: str, mark: Any) -> None:
    import cloudpickle
    import common  # torch, as in the other children
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(common)
    mark("imports")
    spark = (SparkSession.builder.master(f"local[{WORKERS}]").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    mark("engine")
    try:
        mark("data")  # no data path: each process builds its share in the train function
        dist = TorchDistributor(num_processes=WORKERS, local_mode=False, use_gpu=False)
        mark("call")
        dist.run(_distributor_fn, rows, BATCH, tmp)
        dist = TorchDistributor(num_processes=WORKERS, local_mode=False, use_gpu=False)
        mark("next_call")
        dist.run(_distributor_fn, rows, BATCH, next_dir(tmp))
    finally:
        spark.stop()


def next_dir(tmp: str) -> str:
    """Where the second Estimator / trainer of a child writes its stamps."""
    path = os.path.join(tmp, "next")
    os.makedirs(path, exist_ok=True)
    return path


def child(system: str, rows: int, out: str) -> None:
    """One cold start-up of ``system``; writes ``{"stamps": {...}, "phases": {...}, ...}`` to ``out``."""
    import psutil

    t0 = psutil.Process(os.getpid()).create_time()
    stamps: dict[str, float] = {}

    def mark(name: str) -> None:
        stamps[name] = time.time() - t0

    with tempfile.TemporaryDirectory() as tmp:
        if system.startswith("orca-"):
            backend, settings = ORCA_VARIANTS.get(system, (system.removeprefix("orca-"), {}))
            _orca(backend, rows, tmp, mark, settings)
        elif system == "ray-train":
            _ray_train(rows, tmp, mark)
        else:
            _distributor(rows, tmp, mark)
        begin = json.loads(Path(tmp, "begin.json").read_text())
        step = json.loads(Path(tmp, "step.json").read_text())
        arrived = Path(tmp, f"arrived-{begin['pid']}.json")  # Orca: fit's job unpickled in rank 0's process
        arrived_t = json.loads(arrived.read_text())["t"] - t0 if arrived.exists() else None
        next_step = json.loads(Path(next_dir(tmp), "step.json").read_text())["t"] - t0
    created = begin["created"] - t0
    parent = begin["parent"] or {}
    res: dict[str, Any] = {"system": system, "rows": rows, "worker_created_raw": created,
                           "clamped": created < stamps["call"], "worker_parent": parent.get("cmd"),
                           "worker_parent_created": parent.get("created", t0) - t0, "job_arrived": arrived_t}
    stamps.update(worker=max(created, stamps["call"]), begin=begin["t"] - t0, step=step["t"] - t0)
    res["next_call_to_step_s"] = next_step - stamps.pop("next_call")
    res["stamps"] = stamps
    res["phases"] = phases_of(stamps)
    Path(out).write_text(json.dumps(res, indent=1))


def phases_of(stamps: dict[str, float]) -> dict[str, float]:
    """Consecutive differences of the stamps; a missing stamp (``ray`` off the Orca ray backend) is
    an empty phase."""
    out, last = {}, 0.0
    for name in STAMPS:
        t = stamps.get(name, last)
        out[name], last = t - last, t
    return out


# ------------------------------------------------------------------------------ parent side


def measure(quick: bool, repeats: int, systems: tuple[str, ...] = SYSTEMS, log: Any = print) -> tuple[list, dict]:
    """``repeats`` rounds of one fresh child per system (interleaved, so each sees the same load)."""
    import train

    rows_n = train.settings(quick)["rows"]  # the train part's first scale
    raw: dict[str, list[dict]] = {s: [] for s in systems}
    cache = prime_class_archive(rows_n, log)
    try:
        for rep in range(repeats):
            for s in systems:
                res = run_child("startup.py", ["--child", s, "--rows", str(rows_n)], TIMEOUT_S)
                brief = res["error"] if "error" in res else f"first step at {res['stamps']['step']:.1f} s"
                log(f"  [{rep + 1}/{repeats}] start-up {s}: {brief} ({res['process_s']:.0f} s)")
                raw[s].append(res)
    finally:
        os.environ.pop("ORCA_CACHE_DIR", None)
        shutil.rmtree(cache, ignore_errors=True)  # the run's own archive (~180 MB)
    return rows_from(raw), raw


def prime_class_archive(rows_n: int, log: Any = print) -> Path:
    """Give Orca's systems the driver JVM's class archive (``orca.core._jvm_cache``) that a user
    has from their second start on: one untimed ``orca-bigdl`` start records it, and its build
    (in the background once that JVM ended) is awaited. The cache is this run's own
    (``ORCA_CACHE_DIR``), so no archive of an earlier run is measured; ``orca-bigdl-no-archive``
    is a first start (``jvm_class_cache=False``). Returns the cache folder (the caller removes it)."""
    root = Path(tempfile.mkdtemp(prefix="orca-bench-cache-"))
    os.environ["ORCA_CACHE_DIR"] = str(root)
    t = time.perf_counter()
    res = run_child("startup.py", ["--child", "orca-bigdl", "--rows", str(rows_n)], TIMEOUT_S)
    if "error" in res:
        log(f"  priming the class archive failed: {res['error']}")
        return root
    from orca.core import _jvm_cache

    try:
        ready = _jvm_cache.wait_for_archive(root / "jvm", ARCHIVE_WAIT_S)
    except RuntimeError as exc:
        ready = None
        log(f"  {exc}")
    if ready is not None:
        log(f"  class archive ready after {time.perf_counter() - t:.0f} s (one untimed start, then its build)")
    else:
        log(f"  no class archive after {ARCHIVE_WAIT_S} s: Orca's rows start without it")
    return root


def rows_from(raw: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for system, results in raw.items():
        ok = [r for r in results if "stamps" in r]
        name = f"process start to first step, phase by phase: {system} 2x1, s"
        if not ok:
            rows.append(row("startup", name, None, "s", note="; ".join(sorted({r.get("error", "?") for r in results}))))
            continue
        total = median([r["stamps"]["step"] for r in ok])
        target = TARGETS.get(system)
        clamped = sum(r["clamped"] for r in ok)
        note = f"ratio: issue #21's target ({target:.0f} s) / total" if target else ""
        if clamped:
            note += f"{'; ' if note else ''}worker process older than the call in {clamped}/{len(ok)}: clamped"
        rows.append(row("startup", name, total, "s", target / total if target else None,
                        ">= 1.0" if target else None, reference=target, system=system, repeats=len(ok),
                        phases={p: median([r["phases"][p] for r in ok]) for p in STAMPS}, clamped=clamped,
                        note=note or None))
    rows.extend(next_rows(raw))
    return rows


PEERS = ("ray-train", "torch-distributor")


def next_rows(raw: dict[str, list[dict]]) -> list[dict]:
    """The second Estimator / trainer of each child: its call to its first step (median), Orca's
    rows against the faster peer (ratio peer / Orca: > 1 is Orca ahead)."""
    medians = {s: median([r["next_call_to_step_s"] for r in res if "next_call_to_step_s" in r])
               for s, res in raw.items() if any("next_call_to_step_s" in r for r in res)}
    peers = [medians[p] for p in PEERS if p in medians]
    best_peer = min(peers) if peers else None
    rows = []
    for system, value in medians.items():
        orca = system.startswith("orca-")
        ratio = best_peer / value if orca and best_peer else None
        rows.append(row("startup", f"next Estimator / trainer in the same session, call to first step: {system} 2x1, s",
                        value, "s", ratio, ">= 1.0" if ratio is not None else None,
                        reference=best_peer if orca else None, system=system, kind="next",
                        note="ratio: the faster peer's / Orca's" if ratio is not None else None))
    return rows


def table(rows: list[dict]) -> str:
    """Median seconds per phase per system (Markdown)."""
    lines = ["| system | " + " | ".join(LABELS[p] for p in STAMPS) + " | total |",
             "|---|" + "---:|" * (len(STAMPS) + 1)]
    for r in rows:
        if r.get("kind") == "next":
            continue
        ph = r.get("phases") or {}
        cells = [fmt(ph.get(p), 2) for p in STAMPS] + [f"**{fmt(r.get('value'), 2)}**"]
        lines.append(f"| {r.get('system') or r['name']} | " + " | ".join(cells) + " |")
    nxt = [r for r in rows if r.get("kind") == "next"]
    if nxt:
        lines += ["", "| system | next Estimator / trainer: call to first step, s | ratio (faster peer / Orca) |",
                  "|---|---:|---:|"]
        lines += [f"| {r['system']} | {fmt(r.get('value'), 2)} | {fmt(r.get('ratio'), 2)} |" for r in nxt]
    return "\n".join(lines)


def plot(doc_path: Path = RESULTS / "startup.json", png: Path = PNG) -> Path | None:
    """Stacked horizontal bars, one per system, one segment per phase (medians), total labelled."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"no startup PNG: {exc}")
        return None
    doc = json.loads(Path(doc_path).read_text())
    rows = [r for r in doc["rows"] if r.get("phases") and r.get("kind") != "next"]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 2.2))
    colors = plt.get_cmap("tab10").colors
    for i, r in enumerate(rows):
        left = 0.0
        for j, p in enumerate(STAMPS):
            w = r["phases"][p]
            ax.barh(i, w, left=left, color=colors[j], label=LABELS[p] if i == 0 else None)
            left += w
        star = " *" if r.get("clamped") else ""
        ax.text(left + 0.2, i, f"{r['value']:.1f} s{star}", va="center", fontsize=9)
        if r.get("reference"):
            ax.plot([r["reference"]] * 2, [i - 0.4, i + 0.4], color="black", lw=1.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['system']} 2x1" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from process start (median of each phase; label: median total; black tick: "
                  "issue #21's target; *: worker process older than the call, clamped to it)", fontsize=8)
    m = doc.get("machine", {})
    ax.set_title(f"Start-up to the first training step, phase by phase (median of {doc['settings'].get('repeats')} "
                 f"cold start(s) each, {m.get('cpus')} CPUs, load average before {m.get('load_average_before')})",
                 fontsize=10)
    ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def settings(quick: bool, repeats: int) -> dict:
    import train

    return {"quick": quick, "repeats": repeats, "rows": train.settings(quick)["rows"], "batch_size": BATCH,
            "workers": WORKERS, "threads_per_worker": 1, "phases": LABELS, "targets_s": TARGETS,
            "model": "MLP 784-512-512-10 (common.py), one fit of one step / one step in the peers' loops"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(RESULTS / "startup.json"))
    p.add_argument("--quick", action="store_true", help="1 repeat, the quick run's data size")
    p.add_argument("--repeats", type=int, help="cold starts per system (default 3, quick 1)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    p.add_argument("--plot-only", action="store_true", help="redraw the PNG from --out")
    p.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=4096, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.rows, a.out)
        return 0
    if not a.plot_only:
        systems = tuple(s.strip() for s in a.systems.split(",") if s.strip())
        unknown = sorted(set(systems) - set(SYSTEMS))
        if unknown:
            p.error(f"--systems: unknown {unknown}")
        repeats = a.repeats or (1 if a.quick else 3)
        started, load = time.perf_counter(), loadavg()
        rows, raw = measure(a.quick, repeats, systems)
        write_part("startup", rows, settings(a.quick, repeats), raw, started, load, out=Path(a.out))
        print(table(rows))
    png = plot(Path(a.out))
    if png:
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
