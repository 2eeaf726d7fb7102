"""The reference's (bigdl-orca 2.4) PyTorch Estimator calls, as its own tests made them
(python/orca/test/bigdl/orca/learn/{ray,spark}/pytorch and .../jep in BigDL 2.x), on Orca's real
backends: evaluate's num_steps / reduce_results / profile, get_state_dict, the reference's metric
keys and tensor-taking metric functions, callbacks that read self.model or the reference's hooks,
ModelCheckpoint(save_weights_only, by_epoch, interval), TensorBoardCallback, MainCallback,
checkpoint_trigger with model_dir, and the reference's optimizer wrappers."""

import json
import os
import shutil

import numpy as np
import pytest
import torch
from conftest import TwoHeads
from torch import nn

from orca.core.engine.checkpoint import read_checkpoint
from orca.core.plugin import warnings_reset
from orca.torch import Accuracy, Estimator, EveryEpoch, SeveralIteration, Top5Accuracy, process_stats
from orca.torch.callbacks import Callback, MainCallback, ModelCheckpoint, TensorBoardCallback

pytestmark = pytest.mark.timeout(300)

#: the backends every reference behaviour is checked on (the Spark launcher's two, and Ray)
BACKENDS = ["bigdl", "spark", "ray"]


class LinearModel(nn.Module):
    """The reference's: y = w * x, w = 1 at the start."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 1, bias=False)
        self.fc1.weight.data.fill_(1.0)

    def forward(self, x):
        return self.fc1(x)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        return self.fc(x)


def _sgd(lr):
    return lambda model, config: torch.optim.SGD(model.parameters(), lr=lr)


def _linear(backend, lr=0.5, **kw):
    return Estimator.from_torch(model=lambda config: LinearModel(), optimizer=_sgd(lr), loss=nn.MSELoss(),
                                backend=backend, workers_per_node=2, use_tqdm=False, **kw)


@pytest.fixture(scope="module")
def two_halves():
    """Worker 0's rows have x = 0 (loss 0), worker 1's x = 1 (loss 1 with w = 1): the reference's
    test_not_sync_stats data, cut as every launcher cuts in-process data (two contiguous halves)."""
    x = np.array([[0.0]] * 20 + [[1.0]] * 20, np.float32)
    return {"x": x, "y": np.zeros((40, 1), np.float32)}


@pytest.fixture(scope="module")
def classes():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    return {"x": x, "y": (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0).astype(np.int64)}


# ---------------------------------------------------------------- 1. evaluate / predict / fit arguments
@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluate_num_steps_evaluates_that_many_batches_of_each_worker(orca_context, backend):
    x = np.arange(40, dtype=np.float32)[:, None] / 10
    data = {"x": x, "y": np.zeros((40, 1), np.float32)}
    est = _linear(backend)
    try:
        out = est.evaluate(data, batch_size=8, num_steps=2)
        full = est.evaluate(data, batch_size=8)
    finally:
        est.shutdown()
    # each worker's batch is 4 rows: 2 steps = its first 8 rows (rows 0-7 and 20-27); loss = x^2
    seen = np.concatenate([x[:8], x[20:28]])
    assert out["num_samples"] == 16
    assert out["val_loss"] == pytest.approx(float(np.mean(seen ** 2)), rel=1e-5)
    assert full["num_samples"] == 40
    assert full["val_loss"] == pytest.approx(float(np.mean(x ** 2)), rel=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluate_reduce_results_false_gives_each_workers_own_result_with_profile(orca_context, two_halves,
                                                                                  backend):
    est = _linear(backend)
    try:
        per_worker = est.evaluate(two_halves, batch_size=4, reduce_results=False, profile=True)
        merged = est.evaluate(two_halves, batch_size=4, profile=True)
    finally:
        est.shutdown()
    assert isinstance(per_worker, list) and len(per_worker) == 2
    assert [w["val_loss"] for w in per_worker] == [pytest.approx(0.0), pytest.approx(1.0)]
    assert [w["num_samples"] for w in per_worker] == [20, 20]
    for result in [*per_worker, merged]:
        assert set(result["profile"]) == {"mean_validation_s", "mean_eval_fwd_s"}
        assert 0 < result["profile"]["mean_eval_fwd_s"] <= result["profile"]["mean_validation_s"]
    assert merged["val_loss"] == pytest.approx(0.5) and merged["num_samples"] == 40
    reduced = process_stats(per_worker)  # the reference's mean over the workers (bigdl.orca.learn.pytorch.utils)
    assert reduced["val_loss"] == pytest.approx(0.5) and reduced["num_samples"] == 40
    assert reduced["profile"]["mean_eval_fwd_s"] == pytest.approx(
        sum(w["profile"]["mean_eval_fwd_s"] for w in per_worker) / 2)


@pytest.mark.parametrize("backend", ["bigdl", "spark"])
def test_fit_profile_adds_each_epochs_timing(orca_context, two_halves, backend):
    est = _linear(backend, lr=0.0)
    try:
        history = est.fit(two_halves, epochs=2, batch_size=4, validation_data=two_halves, profile=True)
        plain = est.fit(two_halves, epochs=1, batch_size=4)
    finally:
        est.shutdown()
    for stats in history:
        profile = stats["profile"]
        assert profile["mean_train_epoch_s"] > 0 and profile["mean_validation_s"] > 0
        assert profile["mean_train_batch_s"] == pytest.approx(profile["mean_train_epoch_s"] / 10)
    assert "profile" not in plain[0]


def test_predict_takes_profile_and_callbacks_and_runs_a_custom_prediction_step(orca_context, two_halves):
    class CustomPrediction(MainCallback):
        def on_pred_forward(self, runner):
            runner.output = runner.model(*runner.batch) * 2

    est = _linear("bigdl")
    try:
        expected = est.predict(two_halves["x"], batch_size=8)
        got = est.predict(two_halves["x"], batch_size=8, profile=True, callbacks=[Callback()])
        custom = est.predict(two_halves["x"], batch_size=8, callbacks=[CustomPrediction()])
    finally:
        est.shutdown()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(expected, two_halves["x"])  # w = 1
    np.testing.assert_array_equal(custom, 2 * two_halves["x"])  # the hook ran in the workers


# ---------------------------------------------------------------- 2. get_state_dict / load_state_dict
@pytest.mark.parametrize("backend", BACKENDS)
def test_get_state_dict_is_the_references_and_data_parallel_sgd_gives_its_numbers(orca_context, backend):
    # the reference's test_data_parallel_sgd_correctness: worker 0 rows (0, 0), worker 1 rows (1, 0);
    # loss (wx)^2: step 1 grad avg([0, 0, 2, 2]) = 1 -> w = 0.5; step 2 grad 0.5 -> w = 0.25
    data = {"x": np.array([[0.0], [0.0], [1.0], [1.0]], np.float32), "y": np.zeros((4, 1), np.float32)}
    est = _linear(backend)
    try:
        before = est.get_state_dict()
        est.fit(data, epochs=2, batch_size=4)
        state = est.get_state_dict()
    finally:
        est.shutdown()
    assert before["epoch"] == 0 and before["models"][0]["fc1.weight"].item() == 1.0
    assert set(state) == {"epoch", "models", "optimizers"}
    assert state["epoch"] == 2
    assert state["models"][0]["fc1.weight"].item() == 0.25
    assert state["optimizers"][0]["param_groups"][0]["lr"] == 0.5
    fresh = _linear(backend)
    fresh.load_state_dict(state)
    assert fresh.get_model().fc1.weight.item() == 0.25
    assert fresh.epochs_trained == 2
    fresh.load_state_dict(LinearModel().state_dict())  # a model's plain state dict too
    assert fresh.get_model().fc1.weight.item() == 1.0


# ---------------------------------------------------------------- 4. the reference's metric keys
@pytest.mark.parametrize("backend", BACKENDS)
def test_results_answer_the_reference_metric_keys_and_functions_get_tensors(orca_context, classes, backend):
    def customized_metric(pred, target):  # (a function of the test: Spark's own cloudpickle copies it by value)
        if not (isinstance(pred, torch.Tensor) and isinstance(target, torch.Tensor)):
            raise TypeError(f"a metric function gets tensors, as in the reference: got {type(pred)}, {type(target)}")
        return torch.mean((torch.argmax(pred, dim=-1) == target).float())

    def numpy_accuracy(pred, target):  # Orca's earlier contract: numpy arrays (a bool tensor has no mean())
        return float((pred.argmax(1) == target).mean())

    torch.manual_seed(0)
    est = Estimator.from_torch(model=Classifier(), optimizer=_sgd(0.5), loss=nn.CrossEntropyLoss(),
                               metrics=[Accuracy(), Top5Accuracy(), customized_metric, numpy_accuracy],
                               backend=backend, workers_per_node=2, use_tqdm=False)
    try:
        history = est.fit(classes, epochs=2, batch_size=16, validation_data=classes)
        result = est.evaluate(classes, batch_size=16)
        per_worker = est.evaluate(classes, batch_size=16, reduce_results=False)
    finally:
        est.shutdown()
    last = history[-1]
    assert last["val_top5accuracy"] == last["val_top5_accuracy"]  # the reference's "val_" + name.lower()
    assert last["val_customized_metric"] == pytest.approx(last["val_accuracy"])
    assert last["val_numpy_accuracy"] == pytest.approx(last["val_accuracy"])
    assert 0.5 < last["val_accuracy"] <= 1.0
    # evaluate: the reference's keys are the metric names, as 0-d tensors (stat["Accuracy"].data.item())
    assert isinstance(result["Accuracy"], torch.Tensor) and result["Accuracy"].dim() == 0
    assert result["Accuracy"].data.item() == pytest.approx(result["val_accuracy"])
    assert result["Top5Accuracy"].item() == pytest.approx(result["val_top5_accuracy"])
    assert result["customized_metric"].item() == pytest.approx(result["val_accuracy"])
    assert result["num_samples"] == 96
    acc = [w["Accuracy"].data.item() for w in per_worker]
    assert process_stats(per_worker)["Accuracy"].data.item() == pytest.approx(sum(acc) / len(acc))
    assert sum(a * w["num_samples"] for a, w in zip(acc, per_worker, strict=True)) / 96 == pytest.approx(
        result["val_accuracy"])


# ---------------------------------------------------------------- 3. callbacks
class ReferenceStyleCallback(Callback):
    """Reads what the reference's callbacks read: self.model in on_epoch_end, and the runner in its hooks."""

    def __init__(self, path):
        self.path = path

    def _write(self, record):
        if self.rank == 0:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)  # the reference's after_train_epoch runs from here
        self._write({"hook": "on_epoch_end", "model": type(self.model).__name__,
                     "weight": float(self.model.fc1.weight.item()), "keys": sorted(logs)})

    def after_train_epoch(self, runner):
        self._write({"hook": "after_train_epoch", "epochs": runner.epochs, "steps": runner.global_step,
                     "model": type(runner.model).__name__, "optimizer": type(runner.optimizer).__name__,
                     "train_loss": runner.epoch_stats["train_loss"], "world": runner.world_size})

    def after_run(self, runner):
        self._write({"hook": "after_run", "epochs": runner.epochs})


@pytest.mark.parametrize("backend", ["bigdl", "spark"])
def test_callbacks_see_the_model_and_the_references_runner(orca_context, two_halves, tmp_path, backend):
    path = tmp_path / "hooks.jsonl"
    est = _linear(backend, lr=0.1)
    try:
        history = est.fit(two_halves, epochs=2, batch_size=8, validation_data=two_halves,
                          callbacks=[ReferenceStyleCallback(str(path))])
    finally:
        est.shutdown()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["hook"] for r in records] == ["after_train_epoch", "on_epoch_end"] * 2 + ["after_run"]
    first, second = records[0], records[2]
    assert (first["epochs"], first["steps"], second["epochs"], second["steps"]) == (1, 5, 2, 10)
    assert first["model"] == "LinearModel" and first["optimizer"] == "SGD" and first["world"] == 2
    assert first["train_loss"] == pytest.approx(history[0]["train_loss"])
    assert records[1]["model"] == "LinearModel" and "val_loss" in records[1]["keys"]
    assert records[3]["weight"] == pytest.approx(est.get_model().fc1.weight.item())


@pytest.mark.parametrize("backend", ["bigdl", "spark"])
def test_model_checkpoint_names_files_as_the_reference_and_saves_weights_only(orca_context, two_halves, tmp_path,
                                                                              backend):
    by_epoch, by_iter = tmp_path / "epochs", tmp_path / "iters"
    est = _linear(backend, lr=0.1)
    try:
        est.fit(two_halves, epochs=2, batch_size=4, callbacks=[
            ModelCheckpoint(filepath=str(by_epoch / "test-{epoch}"), save_weights_only=True),
            ModelCheckpoint(filepath=str(by_iter / "test-{iter}"), by_epoch=False, interval=8)])
        expected = est.evaluate(two_halves, batch_size=4)
    finally:
        est.shutdown()
    assert sorted(os.listdir(by_epoch)) == ["test-epoch=1.ckpt", "test-epoch=2.ckpt"]
    assert sorted(os.listdir(by_iter)) == ["test-iter=16.ckpt", "test-iter=8.ckpt"]  # 10 steps an epoch, 20 in all
    latest = Estimator.latest_checkpoint(str(by_epoch))
    assert latest.endswith("test-epoch=2.ckpt")
    epoch, state = read_checkpoint(latest)
    assert epoch == 2 and set(state) == {"model"}  # save_weights_only: no optimizer state
    assert set(read_checkpoint(str(by_iter / "test-iter=8.ckpt"))[1]) == {"model", "optimizer"}
    fresh = _linear(backend, lr=0.1)
    try:
        fresh.load_checkpoint(latest)
        got = fresh.evaluate(two_halves, batch_size=4)
    finally:
        fresh.shutdown()
    assert got["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-6)
    shutil.rmtree(by_epoch)
    with pytest.raises(RuntimeError):  # as the reference's (and a FileNotFoundError)
        Estimator.latest_checkpoint(str(by_epoch))


@pytest.mark.parametrize("freq", ["epoch", "batch"])
def test_tensorboard_callback_writes_the_references_scalars(orca_context, two_halves, tmp_path, freq):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = tmp_path / f"runs_{freq}"
    est = _linear("bigdl", lr=0.1)
    try:
        history = est.fit(two_halves, epochs=2, batch_size=8, validation_data=two_halves,
                          callbacks=[TensorBoardCallback(log_dir=str(log_dir), freq=freq)])
    finally:
        est.shutdown()
    assert len(os.listdir(log_dir)) > 0
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    losses = acc.Scalars("train_loss")
    if freq == "epoch":
        assert {"train_loss", "val_loss"} <= set(scalars) and "num_samples" not in scalars
        assert [s.step for s in losses] == [1, 2]
        assert [s.value for s in losses] == pytest.approx([h["train_loss"] for h in history], rel=1e-6)
    else:
        assert [s.step for s in losses] == list(range(1, 11))  # 5 steps an epoch, 2 epochs


class DoubledLoss(MainCallback):
    """A custom step: twice the loss (with SGD, the step of twice the learning rate)."""

    def on_train_forward(self, runner):
        super().on_train_forward(runner)
        runner.loss = runner.loss * 2

    def on_val_forward(self, runner):
        super().on_val_forward(runner)
        runner.loss = runner.loss * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_main_callback_runs_the_training_and_evaluation_steps(orca_context, backend):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 1)).astype(np.float32)  # 30 rows, batch 8: uneven steps on 2 workers
    data = {"x": x, "y": 3 * x}
    weights = {}
    for name, lr, callbacks in (("custom", 0.05, [DoubledLoss()]), ("plain", 0.1, []), ("default", 0.1,
                                                                                          [MainCallback()])):
        est = _linear(backend, lr=lr)
        try:
            est.fit(data, epochs=2, batch_size=8, callbacks=callbacks)
            weights[name] = est.get_model().fc1.weight.item()
            if name == "custom":
                custom_eval = est.evaluate(data, batch_size=8, callbacks=[DoubledLoss()])["val_loss"]
                plain_eval = est.evaluate(data, batch_size=8)["val_loss"]
        finally:
            est.shutdown()
    assert weights["custom"] == pytest.approx(weights["plain"], abs=1e-6)
    assert weights["default"] == pytest.approx(weights["plain"], abs=1e-6)
    assert weights["plain"] != pytest.approx(1.0, abs=1e-2)  # it trained
    assert custom_eval == pytest.approx(3 * plain_eval, rel=1e-6)


def test_only_one_main_callback_is_taken(orca_context, two_halves):
    est = _linear("bigdl")
    with pytest.raises(ValueError, match="at most one MainCallback"):
        est.fit(two_halves, epochs=1, batch_size=8, callbacks=[MainCallback(), DoubledLoss()])


# ---------------------------------------------------------------- 5. checkpoint_trigger with model_dir
@pytest.mark.parametrize("backend", ["bigdl", "spark"])
def test_checkpoint_trigger_writes_into_model_dir_and_load_orca_checkpoint_reads_it(orca_context, two_halves,
                                                                                    tmp_path, backend):
    every_epoch, every_8 = tmp_path / "epochs", tmp_path / "steps"
    est = _linear(backend, lr=0.1, model_dir=str(every_epoch))
    est_steps = _linear(backend, lr=0.1, model_dir=str(every_8))
    try:
        est.fit(two_halves, epochs=2, batch_size=4, checkpoint_trigger=EveryEpoch())
        est_steps.fit(two_halves, epochs=2, batch_size=4, checkpoint_trigger=SeveralIteration(8))
        weight = est.get_model().fc1.weight.item()
    finally:
        est.shutdown()
        est_steps.shutdown()
    assert sorted(os.listdir(every_epoch)) == ["model-epoch=1.ckpt", "model-epoch=2.ckpt"]
    assert sorted(os.listdir(every_8)) == ["model-iter=16.ckpt", "model-iter=8.ckpt"]
    fresh = Estimator.from_torch(model=lambda config: LinearModel(), loss=nn.MSELoss(), optimizer=None,
                                 backend=backend)
    fresh.load_orca_checkpoint(str(every_epoch))
    assert fresh.get_model().fc1.weight.item() == weight
    assert fresh.epochs_trained == 2
    fresh.load_orca_checkpoint(str(every_epoch), version=1)
    assert fresh.epochs_trained == 1
    with pytest.raises(TypeError, match="EveryEpoch"):
        est.fit(two_halves, epochs=1, batch_size=4, checkpoint_trigger="every epoch")
    with pytest.raises(ValueError, match="positive"):
        SeveralIteration(0)


# ---------------------------------------------------------------- 6. the reference's optimizer wrappers
@pytest.mark.parametrize("backend", ["bigdl", "spark"])
def test_the_references_sgd_runs_as_torch_sgd_with_its_per_step_schedule(orca_context, backend):
    from orca.torch.optimizers import SGD
    from orca.torch.optimizers.schedule import Default

    # as test_get_state_dict's data: the gradients are 1 then 2 * w * 0.5; learningrate_decay=1 makes
    # the rates 0.5 / (1 + step): w = 1 - 0.5 * 1 = 0.5, then 0.5 - 0.25 * 0.5 = 0.375
    data = {"x": np.array([[0.0], [0.0], [1.0], [1.0]], np.float32), "y": np.zeros((4, 1), np.float32)}
    est = Estimator.from_torch(model=LinearModel(), loss=nn.MSELoss(), backend=backend, workers_per_node=2,
                               optimizer=SGD(learningrate=0.5, learningrate_decay=1.0,
                                             learningrate_schedule=Default()), use_tqdm=False)
    try:
        est.fit(data, epochs=2, batch_size=4)
        state = est.get_state_dict()
    finally:
        est.shutdown()
    assert state["models"][0]["fc1.weight"].item() == pytest.approx(0.375, abs=1e-7)
    group = state["optimizers"][0]["param_groups"][0]
    assert (group["iteration"], group["lr"], group["base_lr"]) == (2, 0.25, 0.5)


def test_the_references_dataloader_fit_with_adam_and_a_trigger_without_model_dir(orca_context):
    from torch.utils.data import DataLoader, TensorDataset

    from orca.torch.optimizers import Adam

    class SimpleModel(nn.Module):  # the reference's test_bigdl_pytorch_estimator_dataloader
        def __init__(self):
            super().__init__()
            self.dense1 = nn.Linear(2, 4)
            self.bn1 = nn.BatchNorm1d(4)
            self.dense2 = nn.Linear(4, 1)

        def forward(self, x):
            return torch.sigmoid(self.dense2(self.bn1(self.dense1(x))))

    inputs = torch.Tensor([[1, 2], [1, 3], [3, 2], [5, 6], [8, 9], [1, 9]])
    targets = torch.Tensor([[0], [0], [0], [1], [1], [1]])
    est = Estimator.from_torch(model=SimpleModel(), loss=nn.BCELoss(), metrics=[Accuracy()], optimizer=Adam(),
                               backend="bigdl", use_tqdm=False)
    try:
        with warnings_reset("torch.fit(checkpoint_trigger)"), \
                pytest.warns(UserWarning, match=r"without from_torch\(model_dir=\.\.\.\): nothing is checkpointed"):
            history = est.fit(data=DataLoader(TensorDataset(inputs, targets), batch_size=2), epochs=2,
                              validation_data=DataLoader(TensorDataset(inputs, targets), batch_size=2),
                              checkpoint_trigger=EveryEpoch())
        result = est.evaluate(data=DataLoader(TensorDataset(inputs, targets), batch_size=2))
    finally:
        est.shutdown()
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["num_samples"] == 6
    assert result["num_samples"] == 6 and isinstance(result["Accuracy"], torch.Tensor)
    assert isinstance(est.get_model(), nn.Module)
    assert est.get_state_dict()["optimizers"][0]["param_groups"][0]["iteration"] == 6


# ---------------------------------------------------------------- 6. fit's per-worker stats, max_steps, metric classes
@pytest.mark.parametrize("sync_stats", [False, True])
def test_fit_gives_each_workers_own_training_stats_unless_sync_stats(orca_context, two_halves, sync_stats):
    # the reference's test_not_sync_stats: worker 0's loss is always 0, worker 1's always 1 (lr 0: w stays 1)
    est = _linear("bigdl", lr=0.0, sync_stats=sync_stats)
    try:
        per_worker = est.fit(two_halves, epochs=2, batch_size=4, reduce_results=False)
        merged = est.fit(two_halves, epochs=1, batch_size=4)
    finally:
        est.shutdown()
    assert len(per_worker) == 2 and all(len(epoch) == 2 for epoch in per_worker)
    worker_0, worker_1 = per_worker[0]
    if sync_stats:
        assert worker_0["train_loss"] == worker_1["train_loss"] == pytest.approx(0.5)
        assert worker_0["num_samples"] == worker_1["num_samples"] == 40
    else:
        assert (worker_0["train_loss"], worker_1["train_loss"]) == (pytest.approx(0.0), pytest.approx(1.0))
        assert worker_0["num_samples"] == worker_1["num_samples"] == 20
        assert worker_0["batch_count"] == worker_1["batch_count"] == 10
    assert all("_ranks" not in stats for epoch in per_worker for stats in epoch)
    assert merged[0]["train_loss"] == pytest.approx(0.5) and "_ranks" not in merged[0]


def test_fit_max_steps_runs_as_many_epochs_as_it_takes_ignoring_epochs(orca_context, two_halves):
    # the reference's test_train_max_steps: epochs is ignored; 10 steps per epoch here (40 rows, batch 4)
    est = _linear("bigdl", lr=0.0)
    try:
        history = est.fit(two_halves, batch_size=4, max_steps=15)
        with pytest.raises(ValueError, match="max_steps"):
            est.fit(two_halves, batch_size=4, max_steps=0)
    finally:
        est.shutdown()
    assert [h["epoch"] for h in history] == [1, 2]
    assert [h["num_samples"] for h in history] == [40, 20]
    assert est.epochs_trained == 2


def test_orca_torch_metric_names_are_the_torch_metric_classes():
    import orca.torch
    from orca.torch import metrics

    for name in ("AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Top5Accuracy"):
        assert getattr(orca.torch, name) is getattr(metrics, name)
    acc = Accuracy()  # called as the reference's: acc(preds, targets), then acc.compute()
    acc(torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), torch.tensor([1, 0, 0]))
    assert isinstance(acc.compute(), torch.Tensor) and acc.compute().item() == pytest.approx(2 / 3)


class Shapes(nn.Module):
    """An output per layout the reference's DataFrame predict wrote: ``(n,)``, ``(n, 1)``,
    ``(n, 3)`` and ``(n, 2, 2)``; an integer ``(n, 2)`` too."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return {"scalar": y[:, 0], "one": y[:, :1], "three": y[:, :3], "grid": y.reshape(-1, 2, 2),
                "ints": (y[:, :2] * 10).round().long()}[self.kind]


@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_a_dataframe_prediction_of_one_vector_a_row_is_an_ml_densevector_as_the_references(spark, backend):
    # the reference (learn/utils.py convert_predict_rdd_to_df) wrote a row's 1-D output as an ml
    # DenseVector (a (n, 1) output too: one value), a 0-d output as a double, an N-D one as nested
    # arrays; its tests read them with `to_array(prediction)`, a UDF calling `.toArray()`
    from pyspark.ml.linalg import DenseVector, VectorUDT
    from pyspark.sql.types import ArrayType, DoubleType

    spark.udf.register("to_array", lambda v: v.toArray().tolist(), ArrayType(DoubleType()))
    x = np.random.default_rng(2).normal(size=(12, 4)).astype(np.float32)
    df = spark.createDataFrame([(i, row.tolist()) for i, row in enumerate(x)], ["id", "feature"]).repartition(2)
    want_types = {"scalar": "float", "one": "vector", "three": "vector", "grid": "array<array<float>>",
                  "ints": "vector"}
    for kind, want_type in want_types.items():
        model = Shapes(kind)
        est = Estimator.from_torch(model=model, loss=nn.MSELoss(), backend=backend, workers_per_node=2,
                                   use_tqdm=False)
        try:
            out = est.predict(df, batch_size=4, feature_cols=["feature"])
            rows = out.orderBy("id").collect()
            listed = out.selectExpr("id", "to_array(prediction) AS p").orderBy("id").collect() \
                if want_type == "vector" else None
        finally:
            est.shutdown()
        typ = out.schema["prediction"].dataType
        assert (isinstance(typ, VectorUDT) if want_type == "vector" else typ.simpleString() == want_type), \
            (kind, typ)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        for row, w in zip(rows, want, strict=True):
            got = row["prediction"]
            if want_type == "vector":
                assert isinstance(got, DenseVector) and got.toArray().shape == w.shape, (kind, got)
                np.testing.assert_allclose(got.toArray(), w, atol=1e-6)
            else:
                np.testing.assert_allclose(np.asarray(got, np.float32), w, atol=1e-6)
        if listed is not None:
            np.testing.assert_allclose(np.array([r["p"] for r in listed]), want.reshape(len(x), -1), atol=1e-6)


def test_a_multi_output_dataframe_prediction_is_one_column_of_each_rows_outputs(spark):
    # the reference's predict gave a multi-output model's row as one `prediction` list ([vector, vector])
    x = np.random.default_rng(1).normal(size=(10, 4)).astype(np.float32)
    df = spark.createDataFrame([(i, row.tolist()) for i, row in enumerate(x)], ["id", "feature"])
    model = TwoHeads()
    est = Estimator.from_torch(model=model, loss=nn.MSELoss(), backend="bigdl", workers_per_node=2, use_tqdm=False)
    try:
        out = est.predict(df, batch_size=4, feature_cols=["feature"])
        rows = out.orderBy("id").collect()
    finally:
        est.shutdown()
    assert out.columns == ["id", "feature", "prediction"]
    assert out.schema["prediction"].dataType.simpleString() == "array<array<float>>"
    with torch.no_grad():
        score, probs = model(torch.from_numpy(x))
    for row, s, p in zip(rows, score.numpy(), probs.numpy(), strict=True):
        assert [len(v) for v in row["prediction"]] == [1, 3]
        np.testing.assert_allclose(row["prediction"][0], s, atol=1e-6)
        np.testing.assert_allclose(row["prediction"][1], p, atol=1e-6)


def test_evaluate_reduce_results_false_gives_one_result_per_worker_on_a_many_partition_dataframe(spark):
    # the reference's test_dataframe_shard_size_train_eval: as many results as workers, whatever the partitions
    rows = [([0.0], [0.0])] * 20 + [([1.0], [0.0])] * 20  # partitions 0-1: x = 0 (loss 0); 2-3: x = 1 (loss 1)
    df = spark.sparkContext.parallelize(rows, 4).toDF(["feature", "label"])
    est = _linear("bigdl")
    try:
        per_worker = est.evaluate(df, batch_size=4, feature_cols=["feature"], label_cols=["label"],
                                  reduce_results=False)
    finally:
        est.shutdown()
    assert [w["num_samples"] for w in per_worker] == [20, 20]
    assert [w["val_loss"] for w in per_worker] == [pytest.approx(0.0), pytest.approx(1.0)]
    assert process_stats(per_worker)["val_loss"] == pytest.approx(0.5)
