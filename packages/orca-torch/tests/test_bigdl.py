"""The `bigdl` backend (the default): torch objects as users have them, kept in step by
orca.core.sync instead of torch.distributed, on Spark barrier tasks; and the user guide's two
PyTorch samples (the bigdl and the ray backend) as written."""

import time

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import HOROVOD, predict_plain
from test_training import digits, expected_sgd_weight, one_weight_model
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from orca.core.data import XShards
from orca.core.engine import OrcaWorkerError
from orca.torch import Estimator

pytestmark = pytest.mark.timeout(300)


class LeNet(nn.Module):
    """LeNet-5's shape, sized for scikit-learn's 8x8 digits; log-probabilities for NLLLoss."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def test_bigdl_is_the_default_backend():
    est = Estimator.from_torch(model=nn.Linear(2, 1), optimizer=None, loss=nn.MSELoss())
    assert est.backend == "bigdl"


def test_the_reference_example_runs_as_written(orca_context):
    xtr, ytr, xte, yte = digits()
    train_loader = DataLoader(TensorDataset(torch.from_numpy(xtr), torch.from_numpy(ytr)), batch_size=32,
                              shuffle=True)
    lr, epochs = 1e-2, 2
    torch.manual_seed(0)

    # --- as in the user guide ("Using BigDL backend")
    model = LeNet()  # a torch.nn.Module
    model.train()
    criterion = nn.NLLLoss()

    adam = torch.optim.Adam(model.parameters(), lr)
    est = Estimator.from_torch(model=model, optimizer=adam, loss=criterion)

    est.fit(data=train_loader, epochs=epochs)
    xshards = XShards.partition({"x": xte}, num_shards=3)
    predictions = est.predict(xshards)
    # ---

    try:
        pred = np.concatenate([s["prediction"] for s in predictions.collect()])
        plain = predict_plain(est.get_model(), xte)
    finally:
        est.shutdown()
    assert pred.shape == (len(xte), 10)
    np.testing.assert_allclose(pred, plain, atol=1e-5)
    assert float((pred.argmax(1) == yte).mean()) > 0.85


class FlatLeNet(LeNet):
    """LeNet taking the flat 64 pixels a DataFrame column holds (as a user's model would)."""

    def forward(self, x):
        return super().forward(x.reshape(-1, 1, 8, 8))


@pytest.mark.parametrize("guide_backend", ["ray", *HOROVOD])
def test_the_reference_ray_backend_example_runs_as_written(orca_context, spark, guide_backend):
    """The guide's sample with ``backend="ray"``, and with its ``# or backend="horovod"``."""
    xtr, ytr, xte, yte = digits()

    def train_loader_func(config, batch_size):
        return DataLoader(TensorDataset(torch.from_numpy(xtr), torch.from_numpy(ytr)), batch_size=batch_size,
                          shuffle=True)

    df = spark.createDataFrame(pd.DataFrame({"image": [r.reshape(-1).tolist() for r in xte], "label": yte}))
    epochs = 3
    torch.manual_seed(0)

    # --- as in the user guide ("Using torch.distributed or Horovod backend")
    def model_creator(config):
        model = FlatLeNet()  # a torch.nn.Module
        model.train()
        return model

    def optimizer_creator(model, config):
        return torch.optim.Adam(model.parameters(), config["lr"])

    est = Estimator.from_torch(model=model_creator,
                               optimizer=optimizer_creator,
                               loss=nn.NLLLoss(),
                               config={"lr": 1e-2},
                               backend=guide_backend)  # "ray" as written, or backend="horovod"

    est.fit(data=train_loader_func, epochs=epochs)
    predictions = est.predict(data=df,
                              feature_cols=['image'])
    # ---

    try:
        out = predictions.toPandas()
        plain = predict_plain(est.get_model(), np.stack(out["image"].map(np.asarray)).astype(np.float32))
    finally:
        est.shutdown()
    pred = np.stack(out["prediction"].map(np.asarray))
    assert pred.shape == (len(xte), 10)
    np.testing.assert_allclose(pred, plain, atol=1e-5)
    assert float((pred.argmax(1) == out["label"].to_numpy()).mean()) > 0.85


def test_bigdl_gives_the_same_weights_as_the_ray_ddp_backend(orca_context):
    xtr, ytr, _, _ = digits()
    data = {"x": xtr, "y": ytr}
    weights = {}
    for backend in ("bigdl", "ray"):
        torch.manual_seed(0)
        model = LeNet()
        est = Estimator.from_torch(model=model, optimizer=torch.optim.Adam(model.parameters(), 1e-3),
                                   loss=nn.NLLLoss(), backend=backend, workers_per_node=2)
        try:
            est.fit(data, epochs=2, batch_size=64, shuffle=False)
            assert len(set(est.worker_weight_digests())) == 1
            weights[backend] = {k: v.numpy() for k, v in est.get_model().state_dict().items()}
        finally:
            est.shutdown()
    for name, w in weights["bigdl"].items():
        np.testing.assert_allclose(w, weights["ray"][name], atol=1e-5, err_msg=name)


def test_a_dataloader_instance_is_split_into_disjoint_shares(orca_context):
    """Two workers read disjoint halves of each loader batch: the steps equal single-process SGD
    on the loader's own batches, and every row is counted once."""
    x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
    y = (2 * x).astype(np.float32)
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=4, shuffle=False)
    model = one_weight_model()
    est = Estimator.from_torch(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                               loss=nn.MSELoss(), workers_per_node=2)
    try:
        hist = est.fit(data=loader, epochs=2)
        got = float(est.get_model().weight.item())
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [8, 8]
    want = expected_sgd_weight(x[:, 0].astype(np.float64), y[:, 0].astype(np.float64), 0.5, 0.1,
                               [[0, 1, 2, 3], [4, 5, 6, 7]] * 2)
    assert got == pytest.approx(want, abs=1e-6)


class FailsOnLargeInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, x):
        if bool((x > 100).any()):
            raise ValueError("poisoned row reached the model")
        return self.fc(x)


def test_one_failing_worker_fails_the_fit_at_once_with_its_own_error(orca_context):
    """Only worker 1 sees the bad row; worker 0 waits on it in the allreduce and must not hang
    until the sync timeout: the error names the cause, not the lost peer."""
    x = np.ones((40, 1), np.float32)
    x[30] = 1000.0  # in worker 1's half
    est = Estimator.from_torch(model=FailsOnLargeInputs(), optimizer=lambda m, c: torch.optim.SGD(m.parameters(), 0.1),
                               loss=nn.MSELoss(), workers_per_node=2)
    start = time.monotonic()
    try:
        with pytest.raises(OrcaWorkerError, match="poisoned row"):
            est.fit({"x": x, "y": x}, epochs=1, batch_size=8, shuffle=False)
    finally:
        est.shutdown()
    assert time.monotonic() - start < 60  # the sync timeout in these tests is 180 s
