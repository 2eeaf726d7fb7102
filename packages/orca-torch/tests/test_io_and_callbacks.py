"""save/load, checkpoints and resume, callbacks, schedulers, metrics and multi-output predict."""

import os

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import LinearNet, TwoHeads, predict_plain, sgd
from torch import nn

from orca.torch import AUC, MAE, BinaryAccuracy, EarlyStopping, Estimator, ModelCheckpoint, Top5Accuracy

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def reg():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    return {"x": x, "y": (x @ np.array([1, 2, -1, 0.5], np.float32))[:, None]}


def test_save_writes_a_plain_state_dict_that_torch_opens(orca_context, reg, tmp_path, backend):
    torch.manual_seed(0)
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    try:
        est.fit(reg, epochs=2, batch_size=16)
        path = est.save(str(tmp_path / "m.pt"))
        ours = est.predict(reg["x"])
    finally:
        est.shutdown()
    plain = LinearNet()
    plain.load_state_dict(torch.load(path, weights_only=True))
    np.testing.assert_allclose(predict_plain(plain, reg["x"]), ours, atol=1e-6)


def test_checkpoint_callback_latest_checkpoint_and_resume(orca_context, reg, tmp_path, backend):
    ckdir = tmp_path / "ckpt"
    torch.manual_seed(0)
    est = Estimator.from_torch(model=LinearNet(), optimizer=lambda m, c: torch.optim.Adam(m.parameters(), lr=0.05),
                               loss=nn.MSELoss(), backend=backend, workers_per_node=2)
    try:
        est.fit(reg, epochs=3, batch_size=16, callbacks=[ModelCheckpoint(str(ckdir / "model-{epoch}.ckpt"))])
        expected = est.evaluate(reg, batch_size=16)
    finally:
        est.shutdown()
    assert sorted(os.listdir(ckdir)) == ["model-1.ckpt", "model-2.ckpt", "model-3.ckpt"]
    latest = Estimator.latest_checkpoint(str(ckdir))
    assert latest.endswith("model-3.ckpt")
    fresh = Estimator.from_torch(model=LinearNet(), optimizer=lambda m, c: torch.optim.Adam(m.parameters(), lr=0.05),
                                 loss=nn.MSELoss(), backend=backend, workers_per_node=2)
    try:
        fresh.load_checkpoint(latest)
        got = fresh.evaluate(reg, batch_size=16)
        assert got["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-6)
        hist = fresh.fit(reg, epochs=1, batch_size=16)
        assert hist[-1]["epoch"] == 4  # training continues from epoch 3
        assert "exp_avg" in str(fresh.get_state()["optimizer"]["state"][0].keys())
    finally:
        fresh.shutdown()


def test_latest_checkpoint_of_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Estimator.latest_checkpoint(str(tmp_path / "gone"))


def test_optimizer_instance_is_rebuilt_with_its_param_groups(orca_context, reg):
    model = LinearNet()
    opt = torch.optim.SGD([{"params": [model.fc.weight], "lr": 0.01}, {"params": [model.fc.bias], "lr": 0.001}],
                          lr=0.5, momentum=0.9)
    est = Estimator.from_torch(model=model, optimizer=opt, loss=nn.MSELoss(), backend="spark", workers_per_node=2)
    est.fit(reg, epochs=1, batch_size=16)
    groups = est.get_state()["optimizer"]["param_groups"]
    assert [g["lr"] for g in groups] == [0.01, 0.001]
    assert all(g["momentum"] == 0.9 for g in groups)


def test_scheduler_steps_once_per_epoch(orca_context, reg):
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend="spark",
                               workers_per_node=2,
                               scheduler_creator=lambda opt, c: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5))
    est.fit(reg, epochs=2, batch_size=16)
    assert est.get_state()["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.025)


def test_early_stopping_ends_training_on_every_worker(orca_context, reg, backend):
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.0), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    try:
        hist = est.fit(reg, epochs=10, batch_size=16, validation_data=reg,
                       callbacks=[EarlyStopping(monitor="val_loss", patience=1)])
    finally:
        est.shutdown()
    assert len(hist) == 3  # no improvement with lr=0: epochs 2 and 3 exhaust patience 1


class Scorer(nn.Module):
    """Fixed weights, so metrics can be recomputed in one process."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        with torch.no_grad():
            self.fc.weight.copy_(torch.linspace(-1, 1, 24).reshape(6, 4))
            self.fc.bias.copy_(torch.linspace(-0.5, 0.5, 6))

    def forward(self, x):
        return self.fc(x)


def test_metrics_are_exact_over_all_workers(orca_context, backend):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(7)
    x = rng.normal(size=(101, 4)).astype(np.float32)  # odd size: uneven shares
    y = rng.integers(0, 6, size=101)
    metrics = {"top5": Top5Accuracy(), "acc": "accuracy", "custom": lambda p, t: float((p.argmax(1) == t).mean())}
    est = Estimator.from_torch(model=Scorer(), loss=nn.CrossEntropyLoss(), metrics=metrics, backend=backend,
                               workers_per_node=2)
    try:
        stats = est.evaluate({"x": x, "y": y}, batch_size=10)
    finally:
        est.shutdown()
    logits = predict_plain(Scorer(), x)
    top5 = np.argsort(-logits, 1)[:, :5]
    assert stats["num_samples"] == 101
    assert stats["val_top5"] == pytest.approx(np.mean([t in r for t, r in zip(y, top5, strict=True)]))
    assert stats["val_acc"] == pytest.approx(np.mean(logits.argmax(1) == y))
    assert stats["val_custom"] == pytest.approx(np.mean(logits.argmax(1) == y))
    # binary metrics on the first score column
    yb = (x[:, 0] > 0).astype(np.int64)
    bin_est = Estimator.from_torch(model=lambda c: nn.Sequential(Scorer(), nn.Sigmoid()),
                                   loss=lambda out, t: torch.tensor(0.0),
                                   metrics=[AUC(), BinaryAccuracy(), MAE()], backend=backend, workers_per_node=2)
    try:
        b = bin_est.evaluate({"x": x, "y": yb[:, None].astype(np.float32)}, batch_size=10)
    finally:
        bin_est.shutdown()
    probs = 1 / (1 + np.exp(-logits))
    # a multi-column score: AUC reads the last column, binary metrics compare element-wise
    assert b["val_auc"] == pytest.approx(roc_auc_score(yb, probs[:, -1]))
    assert b["val_binary_accuracy"] == pytest.approx(np.mean((probs > 0.5) == yb[:, None]))
    assert b["val_mae"] == pytest.approx(np.mean(np.abs(probs - yb[:, None])), rel=1e-5)


def test_multi_output_model_fills_output_cols(spark, backend):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 4)).astype(np.float32)
    df = spark.createDataFrame(pd.DataFrame({"x": list(x), "id": range(12)}))
    model = TwoHeads()
    est = Estimator.from_torch(model=model, loss=nn.MSELoss(), backend=backend, workers_per_node=2)
    out = est.predict(df, feature_cols=["x"], output_cols=["score", "probs"]).orderBy("id").toPandas()
    with torch.no_grad():
        a, b = model(torch.from_numpy(x))
    assert list(out.columns) == ["x", "id", "score", "probs"]
    np.testing.assert_allclose(np.stack(out["score"].to_numpy()), a.numpy(), atol=1e-6)  # (n, 1): a DenseVector a row
    np.testing.assert_allclose(np.stack(out["probs"].to_numpy()), b.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="output_cols"):
        est.predict(df, feature_cols=["x"], output_cols=["only_one"])
    est.shutdown()


def test_one_driver_side_progress_bar_is_fed_by_rank_zero(orca_context, reg, backend):
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2, use_tqdm=True)
    try:
        est.fit(reg, epochs=2, batch_size=16)
    finally:
        est.shutdown()
    events = est.progress_events
    begins = [e for e in events if e["event"] == "begin"]
    assert [e["total_steps"] for e in begins] == [8]  # one reporter: 64 rows / 16 x 2 epochs
    assert begins[0]["optimizer"]["optimizer"] == "SGD" and begins[0]["optimizer"]["optimizer.lr"] == 0.1
    assert sum(e.get("n", 0) for e in events if e["event"] == "step") == 8
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]


def test_an_mlflow_run_holds_the_model_with_the_pytorch_flavour(orca_context, reg, tmp_path):
    """set_mlflow against a real sqlite tracking store: the run's ``model`` artifact is an MLflow
    Model that ``mlflow.pytorch.load_model`` opens, predicting as the Estimator does, with Orca's
    checkpoint beside it."""
    import mlflow

    from orca.core.testing.tracking import fit_and_fetch_model

    torch.manual_seed(0)
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend="spark",
                               workers_per_node=2)
    try:
        local = fit_and_fetch_model(est, lambda: est.fit(reg, epochs=2, batch_size=16), tmp_path,
                                    params={"optimizer": "SGD", "optimizer.lr": 0.1, "optimizer.momentum": 0.0})
        loaded = mlflow.pytorch.load_model(local)
        with torch.no_grad():
            got = loaded(torch.from_numpy(reg["x"])).numpy()
        np.testing.assert_allclose(got, est.predict(reg["x"]), rtol=1e-6, atol=1e-6)
    finally:
        est.shutdown()
