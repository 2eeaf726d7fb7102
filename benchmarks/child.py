"""One benchmark configuration in a fresh process: ``--backend ray|spark --workers N``.

``benchmarks/run.py`` starts one of these per configuration, so that each gets its own Orca
context with ``cores = workers`` (the Estimator gives each worker ``cores // workers`` intra-op
threads, so this is how "N workers x 1 thread" is asked for) and start-up is measured cold.

Measured, in order:
  context_s     init_orca_context + Spark session ready
  ray_s         Ray started (ray backend only; Orca starts it lazily)
  data_s        synthetic data turned into a cached Spark DataFrame (not part of any result)
  first_fit_s   a first fit of one step: workers started, data shipped, one step (= workers ready)
  rounds        each: the plain torch loop for `epochs` epochs, then est.fit for `epochs` epochs,
                interleaved so both see the same machine load. Steady-state samples/s come
                from History's epoch_time_s, leaving out each fit's first epoch.
The result goes to ``--out`` as JSON.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle  # noqa: E402
import common  # noqa: E402
from torch import nn  # noqa: E402

# common.py is not installed on the workers: its model and optimizer travel by value.
cloudpickle.register_pickle_by_value(common)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["ray", "spark"], required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--native", action="store_true", help="interleave the plain torch loop (1 thread)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    res: dict = {"backend": a.backend, "workers": a.workers, "threads_per_worker": 1, "rows": a.rows,
                 "batch_size": a.batch_size, "epochs": a.epochs}

    t = time.perf_counter()
    from orca.core import init_orca_context, stop_orca_context
    from orca.torch import Estimator

    res["import_s"] = time.perf_counter() - t
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

        t = time.perf_counter()
        import pandas as pd

        x, y = common.synthetic(a.rows)
        df = spark.createDataFrame(pd.DataFrame({"features": list(x), "label": y}),
                                   schema="features array<float>, label long").repartition(2).cache()
        df.count()
        res["data_s"] = time.perf_counter() - t

        est = Estimator.from_torch(model=common.make_model, optimizer=common.make_optimizer,
                                   loss=nn.CrossEntropyLoss(), backend=a.backend, workers_per_node=a.workers,
                                   use_tqdm=False)
        cols = {"feature_cols": ["features"], "label_cols": ["label"], "batch_size": a.batch_size}
        t = time.perf_counter()
        est.fit(df, epochs=1, max_steps=1, **cols)
        res["first_fit_s"] = time.perf_counter() - t
        res["ready_s"] = time.perf_counter() - T_PROCESS

        res["rounds"] = []
        for _ in range(a.rounds):
            rnd: dict = {}
            if a.native:
                rnd["native"] = common.native_epochs(x, y, a.batch_size, a.epochs, threads=1)
            t = time.perf_counter()
            hist = est.fit(df, epochs=a.epochs, **cols)
            wall = time.perf_counter() - t
            rnd["orca"] = [{k: e[k] for k in ("epoch_time_s", "num_samples", "train_loss")} for e in hist]
            rnd["fit_wall_s"] = wall
            rnd["fit_overhead_s"] = wall - sum(e["epoch_time_s"] for e in hist)
            res["rounds"].append(rnd)
        est.shutdown()
    finally:
        stop_orca_context()
    res["total_s"] = time.perf_counter() - T_PROCESS
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
