"""Keras callbacks in the workers, and the Keras file formats."""

import os

import numpy as np
import pytest
from conftest import legacy_linear_creator, linear_creator, regression

from orca.tf import Estimator

pytestmark = pytest.mark.timeout(300)


def test_keras_callbacks_checkpoint_on_chief_stop_early_and_schedule_lr(orca_context, tmp_path):
    import keras

    x, y = regression(rows=64)
    ckpt = str(tmp_path / "ckpt-{epoch:02d}.keras")
    lrs = []

    def schedule(epoch, lr):
        lrs.append(epoch)
        return 0.05 if epoch == 0 else lr * 0.5

    callbacks = [keras.callbacks.ModelCheckpoint(ckpt), keras.callbacks.LearningRateScheduler(schedule),
                 keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)]
    est = Estimator.from_keras(model_creator=linear_creator(), backend="ray", workers_per_node=2, verbose=0)
    try:
        hist = est.fit((x, y), epochs=6, batch_size=16, callbacks=callbacks)
        assert len(hist) == 2  # no epoch improves by 1e9: stopped after patience
        assert len(set(est.worker_weight_digests())) == 1
        latest = Estimator.latest_checkpoint(str(tmp_path))
        assert latest.endswith("ckpt-02.keras")
        assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".keras")) == ["ckpt-01.keras", "ckpt-02.keras"]
        loaded = keras.models.load_model(latest)
        np.testing.assert_allclose(loaded.predict(x, verbose=0), est.predict(x), atol=1e-5)
        assert float(np.asarray(est.get_model().optimizer.learning_rate)) == pytest.approx(0.025)
    finally:
        est.shutdown()


@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_save_load_round_trip_opens_with_plain_keras(orca_context, tmp_path, name):
    import keras

    x, y = regression(rows=32)
    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", workers_per_node=2, verbose=0)
    est.fit((x, y), epochs=2, batch_size=8)
    path = est.save(str(tmp_path / name))
    want = est.predict(x)
    plain = keras.models.load_model(path, compile=name.endswith(".keras"))
    np.testing.assert_allclose(plain.predict(x, verbose=0), want, atol=1e-5)
    fresh = Estimator.from_keras(model_creator=linear_creator(), backend="spark", workers_per_node=2, verbose=0)
    fresh.load(path)
    np.testing.assert_allclose(fresh.predict(x), want, atol=1e-5)
    wpath = est.save_weights(str(tmp_path / "w.weights.h5"))
    other = Estimator.from_keras(model_creator=linear_creator(), backend="spark", verbose=0)
    other.load_weights(wpath)
    np.testing.assert_allclose(other.predict(x), want, atol=1e-5)


def test_savedmodel_export_and_tf_keras_round_trip(orca_context, tmp_path):
    pytest.importorskip("tf_keras")
    import tensorflow as tf

    x, y = regression(rows=32)
    est = Estimator.from_keras(model_creator=linear_creator(), backend="spark", verbose=0)
    est.fit((x, y), epochs=1, batch_size=8)
    path = est.save(str(tmp_path / "saved"))
    served = tf.saved_model.load(path)
    np.testing.assert_allclose(served.serve(x).numpy(), est.predict(x), atol=1e-5)
    legacy = Estimator.from_keras(model_creator=legacy_linear_creator(), backend="spark", verbose=0)
    legacy.fit((x, y), epochs=1, batch_size=8)
    lpath = legacy.save(str(tmp_path / "legacy"))
    again = Estimator.from_keras(model_creator=legacy_linear_creator(), backend="spark", verbose=0)
    again.load(lpath)
    np.testing.assert_allclose(again.predict(x), legacy.predict(x), atol=1e-5)
