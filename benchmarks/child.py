"""One Orca training configuration in a fresh process: ``--backend ray|spark|bigdl --workers N``.

``benchmarks/train.py`` starts one of these per configuration, so that each gets its own Orca
context with ``cores = workers`` (the Estimator gives each worker ``cores // workers`` intra-op
threads, so this is how "N workers x 1 thread" is asked for) and start-up is measured cold.

Measured, in order:
  na            set instead of everything else when the backend raises "not available yet"
  context_s     init_orca_context + Spark session ready
  ray_s         Ray started (ray backend only; Orca starts it lazily)
  first_step_s  from the first ``est.fit`` call to the end of rank 0's first training step
  process_to_first_step_s   from the start of this process (imports, context, Ray) to that step
  first_fit_s   wall time of that first fit of one step
  scales        per data scale (rows x 1, 4, 16): rounds of the plain torch loop (with --native)
                then est.fit, interleaved so both see the same load. Steady-state samples/s come
                from History's epoch_time_s, leaving out each fit's first epoch.
The result goes to ``--out`` as JSON.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()
T_PROCESS_WALL = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle  # noqa: E402
import common  # noqa: E402
from torch import nn  # noqa: E402

# common.py is not installed on the workers: its model and optimizer travel by value.
cloudpickle.register_pickle_by_value(common)

NOT_YET = "not available yet"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["ray", "spark", "bigdl"], required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--rows", type=int, default=4096, help="rows at scale x1")
    p.add_argument("--scales", default="1", help="comma-separated data scales, e.g. 1,4,16")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--native", action="store_true", help="interleave the plain torch loop (1 thread)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    scales = [int(s) for s in a.scales.split(",")]
    res: dict = {"system": f"orca-{a.backend}", "backend": a.backend, "workers": a.workers, "threads_per_worker": 1,
                 "rows": a.rows, "batch_size": a.batch_size, "epochs": a.epochs}

    t = time.perf_counter()
    from orca.core import init_orca_context, stop_orca_context
    from orca.torch import Estimator

    res["import_s"] = time.perf_counter() - t
    loss = nn.CrossEntropyLoss()
    kw = {"model": common.make_model, "optimizer": common.make_optimizer, "loss": loss, "backend": a.backend,
          "workers_per_node": a.workers, "use_tqdm": False}
    try:  # a backend still being written says so at construction: report n/a, start nothing
        Estimator.from_torch(**kw)
    except (ValueError, NotImplementedError) as exc:
        if NOT_YET in str(exc):
            res["na"] = str(exc)
            with open(a.out, "w") as fh:
                json.dump(res, fh, indent=1)
            return
        raise

    t = time.perf_counter()
    ctx = init_orca_context(cluster_mode="local", cores=a.workers, conf={"spark.ui.showConsoleProgress": "false"})
    spark = ctx.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    res["context_s"] = time.perf_counter() - t
    try:
        if a.backend == "ray":
            t = time.perf_counter()
            ctx.ray_runtime()
            res["ray_s"] = time.perf_counter() - t

        import pandas as pd

        t = time.perf_counter()
        data = {}
        for s in scales:
            x, y = common.synthetic(a.rows * s)
            df = spark.createDataFrame(pd.DataFrame({"features": list(x), "label": y}),
                                       schema="features array<float>, label long").repartition(a.workers).cache()
            df.count()
            data[s] = (x, y, df)
        res["data_s"] = time.perf_counter() - t

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
        res["process_to_first_step_s"] = first - T_PROCESS_WALL

        res["scales"] = {}
        for s in scales:
            x, y, df = data[s]
            epochs = common.scale_epochs(s, a.epochs)
            rounds = []
            for _ in range(a.rounds):
                rnd: dict = {}
                if a.native:
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
    finally:
        stop_orca_context()
    res["total_s"] = time.perf_counter() - T_PROCESS
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
