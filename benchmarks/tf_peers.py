"""Part 2, the peer side: Ray Train's ``TensorflowTrainer`` on 2 workers x 1 thread, against plain
single-process ``model.fit`` (1 thread), the same Keras MLP (784-512-512-10, SGD lr 0.01 momentum
0.9), synthetic data and global batch 128 as ``tf_fit.py`` uses for Orca's tf Estimator.

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


def synthetic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, IN), dtype=np.float32)
    w = rng.standard_normal((IN, CLASSES), dtype=np.float32)
    return x, (x @ w).argmax(1).astype(np.int64)


def make_model() -> Any:
    import keras

    return keras.Sequential([keras.Input((IN,)), keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(CLASSES)])


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
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = _EpochTimes()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=True, verbose=0, callbacks=[times.cb])
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
    local_bs = BATCH // world
    ds = tf.data.Dataset.from_tensor_slices((x[sl], y[sl])).shuffle(4096, seed=rank).batch(local_bs)
    with strategy.scope():
        model = make_model()
        opt = keras.optimizers.SGD(0.01, momentum=0.9)
        model.build((None, IN))
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def step(xb: Any, yb: Any) -> Any:
        def replica(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)), global_batch_size=BATCH)
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
    """Rows: TensorflowTrainer 2x1 samples/s (ratio against plain model.fit 1 thread) and its start-up."""
    rows, epochs = (2048, 3) if quick else (8192, 5)
    plain = plain_fit(rows, epochs)
    plain_sps = statistics.median(rows / t for t in plain[1:])
    out = [{"name": "plain model.fit, 1 process x 1 thread (reference), samples/s", "value": plain_sps,
            "unit": "samples/s", "ratio": None, "target": None}]
    try:
        tr = trainer_fit(rows, epochs)
    except Exception as exc:  # noqa: BLE001 - the peer's failure is a finding for the table, not a crash
        note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        return out + [{"name": "Ray Train TensorflowTrainer 2x1 vs plain model.fit (1 thread), samples/s",
                       "value": None, "unit": "samples/s", "ratio": None, "target": None, "note": note}]
    sps = statistics.median(rows / t for t in tr["epoch_times"][1:])
    out.append({"name": "Ray Train TensorflowTrainer 2x1 (custom strategy.run loop) vs plain model.fit (1 thread), "
                        "samples/s", "value": sps, "unit": "samples/s", "ratio": sps / plain_sps, "target": None,
                "reference": plain_sps})
    out.append({"part": "startup", "name": "tf: Ray Train TensorflowTrainer 2x1 first call to first step, s",
                "value": tr["first_step_s"], "unit": "s", "ratio": None, "target": None})
    return out
