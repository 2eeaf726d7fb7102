"""orca.tf ``Estimator.fit`` against plain single-process Keras ``model.fit``, and 2-worker efficiency.

    python benchmarks/tf_fit.py [--quick]     (in the tf environment; `nox -s bench` runs it)

Rows (samples/s, steady state: the timed call is the second one, after workers and tf.functions
are warm):

- ``plain_fit``: ``model.fit`` in one process, the same data, batch size and thread count.
- ``orca_fit_1w``: ``est.fit`` with one Ray worker; ratio = orca / plain (target >= 0.97).
- ``orca_fit_2w``: two Ray workers of one thread each; ratio = 2-worker samples/s divided by
  twice one 1-thread worker's (the efficiency; target >= 0.9).
- ``orca_fit_2w bigdl``: the same on the ``bigdl`` backend (Spark barrier tasks, gradients
  all-reduced by orca.core.sync instead of the MultiWorkerMirroredStrategy).

Writes ``benchmarks/results/tf_fit.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
FEATURES, CLASSES, BATCH = 64, 10, 256


def _data(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    return x, (x[:, :CLASSES].argmax(1)).astype(np.int64)


def model_creator(config: dict[str, Any]) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _plain(x: np.ndarray, y: np.ndarray, threads: int) -> float:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = model_creator({})
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=True)
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=True)
    return len(x) / (time.perf_counter() - t0)


def _orca(x: np.ndarray, y: np.ndarray, workers: int, cores: int, backend: str = "ray") -> float:
    import cloudpickle

    from orca.core import init_orca_context, stop_orca_context
    from orca.tf import Estimator

    # the workers cannot import this script: ship model_creator by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    init_orca_context(cluster_mode="local", cores=cores, memory="2g")
    try:
        est = Estimator.from_keras(model_creator=model_creator, backend=backend, workers_per_node=workers,
                                   verbose=0)
        est.fit((x, y), epochs=1, batch_size=BATCH)
        t0 = time.perf_counter()
        est.fit((x, y), epochs=1, batch_size=BATCH)
        rate = len(x) / (time.perf_counter() - t0)
        est.shutdown()
        return rate
    finally:
        stop_orca_context()


def _child(kind: str, rows: int, workers: int, cores: int, backend: str = "ray") -> float:
    """Each measurement in a fresh interpreter: TF's thread settings are fixed at its first op."""
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import tf_fit as b; "
            f"x, y = b._data({rows}); "
            f"print('RATE', b._plain(x, y, {cores}) if {kind!r} == 'plain' else b._orca(x, y, {workers}, {cores}, {backend!r}))")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RATE "):
            return float(line.split()[1])
    raise RuntimeError(f"benchmark child failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure and return rows ``{name, value, unit, ratio, target}``."""
    rows = 4096 if quick else 32768
    plain1 = _child("plain", rows, 1, 1)
    orca1 = _child("orca", rows, 1, 1)
    orca2 = _child("orca", rows, 2, 2)
    bigdl2 = _child("orca", rows, 2, 2, "bigdl")
    return [
        {"name": "plain_fit (1 thread)", "value": round(plain1, 1), "unit": "samples/s", "ratio": 1.0,
         "target": None},
        {"name": "orca_fit_1w (1 thread) / plain", "value": round(orca1, 1), "unit": "samples/s",
         "ratio": round(orca1 / plain1, 3), "target": 0.97},
        {"name": "orca_fit_2w (2x1 thread) efficiency", "value": round(orca2, 1), "unit": "samples/s",
         "ratio": round(orca2 / (2 * orca1), 3), "target": 0.9},
        {"name": "orca_fit_2w bigdl backend (2x1 thread, orca.core.sync) efficiency", "value": round(bigdl2, 1),
         "unit": "samples/s", "ratio": round(bigdl2 / (2 * orca1), 3), "target": 0.9},
    ]


def main() -> None:
    quick = "--quick" in sys.argv
    result = run(quick)
    print(f"{'name':40s} {'value':>12s} {'unit':10s} {'ratio':>7s} {'target':>7s}")
    for r in result:
        print(f"{r['name']:40s} {r['value']:12.1f} {r['unit']:10s} {r['ratio']:7.3f} {r['target'] or '':>7}")
    out = HERE / "results" / "tf_fit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"quick": quick, "rows": result}, indent=2))


if __name__ == "__main__":
    main()
