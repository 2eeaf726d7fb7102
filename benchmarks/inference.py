"""Part 4 (torch side): batch inference on a Spark DataFrame.

Run in a fresh process by ``run.py``. One local Orca context (``local[2]``); the same MLP
(784-512-512-10, eval mode, 1 intra-op thread per worker) and the same cached DataFrame
(``features array<float>[784]``, 2 partitions) for every method; batch 256; each method is a full
pass whose output is written to Spark's ``noop`` sink (or materialised, for Ray Data). The
first call of each method (at the first scale) is a warm-up (Python workers, Ray actors); then ``--repeats`` timed
calls, methods interleaved, median reported.

- ``orca``: ``Estimator.from_torch(model=...).predict(df, feature_cols=["features"])``.
- ``predict_batch_udf``: ``pyspark.ml.functions.predict_batch_udf`` with ``input_tensor_shapes``,
  the model built once per Python worker (its documented pattern).
- ``ray-data``: ``ray.data.Dataset.map_batches`` with a callable class on an actor pool of 2
  (``concurrency=2, num_cpus=1``) over the same rows as a materialised Ray Dataset.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle
import common

cloudpickle.register_pickle_by_value(common)

BATCH = 256


def _model_state() -> dict:
    import torch

    torch.manual_seed(0)
    return common.make_model().state_dict()


def orca_predict(est: Any, df: Any) -> None:
    est.predict(df, batch_size=BATCH, feature_cols=["features"]).write.format("noop").mode("overwrite").save()


def make_udf_predict(state: dict) -> Any:
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import ArrayType, FloatType

    def make_predict_fn():
        import torch

        torch.set_num_threads(1)
        model = common.make_model()
        model.load_state_dict(state)
        model.eval()

        def predict(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model(torch.from_numpy(x)).numpy()

        return predict

    udf = predict_batch_udf(make_predict_fn, return_type=ArrayType(FloatType()), batch_size=BATCH,
                            input_tensor_shapes=[[common.IN]])

    def run(df: Any) -> None:
        df.withColumn("prediction", udf("features")).write.format("noop").mode("overwrite").save()

    return run


class _RayPredictor:
    def __init__(self, state: Any) -> None:
        import ray
        import torch

        if isinstance(state, ray.ObjectRef):  # map_batches hands constructor args over as given
            state = ray.get(state)
        torch.set_num_threads(1)
        self.torch = torch
        self.model = common.make_model()
        self.model.load_state_dict(state)
        self.model.eval()

    def __call__(self, batch: dict) -> dict:
        with self.torch.no_grad():
            out = self.model(self.torch.from_numpy(np.asarray(batch["features"], dtype=np.float32))).numpy()
        return {"features": batch["features"], "label": batch["label"], "prediction": out}


def ray_predict(ds: Any, state_ref: Any) -> int:
    out = ds.map_batches(_RayPredictor, fn_constructor_args=(state_ref,), batch_size=BATCH, concurrency=2,
                         num_cpus=1, batch_format="numpy").materialize()
    return out.count()


def main() -> None:
    from harness import scaled_child_main

    scaled_child_main(measure, default_rows=16384)


def measure(spark: Any, base_rows: int, scales: list[int], repeats: int) -> dict:
    """Every method at every scale on ``spark`` (a local Orca context's session; Ray is started
    here, apart from Orca's); the raw result."""
    import pyarrow as pa
    import ray
    from datapath import make_df, make_x
    from ray.data.extensions import ArrowTensorArray

    from orca.torch import Estimator

    res: dict = {"rows": base_rows, "batch_size": BATCH, "repeats": repeats, "scales": {}}
    ray.init(num_cpus=2, include_dashboard=False, address="local", log_to_driver=False)
    try:
        from torch import nn

        state = _model_state()
        model = common.make_model()
        model.load_state_dict(state)
        est = Estimator.from_torch(model=model, loss=nn.CrossEntropyLoss(), backend="spark", workers_per_node=2,
                                   use_tqdm=False)
        udf_run = make_udf_predict(state)
        state_ref = ray.put(state)
        for s in scales:
            rows = base_rows * s
            df = make_df(spark, rows)
            methods = {"orca": lambda df=df: orca_predict(est, df), "predict_batch_udf": lambda df=df: udf_run(df)}
            if repeats > 1 or not res["scales"]:  # the quick run: Ray Data (actors start per call) at x1 only
                x = make_x(rows)[0]  # the same rows as the DataFrame's (no round trip through the driver)
                ds = ray.data.from_arrow(pa.table({"features": ArrowTensorArray.from_numpy(x),
                                                   "label": pa.array(np.zeros(rows, np.int64))})).materialize()
                del x
                methods["ray-data"] = lambda ds=ds: ray_predict(ds, state_ref)
            times: dict[str, list[float]] = {m: [] for m in methods}
            first: dict[str, float] = {}
            if not res["scales"]:  # the first call (workers, actors start); later scales find them warm
                for m, fn in methods.items():
                    t = time.perf_counter()
                    fn()
                    first[m] = time.perf_counter() - t
            for _ in range(repeats):
                for m, fn in methods.items():
                    t = time.perf_counter()
                    fn()
                    times[m].append(time.perf_counter() - t)
            res["scales"][str(s)] = {"rows": rows, "times_s": times, "first_call_s": first,
                                     "median_s": {k: statistics.median(v) for k, v in times.items()}}
            df.unpersist()
    finally:
        ray.shutdown()
    return res


def rows_from(res: dict) -> list[dict]:
    from harness import ratio, row

    if "error" in res:
        return [row("inference", "torch predict on a DataFrame (all methods)", None, "rows/s", target=">= 1.0",
                    note=res["error"])]
    out: list[dict] = []
    for s, sc in res["scales"].items():
        med = sc["median_s"]
        v = {m: sc["rows"] / t for m, t in med.items()}
        if s == "1":
            out.append(row("inference", "Orca predict (torch) vs predict_batch_udf, rows/s", v["orca"], "rows/s",
                           ratio(v["orca"], v["predict_batch_udf"]), ">= 1.0", reference=v["predict_batch_udf"]))
            out.append(row("inference", "Orca predict (torch) vs Ray Data map_batches, rows/s", v["orca"], "rows/s",
                           ratio(v["orca"], v["ray-data"]), ">= 1.0", reference=v["ray-data"]))
            for m, t in sc["first_call_s"].items():
                out.append(row("startup", f"inference {m}: first call (workers/actors start), s", t, "s"))
        for m in (m for m in ("orca", "predict_batch_udf", "ray-data") if m in v):
            out.append(row("scale", f"inference {m}, rows/s (ratio: vs predict_batch_udf)", v[m], "rows/s",
                           ratio(v[m], v["predict_batch_udf"]), scale=int(s), rows=sc["rows"]))
    return out


if __name__ == "__main__":
    main()
