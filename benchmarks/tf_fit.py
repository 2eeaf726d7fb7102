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


EPOCHS = 4  # per measured fit; the first epoch of each is left out (tracing, warm-up)


def _steady(rows: int, epoch_times: list[float]) -> float:
    """Samples/s of the median epoch after the first."""
    import statistics

    return rows / statistics.median(epoch_times[1:])


def _plain(x: np.ndarray, y: np.ndarray, threads: int) -> float:
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = model_creator({})
    times: list[float] = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            times.append(time.perf_counter() - self.t0)

    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=True, callbacks=[EpochTimer()])
    return _steady(len(x), times)


def _orca(x: np.ndarray, y: np.ndarray, cores: int, configs: list[tuple[str, int]]) -> list[float]:
    """Samples/s of Orca for each ``(backend, workers)`` in ``configs``, in one context of ``cores``:
    steady-state epochs of one fit, as History's ``epoch_time_s`` reports them."""
    import cloudpickle

    from orca.core import init_orca_context, stop_orca_context
    from orca.tf import Estimator

    # the workers cannot import this script: ship model_creator by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # the ray backend on numpy data needs no Spark: a Ray-only context, as such a user would start
    runtime = "ray" if all(b == "ray" for b, _ in configs) else "spark"
    init_orca_context(cluster_mode="local", cores=cores, memory="2g", runtime=runtime)
    rates = []
    try:
        for backend, workers in configs:
            est = Estimator.from_keras(model_creator=model_creator, backend=backend, workers_per_node=workers,
                                       verbose=0)
            hist = est.fit((x, y), epochs=EPOCHS, batch_size=BATCH)
            rates.append(_steady(len(x), hist.history["epoch_time_s"]))
            est.shutdown()
        return rates
    finally:
        stop_orca_context()


def _child(code: str, rows: int) -> list[float]:
    """Run ``code`` (which prints ``RATE`` lines) in a fresh interpreter with ``x, y`` of ``rows``:
    TF's thread settings are fixed at its first op."""
    import subprocess

    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import tf_fit as b; x, y = b._data({rows}); " + code
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    rates = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("RATE ")]
    if not rates:
        raise RuntimeError(f"benchmark child failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return rates


def measure(quick: bool) -> dict[str, float]:
    """Samples/s of plain ``model.fit`` (1 thread) and of Orca 1x1, 2x1 (ray) and 2x1 (bigdl).

    Two processes: plain ``model.fit`` and Orca 1x1 share one with 1 core (the Orca worker is a
    Ray actor of its own), the two 2x1 configurations one with 2 cores.
    """
    rows = 4096 if quick else 32768
    plain1, orca1 = _child("print('RATE', b._plain(x, y, 1)); print('RATE', b._orca(x, y, 1, [('ray', 1)])[0])",
                           rows)
    orca2, bigdl2 = _child("[print('RATE', r) for r in b._orca(x, y, 2, [('ray', 2), ('bigdl', 2)])]", rows)
    return {"plain1": plain1, "orca1": orca1, "orca2": orca2, "bigdl2": bigdl2}


def rows_from(rates: dict[str, float]) -> list[dict[str, Any]]:
    """The comparison rows of :func:`measure`'s rates."""
    plain1, orca1, orca2, bigdl2 = (rates[k] for k in ("plain1", "orca1", "orca2", "bigdl2"))
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


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure and return rows ``{name, value, unit, ratio, target}``."""
    return rows_from(measure(quick))


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
