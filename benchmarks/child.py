"""Orca training configurations in a fresh process: ``--backend ray|spark|bigdl|horovod --workers N``.

``benchmarks/train.py`` starts one of these per configuration (full run), so that each gets its
own Orca context with ``cores = workers`` (the Estimator gives each worker ``cores // workers``
intra-op threads, so this is how "N workers x 1 thread" is asked for) and start-up is measured
cold. The quick run passes ``--backend ray,spark,bigdl,horovod``: the backends train in turn in
one process (one context; each its own workers), and only the first one's start-up is cold.
``horovod`` trains only where ``horovod.torch`` imports; elsewhere its result is
``{"na": "horovod not installed: ..."}`` (a row with the install command and no number).

Measured per backend, in order:
  context_s     init_orca_context + Spark session ready (first backend)
  ray_s         Ray started (the first backend on Ray actors, ray or horovod; Orca starts it lazily)
  data_s        the first scale's DataFrame built and cached
  first_step_s  from the first ``est.fit`` call to the end of rank 0's first training step
  process_to_first_step_s   from the start of this process (imports, context, Ray) to that step
                (the first backend of the process only)
  first_fit_s   wall time of that first fit of one step
  scales        per data scale (rows x 1, 4, 16): rounds of the plain torch loop (with --native)
                then est.fit, interleaved so both see the same load. Steady-state samples/s come
                from History's epoch_time_s, leaving out each fit's first epoch.
The result goes to ``--out`` as JSON: one backend's dict, or ``{backend: dict}`` for several.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()
T_PROCESS_WALL = time.time()

import argparse
import json
import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle
import common
from harness import cached_df, horovod_missing
from torch import nn

# common.py is not installed on the workers: its model and optimizer travel by value.
cloudpickle.register_pickle_by_value(common)

BACKENDS = ("ray", "spark", "bigdl", "horovod")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True,
                   help="ray, spark, bigdl or horovod; or several, comma-separated, trained in turn in this process "
                        "(the quick run: only the first one's start-up is cold)")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--rows", type=int, default=4096, help="rows at scale x1")
    p.add_argument("--scales", default="1", help="comma-separated data scales, e.g. 1,4,16")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--native", action="store_true", help="interleave the plain torch loop (1 thread)")
    p.add_argument("--also-one-worker", action="store_true",
                   help="after the backends, train ray with 1 worker held to 1 thread, with the plain loop "
                        "interleaved (the quick run's 1x1 configuration; result key 'ray-1x1')")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    backends = [b.strip() for b in a.backend.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        p.error(f"--backend: unknown {unknown}")
    out: dict = {}
    if "horovod" in backends and (why := horovod_missing()):
        out["horovod"] = {"system": "orca-horovod", "backend": "horovod", "na": why}
        backends = [b for b in backends if b != "horovod"]
        if not backends:
            with open(a.out, "w") as fh:
                json.dump(out["horovod"], fh, indent=1)
            return
    scales = [int(s) for s in a.scales.split(",")]

    t = time.perf_counter()
    from orca.core import init_orca_context, stop_orca_context
    from orca.torch import Estimator

    import_s = time.perf_counter() - t
    t = time.perf_counter()
    ctx = init_orca_context(cluster_mode="local", cores=a.workers, conf={"spark.ui.showConsoleProgress": "false"})
    spark = ctx.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    context_s = time.perf_counter() - t

    def make_data(scale: int) -> tuple:
        x, y = common.synthetic(a.rows * scale)
        return x, y, cached_df(spark, {"features": x, "label": y}, a.workers)

    data: dict = {}
    try:
        configs = [(b, a.workers, a.native) for b in backends]
        if a.also_one_worker:
            configs.append(("ray", 1, True))
        for i, (backend, workers, native) in enumerate(configs):
            res: dict = {"system": f"orca-{backend}", "backend": backend, "workers": workers,
                         "threads_per_worker": 1, "rows": a.rows, "batch_size": a.batch_size, "epochs": a.epochs,
                         "cold": i == 0}
            if i == 0:
                res.update(import_s=import_s, context_s=context_s)
            if backend in ("ray", "horovod") and not ctx.has_ray:
                t = time.perf_counter()
                ctx.ray_runtime()
                res["ray_s"] = time.perf_counter() - t
            # only the first scale's data before the first fit: the peers also build just the data
            # they train on before their first step
            if scales[0] not in data:
                t = time.perf_counter()
                data[scales[0]] = make_data(scales[0])
                res["data_s"] = time.perf_counter() - t
            train_one(Estimator, backend, workers, native, a, scales, data, make_data, res)
            out[backend if workers == a.workers else f"{backend}-{workers}x1"] = res
    finally:
        stop_orca_context()
    for res in out.values():
        res["total_s"] = time.perf_counter() - T_PROCESS
    with open(a.out, "w") as fh:
        json.dump(out if len(out) > 1 else out[backends[0]], fh, indent=1)


def train_one(Estimator: Any, backend: str, workers: int, native: bool, a: Any, scales: list[int], data: dict,
              make_data: Any, res: dict) -> None:
    """First fit (start-up), then the rounds at every scale, for one configuration; fills ``res``."""
    model = common.make_model if workers == a.workers else common.make_model_one_thread
    kw = {"model": model, "optimizer": common.make_optimizer, "loss": nn.CrossEntropyLoss(),
          "backend": backend, "workers_per_node": workers, "use_tqdm": False}
    est = Estimator.from_torch(**kw)
    cols = {"feature_cols": ["features"], "label_cols": ["label"], "batch_size": a.batch_size}
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "first_step")
        t_wall, t = time.time(), time.perf_counter()
        est.fit(data[scales[0]][2], epochs=1, max_steps=1, callbacks=[common.first_step_callback(stamp)], **cols)
        res["first_fit_s"] = time.perf_counter() - t
        with open(stamp) as fh:
            first = float(fh.read())
    res["first_step_s"] = first - t_wall
    if res["cold"]:  # from process start: meaningful for the first configuration of a process only
        res["process_to_first_step_s"] = first - T_PROCESS_WALL
    res["scales"] = {}
    for s in scales:
        if s not in data:
            data[s] = make_data(s)
        x, y, df = data[s]
        epochs = common.scale_epochs(s, a.epochs)
        rounds = []
        for _ in range(a.rounds):
            rnd: dict = {}
            if native:
                rnd["native"] = common.native_epochs(x, y, a.batch_size, epochs, threads=1)
            t = time.perf_counter()
            hist = est.fit(df, epochs=epochs, **cols)
            wall = time.perf_counter() - t
            rnd["orca"] = [{k: e[k] for k in ("epoch_time_s", "num_samples", "train_loss")} for e in hist]
            rnd["fit_wall_s"] = wall
            rnd["fit_overhead_s"] = wall - sum(e["epoch_time_s"] for e in hist)
            rounds.append(rnd)
        res["scales"][str(s)] = {"rows": len(x), "epochs": epochs, "rounds": rounds}
    est.shutdown()


if __name__ == "__main__":
    main()
