"""Keras callbacks in the workers (TensorBoard, checkpoints, early stopping, LR schedules,
validation_freq), and the Keras file formats."""

import glob
import json
import os

import numpy as np
import pytest
from conftest import legacy_linear_creator, linear_creator, regression

from orca.tf import Estimator

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def ray_est(orca_context):
    """One 2-worker Ray estimator for the callback tests (they pin no weights, only what the callbacks did)."""
    est = Estimator.from_keras(model_creator=linear_creator(), backend="ray", workers_per_node=2, verbose=0)
    yield est
    est.shutdown()


def _rank0_pid(est):
    import cloudpickle

    probe = cloudpickle.dumps(lambda runner: (runner.rank, os.getpid()))
    return dict(est._group.call(cloudpickle.loads(probe)))[0]


def _event_steps(path):
    """``{tag: [step, ...]}`` of one TensorBoard event file."""
    import tensorflow as tf

    out = {}
    for event in tf.compat.v1.train.summary_iterator(path):
        for value in event.summary.value:
            out.setdefault(value.tag, []).append(event.step)
    return out


@pytest.mark.parametrize("update_freq", ["epoch", "batch"])
def test_tensorboard_writes_epoch_and_batch_logs_from_rank_0_only(ray_est, tmp_path, update_freq):
    import keras

    x, y = regression(rows=64)
    start = ray_est._epoch
    logdir = tmp_path / "tb"
    tb = keras.callbacks.TensorBoard(log_dir=str(logdir), update_freq=update_freq)
    ray_est.fit((x, y), epochs=2, batch_size=16, validation_data=(x[:32], y[:32]), callbacks=[tb])
    pid = _rank0_pid(ray_est)
    files = {sub: glob.glob(str(logdir / sub / "events.out.tfevents.*")) for sub in ("train", "validation")}
    for sub, found in files.items():
        assert len(found) == 1, f"{sub}: {found}"  # one writer: the chief's
        assert found[0].rsplit(".", 3)[1] == str(pid)  # ...in rank 0's process
    train, val = _event_steps(files["train"][0]), _event_steps(files["validation"][0])
    assert train["epoch_loss"] == [start, start + 1] and train["epoch_mae"] == [start, start + 1]
    assert train["epoch_learning_rate"] == [start, start + 1]
    assert val["epoch_loss"] == [start, start + 1] and val["epoch_mae"] == [start, start + 1]
    batch_tags = sorted(t for t in train if t.startswith("batch_"))
    if update_freq == "batch":
        assert batch_tags == ["batch_loss"]
        assert train["batch_loss"] == list(range(1, 9))  # 64 rows / 16 = 4 steps, 2 epochs
    else:
        assert batch_tags == []


def test_history_has_keras_keys_and_metrics_match_keras_evaluate(ray_est):
    x, y = regression(rows=64)
    hist = ray_est.fit((x, y), epochs=2, batch_size=16, validation_data=(x, y))
    keys = hist.history
    for k in ("loss", "mae", "val_loss", "val_mae"):
        assert len(keys[k]) == 2
    stats = ray_est.evaluate((x, y), batch_size=16)
    want = ray_est.get_model().evaluate(x, y, batch_size=64, verbose=0, return_dict=True)
    assert stats["loss"] == pytest.approx(want["loss"], rel=1e-4)
    assert stats["mae"] == pytest.approx(want["mae"], rel=1e-4)
    assert hist.history["val_loss"][-1] == pytest.approx(want["loss"], rel=1e-4)


def test_validation_freq_skips_the_validation_pass_on_every_worker(ray_est, tmp_path):
    import keras

    calls = tmp_path / "calls"
    calls.mkdir()

    def train_creator(config, batch_size):
        import tensorflow as tf

        x, y = regression(rows=64)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)

    def val_creator(config, batch_size):
        import tensorflow as tf

        with open(calls / f"val-{os.getpid()}", "a") as fh:
            fh.write("built\n")
        x, y = regression(rows=32, seed=1)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)

    class Keys(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            with open(calls / f"keys-{os.getpid()}", "a") as fh:
                fh.write(json.dumps([epoch + 1, sorted(k for k in logs if k.startswith("val_"))]) + "\n")

    start = ray_est._epoch
    hist = ray_est.fit(train_creator, epochs=4, batch_size=16, steps_per_epoch=2, validation_data=val_creator,
                       validation_freq=2, callbacks=[Keys()])
    validated = [e for e in range(start + 1, start + 5) if e % 2 == 0]  # Keras: 1-based epochs divisible by 2
    assert hist.history["epoch"] == list(range(start + 1, start + 5))
    assert [s["epoch"] for s in hist if "val_loss" in s] == validated
    assert all("val_mae" in s for s in hist if s["epoch"] in validated)
    val_files = sorted(calls.glob("val-*"))
    assert len(val_files) == 2  # both workers...
    assert [f.read_text().count("built") for f in val_files] == [2, 2]  # ...built their validation set twice, not 4x
    for f in sorted(calls.glob("keys-*")):  # Keras callbacks see val_ logs only on validation epochs, on every rank
        seen = [json.loads(line) for line in f.read_text().splitlines()]
        assert seen == [[e, ["val_loss", "val_mae"] if e in validated else []] for e in range(start + 1, start + 5)]
    with pytest.raises(ValueError, match="validation_freq"):
        ray_est.fit(train_creator, epochs=1, batch_size=16, steps_per_epoch=2, validation_freq=0)


def test_keras_callbacks_checkpoint_on_chief_stop_early_and_schedule_lr(ray_est, tmp_path):
    import keras

    x, y = regression(rows=64)
    ckpt = str(tmp_path / "ckpt-{epoch:02d}.keras")
    start = ray_est._epoch

    def schedule(epoch, lr):
        return 0.05 if epoch == start else lr * 0.5

    callbacks = [keras.callbacks.ModelCheckpoint(ckpt), keras.callbacks.LearningRateScheduler(schedule),
                 keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)]
    hist = ray_est.fit((x, y), epochs=6, batch_size=16, callbacks=callbacks)
    assert len(hist) == 2  # no epoch improves by 1e9: stopped after patience
    assert len(set(ray_est.worker_weight_digests())) == 1
    names = [f"ckpt-{start + 1:02d}.keras", f"ckpt-{start + 2:02d}.keras"]
    latest = Estimator.latest_checkpoint(str(tmp_path))
    assert latest.endswith(names[-1])
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".keras")) == names
    loaded = keras.models.load_model(latest)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), ray_est.predict(x), atol=1e-5)
    assert float(np.asarray(ray_est.get_model().optimizer.learning_rate)) == pytest.approx(0.025)


@pytest.fixture(scope="module")
def spark_fitted(orca_context):
    """A Keras 3 model trained on the spark backend, and what it predicts (shared by the format tests)."""
    x, y = regression(rows=32)
    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", workers_per_node=2, verbose=0)
    est.fit((x, y), epochs=2, batch_size=8)
    return est, x, est.predict(x)


@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_save_load_round_trip_opens_with_plain_keras(spark_fitted, tmp_path, name):
    import keras

    est, x, want = spark_fitted
    path = est.save(str(tmp_path / name))
    plain = keras.models.load_model(path, compile=name.endswith(".keras"))
    np.testing.assert_allclose(plain.predict(x, verbose=0), want, atol=1e-5)
    fresh = Estimator.from_keras(model_creator=linear_creator(), backend="spark", workers_per_node=2, verbose=0)
    fresh.load(path)
    np.testing.assert_allclose(fresh.predict(x), want, atol=1e-5)


def test_save_weights_and_savedmodel_export(spark_fitted, tmp_path):
    import tensorflow as tf

    est, x, want = spark_fitted
    wpath = est.save_weights(str(tmp_path / "w.weights.h5"))
    other = Estimator.from_keras(model_creator=linear_creator(), backend="spark", verbose=0)
    other.load_weights(wpath)
    np.testing.assert_allclose(other.predict(x), want, atol=1e-5)
    served = tf.saved_model.load(est.save(str(tmp_path / "saved")))
    np.testing.assert_allclose(served.serve(x).numpy(), want, atol=1e-5)


def test_tf_keras_savedmodel_round_trip(orca_context, tmp_path):
    x, y = regression(rows=32)
    legacy = Estimator.from_keras(model_creator=legacy_linear_creator(), backend="spark", verbose=0)
    legacy.fit((x, y), epochs=1, batch_size=8)
    lpath = legacy.save(str(tmp_path / "legacy"))
    again = Estimator.from_keras(model_creator=legacy_linear_creator(), backend="spark", verbose=0)
    again.load(lpath)
    np.testing.assert_allclose(again.predict(x), legacy.predict(x), atol=1e-5)


@pytest.mark.parametrize("creator", [linear_creator, legacy_linear_creator], ids=["keras3", "tf_keras"])
def test_an_mlflow_run_holds_the_model_with_the_keras_or_tensorflow_flavour(orca_context, tmp_path, creator):
    """set_mlflow against a real sqlite tracking store: the run's ``model`` artifact is an MLflow
    Model of the Keras flavour (Keras 3) or the tensorflow one (tf_keras) that the flavour's
    ``load_model`` opens, predicting as the Estimator does, with Orca's checkpoint beside it."""
    import mlflow

    from orca.core.testing.tracking import fit_and_fetch_model

    x, y = regression(64)
    est = Estimator.from_keras(model_creator=creator(lr=0.05), backend="bigdl", workers_per_node=2, verbose=0)
    try:
        local = fit_and_fetch_model(est, lambda: est.fit((x, y), epochs=2, batch_size=16), tmp_path,
                                    params={"optimizer": "SGD", "optimizer.learning_rate": 0.05})
        flavour = mlflow.keras if creator is linear_creator else mlflow.tensorflow
        loaded = flavour.load_model(local)
        np.testing.assert_allclose(np.asarray(loaded(x)), est.predict(x), rtol=1e-5, atol=1e-5)
    finally:
        est.shutdown()
