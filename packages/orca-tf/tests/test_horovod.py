"""The ``horovod`` backend of ``Estimator.from_keras`` (issue #17): Ray actors whose flat gradient
is all-reduced by Horovod's gloo controller, started from Orca's rendezvous.

Horovod 0.28.1 builds only against TensorFlow <= 2.15, so these tests run in an environment of
their own (the ``horovod`` nox session: ``tensorflow-cpu==2.15.1``, Keras 2, and
``python -m orca.core.horovod_install torch tensorflow``). Everywhere else only the first test runs:
asking for the backend fails at once with an ImportError naming those commands.
"""

import importlib.util
import time

import cloudpickle
import numpy as np
import pytest
import test_conformance
import test_training
from conftest import linear_creator, regression
from test_training import reference_model_creator, sgd_step_by_hand, train_data_creator, val_data_creator

from orca.core.data import XShards
from orca.core.engine.errors import WorkerLostError
from orca.core.testing.failures import KillOnce
from orca.core.testing.listeners import listeners_of_a_fit, with_straggler
from orca.core.testing.matrix import full_matrix
from orca.tf import Estimator

pytestmark = [pytest.mark.timeout(300)]

# their creators run in the workers: by value, also when only this module is collected (conftest
# registers the modules of the collected tests)
for _module in (test_conformance, test_training):
    cloudpickle.register_pickle_by_value(_module)


def _has_horovod_tensorflow() -> bool:
    try:
        return importlib.util.find_spec("horovod.tensorflow") is not None
    except (ImportError, ValueError):
        return False


HAS_HOROVOD = _has_horovod_tensorflow()
needs_horovod = pytest.mark.skipif(not HAS_HOROVOD, reason="Horovod for TensorFlow is not installed (the "
                                                            "horovod nox session has it)")


@pytest.mark.skipif(HAS_HOROVOD, reason="Horovod for TensorFlow is installed: the backend is available")
def test_without_horovod_the_backend_is_refused_naming_the_install_commands():
    with pytest.raises(ImportError) as info:
        Estimator.from_keras(model_creator=linear_creator(), backend="horovod")
    msg = str(info.value)
    assert "horovod.tensorflow" in msg, msg
    assert "python -m orca.core.horovod_install tensorflow" in msg, msg
    assert "tensorflow-cpu==2.15.1" in msg and "TensorFlow <= 2.15" in msg, msg


@needs_horovod
class TestHorovodConformance(test_conformance.TestKerasConformance):
    """orca-core's conformance suite (and the bad-input matrix) on the horovod backend: fit learns the
    known function, identical weights on every worker, evaluate and predict equal the single-process
    model, save/load, every partition layout (uneven and empty shards) trains the same model, a killed
    or stalled worker, non-finite losses and skipped steps."""

    #: the launcher-level tests (worker-side bad input, the partition matrix, failures) run on the
    #: horovod launcher in orca-torch's CI (TestTorchConformance[horovod]); here in the full matrix
    #: (ORCA_FULL_MATRIX=1): CI time, issue #35. This module's own tests train Keras on Horovod
    #: (exact SGD, skewed and empty shards, a killed worker, the listeners).
    launcher_backends = ("horovod",) if full_matrix() else ()
    partition_backends = launcher_backends
    spill_backends = ()  # the share on disk is the launcher's (ray, tested with torch and mxnet), not the runner's
    liveness_backends = ()  # a killed worker mid-fit: test_a_worker_killed_mid_fit_fails_the_fit_at_once below
    tensorboard_backends = ()  # driver-side, shared engine code: run on the other backends

    @pytest.fixture(scope="class", params=["horovod"])
    @classmethod
    def backend(cls, request):
        return request.param


def horovod_place(runner):
    """In a worker: its runner's class and Horovod's rank and size there."""
    import horovod.tensorflow as hvd

    return type(runner).__name__, hvd.rank(), hvd.size()


@needs_horovod
def test_one_global_batch_sgd_step_equals_the_single_process_step(orca_context):
    """40 rows, one full-batch step on 2 workers: the weights are the hand-computed SGD step of one
    process, bit-identical on both workers (Keras 2's tf.keras model: what TF 2.15 has)."""
    creator = linear_creator(lr=0.1)
    x, y = regression(rows=40)
    w0 = creator({}).get_weights()
    est = Estimator.from_keras(model_creator=creator, backend="horovod", workers_per_node=2, verbose=0)
    try:
        hist = est.fit((x, y), epochs=1, batch_size=40, shuffle=False)
        digests = est.worker_weight_digests()
        placed = est._group.call(horovod_place)
        w1, b1 = est.get_model().get_weights()
    finally:
        est.shutdown()
    assert placed == [("HorovodKerasRunner", 0, 2), ("HorovodKerasRunner", 1, 2)]  # Horovod did the all-reduce
    assert hist[-1]["num_samples"] == 40 and hist[-1]["batch_count"] == 1
    assert len(digests) == 2 and len(set(digests)) == 1
    want_w, want_b = sgd_step_by_hand(w0, x, y, 0.1)
    np.testing.assert_allclose(w1[:, 0], want_w, atol=1e-5)
    np.testing.assert_allclose(b1[0], want_b, atol=1e-5)


@needs_horovod
def test_skewed_and_empty_shards_train_as_one_process(orca_context):
    """One shard of 30 rows for two workers: ray cuts 15 + 15 rows (3 + 3 a step, 5 steps); then
    9 rows with a global batch of 2 (5 + 4 rows, 5 steps: rank 1's last step is empty and still
    joins Horovod's all-reduce with zeros). Both fits equal the single-process SGD on the same
    global batches to 1e-5."""
    import keras
    import tensorflow as tf

    def by_hand(x, y, steps, epochs, start=None):
        plain = linear_creator(lr=0.1)({})
        if start is not None:
            plain.set_weights(start)
        for _ in range(epochs):
            for sl in steps:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(keras.losses.mean_squared_error(y[sl][:, None], plain(x[sl])))
                grads = tape.gradient(loss, plain.trainable_variables)
                plain.optimizer.apply_gradients(zip(grads, plain.trainable_variables, strict=True))
        return plain.get_weights()

    x, y = regression(rows=30)
    shards = XShards.partition({"x": x, "y": y}, num_shards=1, backend="spark")
    x9, y9 = regression(rows=9, seed=1)
    est = Estimator.from_keras(model_creator=linear_creator(lr=0.1), backend="horovod", workers_per_node=2,
                               verbose=0)
    try:
        hist = est.fit(shards, epochs=2, batch_size=7, shuffle=False)
        assert hist[-1]["num_samples"] == 30 and hist[-1]["batch_count"] == 5
        assert len(set(est.worker_weight_digests())) == 1
        got30 = est.get_model().get_weights()
        hist9 = est.fit((x9, y9), epochs=1, batch_size=2, shuffle=False)
        assert hist9[-1]["num_samples"] == 9 and hist9[-1]["batch_count"] == 5
        assert len(set(est.worker_weight_digests())) == 1
        got9 = est.get_model().get_weights()
    finally:
        est.shutdown()
    steps30 = [np.r_[3 * k:3 * k + 3, 15 + 3 * k:18 + 3 * k] for k in range(5)]
    for a, b in zip(got30, by_hand(x, y, steps30, 2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    steps9 = [np.r_[k, 5 + k] for k in range(4)] + [np.r_[4]]  # rank 0 holds rows 0-4, rank 1 rows 5-8
    for a, b in zip(got9, by_hand(x9, y9, steps9, 1, start=got30), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@needs_horovod
@pytest.mark.timeout(600)
def test_reference_tf2_example_on_horovod(orca_context):
    """The guide's TF2 sample (a LeNet-style model, a data creator with steps_per_epoch, validation
    data) with backend="horovod": held-out accuracy above 0.85 from evaluate and from predict (the
    same 512 digits), training accuracy rising, predictions equal to the trained model's own."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    test_x = (digits.images[1024:1536] / 16.0).astype("float32")[..., None]
    test_y = digits.target[1024:1536]
    est = Estimator.from_keras(model_creator=reference_model_creator, config={"lr": 1e-2}, workers_per_node=2,
                               backend="horovod", verbose=0)
    try:
        stats = est.fit(data=train_data_creator, epochs=3, batch_size=32, steps_per_epoch=1024 // 32,
                        validation_data=val_data_creator)
        probs = np.asarray(est.predict(test_x, batch_size=64))
        assert len(set(est.worker_weight_digests())) == 1
        model = est.get_model()
    finally:
        est.shutdown()
    assert stats.history["accuracy"][-1] > stats.history["accuracy"][0]
    np.testing.assert_allclose(probs, model.predict(test_x, verbose=0), atol=1e-5)
    held_out = float((probs.argmax(1) == test_y).mean())
    assert held_out > 0.85
    assert stats.history["val_accuracy"][-1] == pytest.approx(held_out, abs=1e-6)


@needs_horovod
@pytest.mark.timeout(300)
def test_a_worker_killed_mid_fit_fails_the_fit_at_once(orca_context, tmp_path):
    """Rank 1 SIGKILLs itself after step 1 of epoch 2 while rank 0 waits in Horovod's all-reduce:
    the fit fails with a WorkerLostError naming rank 1 well within the silence timeout (no hang in
    gloo), the Estimator keeps the model of its last completed fit, and the next fit runs on new
    workers."""
    settings = orca_context.settings
    before_timeout = settings.worker_timeout_s
    settings.worker_timeout_s = 30.0
    x, y = regression(rows=64)
    est = Estimator.from_keras(model_creator=linear_creator(lr=0.05), backend="horovod", workers_per_node=2,
                               verbose=0)
    try:
        est.fit((x, y), epochs=1, batch_size=8)
        before = np.asarray(est.predict(x[:16], batch_size=8)).reshape(-1)
        t0 = time.monotonic()
        with pytest.raises(WorkerLostError) as info:
            est.fit((x, y), epochs=3, batch_size=8, callbacks=[KillOnce(str(tmp_path / "killed"))],
                    max_failures=0)
        took = time.monotonic() - t0
        assert (tmp_path / "killed").exists()  # the kill happened (not some other failure)
        assert "rank 1" in str(info.value), str(info.value)
        assert took < settings.worker_timeout_s, took
        np.testing.assert_array_equal(np.asarray(est.predict(x[:16], batch_size=8)).reshape(-1), before)
        hist = est.fit((x, y), epochs=1, batch_size=8)
        assert hist[-1]["num_samples"] == 64
        assert len(set(est.worker_weight_digests())) == 1
    finally:
        est.shutdown()
        settings.worker_timeout_s = before_timeout


@needs_horovod
@pytest.mark.timeout(300)
def test_a_local_fit_on_horovod_listens_on_loopback_only(orca_context, tmp_path):
    """Every listening socket of the job while a horovod fit runs (rank 1 joins the sync group late,
    so the rendezvous listeners are open long enough to be seen): all on 127.0.0.1, including
    Horovod's rendezvous store on rank 0's reserved master port; and no TF gRPC server."""
    rdv_file = tmp_path / "rdv.json"
    x, y = regression(64)
    est = with_straggler(Estimator).from_keras(model_creator=linear_creator(), backend="horovod",
                                               workers_per_node=2, config={"rdv_file": str(rdv_file)}, verbose=0)
    sampler, facts = listeners_of_a_fit(est, lambda: est.fit((x, y), epochs=2, batch_size=16), rdv_file)
    store = [s for s in sampler.seen if s.port == facts["master_port"]]
    assert store and {s.ip for s in store} == {"127.0.0.1"}, f"Horovod's store was not seen: {sorted(sampler.seen)}"
    assert not sampler.exposed(), f"listening beyond loopback: {sampler.exposed()}"
