"""Part 2, the peer side: Ray Train's ``TensorflowTrainer`` on 2 workers x 1 thread, against Orca's
tf Estimator on 2 workers (measured by ``tf_fit.py``'s own ``_child``, in this run) and plain
single-process ``model.fit`` (1 thread), with ``tf_fit.py``'s model, data and batch size (an own
MLP 784-512-512-10 while tf_fit.py is not there) and plain SGD. Orca's samples/s and plain
``model.fit``'s are tf_fit's measures (the median epoch of one fit after the first); the trainer's
is rank 0's epoch loop likewise, without start-up.

Ray Train sets ``TF_CONFIG``; each worker builds the model under ``MultiWorkerMirroredStrategy``.
Keras 3's ``model.fit`` fails under that strategy (shared DEPENDENCIES.md: ``PerReplica ...
unsupported type``), so the workers run the custom ``strategy.run`` loop TensorFlow documents for
multi-worker training, each on its half of the data held in memory.

API shared with tf_fit.py and openvino_predict.py: ``run(quick) -> list[dict]`` rows (name, value,
unit, ratio, target); ``run_part.py`` runs it in the tf environment:
``nox -s bench_tf -- --quick``.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np

IN, HIDDEN, CLASSES = 784, 512, 10
BATCH = 128


def _tf_fit() -> Any:
    """benchmarks/tf_fit.py (Orca's side, issue #5), whose model, data and batch size the peer
    then uses too, so that the rows compare like with like; None while it is not there."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import tf_fit
    except ImportError:
        return None
    return tf_fit


def synthetic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    tf_fit = _tf_fit()
    if tf_fit is not None:
        return tf_fit._data(n)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, IN), dtype=np.float32)
    w = rng.standard_normal((IN, CLASSES), dtype=np.float32)
    return x, (x @ w).argmax(1).astype(np.int64)


def make_model() -> Any:
    import keras

    tf_fit = _tf_fit()
    if tf_fit is not None:
        return tf_fit.model_creator({})
    return keras.Sequential([keras.Input((IN,)), keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(CLASSES)])


def make_optimizer() -> Any:
    """tf_fit.py's optimizer (plain SGD, lr 0.01): every side of the comparison steps the same way."""
    import keras

    return keras.optimizers.SGD(0.01)


def batch_size() -> int:
    tf_fit = _tf_fit()
    return tf_fit.BATCH if tf_fit is not None else BATCH


def _one_thread() -> None:
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised in this process: keep what it has
        pass


class _EpochTimes:
    def __init__(self) -> None:
        import keras

        class CB(keras.callbacks.Callback):
            def __init__(cb) -> None:
                super().__init__()
                cb.times: list[float] = []

            def on_epoch_begin(cb, epoch: int, logs: Any = None) -> None:
                cb.t = time.perf_counter()

            def on_epoch_end(cb, epoch: int, logs: Any = None) -> None:
                cb.times.append(time.perf_counter() - cb.t)

        self.cb = CB()


def plain_fit(rows: int, epochs: int) -> list[float]:
    """Per-epoch seconds of single-process ``model.fit`` (1 thread)."""
    import keras

    _one_thread()
    x, y = synthetic(rows)
    model = make_model()
    model.compile(optimizer=make_optimizer(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = _EpochTimes()
    model.fit(x, y, batch_size=batch_size(), epochs=epochs, shuffle=True, verbose=0, callbacks=[times.cb])
    return times.cb.times


def _trainer_loop(config: dict) -> None:
    import ray.train
    import tensorflow as tf

    _one_thread()
    import keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    x, y = synthetic(config["rows"])
    sl = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    global_bs = batch_size()
    local_bs = global_bs // world
    ds = tf.data.Dataset.from_tensor_slices((x[sl], y[sl])).shuffle(4096, seed=rank).batch(local_bs)
    with strategy.scope():
        model = make_model()
        opt = make_optimizer()
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def step(xb: Any, yb: Any) -> Any:
        def replica(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=global_bs)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(xb, yb)), axis=None)

    times, first = [], None
    for _ in range(config["epochs"]):
        t0 = time.perf_counter()
        for xb, yb in ds:
            float(step(xb, yb))
            if first is None:
                first = time.time()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(config["result"], "w") as fh:
            json.dump({"epoch_times": times, "first_step_wall": first}, fh)


def trainer_fit(rows: int, epochs: int, workers: int = 2) -> dict:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    t = time.perf_counter()
    ray.init(num_cpus=workers + 2, include_dashboard=False, address="local", log_to_driver=False)
    cluster_s = time.perf_counter() - t
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = os.path.join(tmp, "result.json")
            trainer = TensorflowTrainer(
                _trainer_loop, train_loop_config={"rows": rows, "epochs": epochs, "result": result},
                scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
                run_config=RunConfig(storage_path=os.path.join(tmp, "ray_results"), name="bench_tf"))
            t_wall, t = time.time(), time.perf_counter()
            trainer.fit()
            wall = time.perf_counter() - t
            with open(result) as fh:
                out = json.load(fh)
    finally:
        ray.shutdown()
    return {"cluster_s": cluster_s, "fit_wall_s": wall, "epoch_times": out["epoch_times"],
            "first_step_s": out["first_step_wall"] - t_wall}


def run(quick: bool) -> list[dict]:
    """Rows: tf_fit.py's (Orca tf against plain model.fit), Orca tf 2x1 against TensorflowTrainer 2x1
    (when tf_fit.py is there), TensorflowTrainer 2x1 against plain model.fit (1 thread), and the
    trainer's start-up."""
    rows, epochs = (4096, 3) if quick else (32768, 5)
    tf_fit = _tf_fit()
    orca2, orca2_error, rates = None, None, None
    out: list[dict] = []
    if tf_fit is not None:  # tf_fit.py's measurements, in this run, next to the peer's
        try:
            rates = tf_fit.measure(quick)
            orca2 = rates["orca2"]
            out += tf_fit.rows_from(rates)
        except Exception as exc:  # noqa: BLE001 - shown as n/a with the reason
            orca2_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            out.append({"name": "benchmarks/tf_fit.py", "value": None, "unit": "", "ratio": None, "target": "-",
                        "note": orca2_error})
    if rates is not None:  # tf_fit.py measured plain model.fit (1 thread) on this model and data already
        plain_sps = rates["plain1"]
    else:
        plain = plain_fit(rows, epochs)
        plain_sps = statistics.median(rows / t for t in plain[1:])
    out.append({"name": "plain model.fit, 1 process x 1 thread (reference), samples/s", "value": plain_sps,
                "unit": "samples/s", "ratio": None, "target": None})
    try:
        tr = trainer_fit(rows, epochs)
    except Exception as exc:  # noqa: BLE001 - the peer's failure is a finding for the table, not a crash
        note = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if tf_fit is not None:
            out.append({"name": "Orca tf (ray) 2x1 vs Ray Train TensorflowTrainer 2x1, samples/s", "value": orca2,
                        "unit": "samples/s", "ratio": None, "target": ">= 1.0", "note": f"peer failed: {note}"})
        return out + [{"name": "Ray Train TensorflowTrainer 2x1 vs plain model.fit (1 thread), samples/s",
                       "value": None, "unit": "samples/s", "ratio": None, "target": None, "note": note}]
    sps = statistics.median(rows / t for t in tr["epoch_times"][1:])
    if tf_fit is not None:
        out.append({"name": "Orca tf (ray) 2x1 vs Ray Train TensorflowTrainer 2x1, samples/s", "value": orca2,
                    "unit": "samples/s", "ratio": orca2 / sps if orca2 else None, "target": ">= 1.0",
                    "reference": sps, "note": None if orca2 else orca2_error})
    out.append({"name": "Ray Train TensorflowTrainer 2x1 (custom strategy.run loop) vs plain model.fit (1 thread), "
                        "samples/s", "value": sps, "unit": "samples/s", "ratio": sps / plain_sps, "target": None,
                "reference": plain_sps})
    out.append({"part": "startup", "name": "tf: Ray Train TensorflowTrainer 2x1 first call to first step, s",
                "value": tr["first_step_s"], "unit": "s", "ratio": None, "target": None})
    return out
