"""OpenVINO batch inference: Orca's ``predict`` on a Spark DataFrame against its peers.

Three ways to run the same model over the same rows, each on all of this machine's ``cores``:

- ``orca``: ``orca.openvino.Estimator.predict(df, feature_cols=["x"])`` (Spark executors,
  model compiled once per Python worker and kept across calls, AsyncInferQueue);
- ``predict_batch_udf``: ``pyspark.ml.functions.predict_batch_udf`` around a compiled model
  (Spark's own batch-inference path, the same Arrow batches);
- ``single process``: one process driving ``AsyncInferQueue`` over numpy arrays already in
  memory (no Spark at all): the ceiling for the runtime on these cores.

Two models, because the answer depends on whether moving the rows or running the model costs
more:

- ``mlp`` (data-bound): 256 -> 1024 -> 1024 -> 16, 1 KB a row, ~2.6 MFLOP a row. Moving an
  ``array<float>`` row from Spark to Python costs about as much as running it.
- ``cnn`` (compute-bound, the usual OpenVINO workload): a small conv net on 3x32x32 images
  (12 KB a row, ~0.2 GFLOP a row).

Both Spark runs write to the ``noop`` sink so every row is computed and nothing collected.
Rows per model: ``orca vs predict_batch_udf`` (target >= 1.0) and ``orca vs single process,
per core`` (target >= 0.9).

    python benchmarks/openvino_predict.py [--quick]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "openvino_predict.json"
FEATURES, HIDDEN, OUT = 256, 1024, 16
BATCH = 256
PRECISION = {"INFERENCE_PRECISION_HINT": "f32"}  # the same arithmetic for every contender


def build_model() -> Any:
    """The data-bound MLP as an ``ov.Model`` (fixed seed)."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([-1, FEATURES], np.float32, name="x")
    h = x
    for n_in, n_out in ((FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, OUT)):
        w = ops.constant((rng.normal(size=(n_in, n_out)) / np.sqrt(n_in)).astype(np.float32))
        h = ops.add(ops.matmul(h, w, False, False), ops.constant(np.zeros(n_out, np.float32)))
        if n_out != OUT:
            h = ops.relu(h)
    return ov.Model([h], [x], "mlp")


IMAGE = (3, 32, 32)


def build_cnn() -> Any:
    """The compute-bound conv net on 3x32x32 images as an ``ov.Model`` (fixed seed)."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([-1, *IMAGE], np.float32, name="x")
    h = x
    for c_in, c_out, stride in ((3, 64, 1), (64, 128, 1), (128, 128, 2), (128, 128, 2)):
        w = ops.constant((rng.normal(size=(c_out, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32))
        h = ops.relu(ops.convolution(h, w, [stride, stride], [1, 1], [1, 1], [1, 1]))
    h = ops.reduce_mean(h, ops.constant(np.array([2, 3], np.int64)), False)
    w = ops.constant((rng.normal(size=(128, OUT)) / np.sqrt(128)).astype(np.float32))
    return ov.Model([ops.matmul(h, w, False, False)], [x], "cnn")


#: model name -> (builder, row shape, rows in a quick run, rows in a full run)
MODELS = {"mlp": (build_model, (FEATURES,), 10_000, 200_000), "cnn": (build_cnn, IMAGE, 600, 4_000)}


def _timed(fn: Any, repeats: int) -> float:
    """Best wall time of ``repeats`` runs after one warm-up run."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def single_process(x: np.ndarray, xml: str, cores: int, repeats: int) -> float:
    """Rows/s of one process driving an AsyncInferQueue over in-memory numpy, on ``cores`` CPUs."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(xml, "CPU", {**PRECISION, "NUM_STREAMS": str(cores),
                                                "INFERENCE_NUM_THREADS": str(cores)})
    queue = ov.AsyncInferQueue(compiled, cores)
    outs: dict[int, np.ndarray] = {}
    queue.set_callback(lambda req, i: outs.__setitem__(i, req.get_output_tensor(0).data.copy()))

    def run() -> None:
        for i, start in enumerate(range(0, len(x), BATCH)):
            queue.start_async({0: x[start:start + BATCH]}, userdata=i, share_inputs=False)
        queue.wait_all()

    return len(x) / _timed(run, repeats)


def measure(name: str, spark: Any, cores: int, quick: bool) -> list[dict[str, Any]]:
    """Rows of one model: orca against predict_batch_udf and against the single process."""
    import openvino as ov
    import pandas as pd
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import types as T

    from orca.openvino import Estimator

    builder, shape, quick_rows, full_rows = MODELS[name]
    rows = quick_rows if quick else full_rows
    repeats = 1 if quick else 3
    x = np.random.default_rng(1).normal(size=(rows, *shape)).astype(np.float32)
    tmp = tempfile.mkdtemp(prefix="orca-ov-bench-")
    xml = str(Path(tmp) / f"{name}.xml")
    ov.save_model(builder(), xml, compress_to_fp16=False)
    flat = x.reshape(rows, -1)  # images travel as flat array<float> rows; both sides reshape them
    # from pandas, not harness.cached_df's Arrow table: one run of five crashed (SIGSEGV) in this
    # process while Spark built a DataFrame from Arrow next to OpenVINO; this path never has
    df = spark.createDataFrame(pd.DataFrame({"x": list(flat)})).repartition(cores).cache()
    df.count()
    est = Estimator.from_openvino(model_path=xml, config=PRECISION)
    size = int(np.prod(shape))

    def orca_run() -> None:
        est.predict(df, feature_cols=["x"], batch_size=BATCH).write.format("noop").mode("overwrite").save()

    def make_predict_fn() -> Any:
        import openvino as ov

        # pinning off, as Orca does: with it, both Spark workers' threads pin to the first core
        compiled = ov.Core().compile_model(xml, "CPU", {**PRECISION, "INFERENCE_NUM_THREADS": "1",
                                                        "ENABLE_CPU_PINNING": "NO"})

        def predict(inputs: np.ndarray) -> np.ndarray:
            return compiled(inputs.reshape(-1, *shape), share_inputs=False)[0]

        return predict

    udf = predict_batch_udf(make_predict_fn, return_type=T.ArrayType(T.FloatType()), batch_size=BATCH,
                            input_tensor_shapes=[[size]])

    def udf_run() -> None:
        df.withColumn("prediction", udf("x")).write.format("noop").mode("overwrite").save()

    orca_rps = rows / _timed(orca_run, repeats)
    udf_rps = rows / _timed(udf_run, repeats)
    df.unpersist()
    single_rps = single_process(x, xml, cores, repeats)
    kind = "data-bound" if name == "mlp" else "compute-bound"
    note = f"{rows} rows, {kind} {name} {'x'.join(map(str, shape))} f32, batch {BATCH}, {cores} cores, local Spark"
    return [
        {"name": f"openvino predict ({name}): orca DataFrame", "value": round(orca_rps, 1), "unit": "rows/s",
         "ratio": None, "target": None, "part": "openvino", "note": note},
        {"name": f"openvino predict ({name}): orca vs predict_batch_udf", "value": round(orca_rps, 1),
         "unit": "rows/s", "ratio": round(orca_rps / udf_rps, 3), "target": ">= 1.0", "part": "openvino",
         "reference": round(udf_rps, 1)},
        {"name": f"openvino predict ({name}): orca vs single-process AsyncInferQueue, per core",
         "value": round(orca_rps / cores, 1), "unit": "rows/s/core",
         "ratio": round(orca_rps / single_rps, 3), "target": ">= 0.9", "part": "openvino",
         "reference": round(single_rps / cores, 1)},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure and return the comparison rows (name, value, unit, ratio, target, ...) of both models."""
    from orca.core import init_orca_context, stop_orca_context

    cores = max(1, min(int(os.environ.get("ORCA_BENCH_CORES", os.cpu_count() or 1)), os.cpu_count() or 1))
    ctx = init_orca_context(cluster_mode="local", cores=cores, memory="4g",
                            conf={"spark.ui.showConsoleProgress": "false"})
    try:
        spark = ctx.spark_session()
        return [r for name in MODELS for r in measure(name, spark, cores, quick)]
    finally:
        stop_orca_context()


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    results = run(quick)
    width = max(len(r["name"]) for r in results)
    print(f"{'benchmark':<{width}}  {'value':>12}  {'unit':<12} {'reference':>12}  {'ratio':>7}  target")
    for r in results:
        ref = r.get("reference")
        print(f"{r['name']:<{width}}  {r['value']:>12}  {r['unit']:<12} {ref if ref is not None else '':>12}  "
              f"{r['ratio'] if r['ratio'] is not None else '':>7}  {r['target'] or ''}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
