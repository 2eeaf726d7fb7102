"""A data creator's batches as the reference's users wrote them: nested inputs, several outputs and
several targets (``*features, target = batch``; ``loss(*outputs, *targets)``; ``metric(output, target)``),
and a Ray Dataset's number columns as one ``(n, k)`` input (Ray's ``to_torch``)."""

import numpy as np
import pytest
import torch
from conftest import sgd
from torch import nn

from orca.core.engine.metrics import Metric
from orca.torch import Estimator
from orca.torch.metrics import MSE

pytestmark = pytest.mark.timeout(300)

ROWS = 41


def _data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    y1 = (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32))[:, None].astype(np.float32)
    y2 = (x @ np.array([0.0, 1.0, 1.0, -1.0], np.float32) + 0.5)[:, None].astype(np.float32)
    return x, y1, y2


class NestedDataset(torch.utils.data.Dataset):
    """Rows as ``((x1, x2), {"x3": x3}, x4, [y1, y2])``: a tuple, a dict and a tensor in, two targets."""

    def __init__(self):
        x, y1, y2 = (torch.from_numpy(a) for a in _data())
        self.x, self.y1, self.y2 = x, y1, y2

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        x = self.x[i]
        return (x[0:1], x[1:2]), {"x3": x[2:3]}, x[3:4], [self.y1[i], self.y2[i]]


class TwoHeadNested(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)

    def forward(self, x12, d, x4):
        x = torch.cat([x12[0], x12[1], d["x3"], x4], dim=1)
        return self.a(x), self.b(x)


class TwoLosses:
    """The reference's call: ``loss(*outputs, *targets)``."""

    def __call__(self, o1, o2, y1, y2):
        return nn.functional.mse_loss(o1, y1) + nn.functional.mse_loss(o2, y2)


class BothHeadsMSE(Metric):
    """A metric written for the reference: its PyTorch metric combines both outputs and targets."""

    def get_pytorch_metric(self):
        class Combined(MSE):
            def __call__(self, preds, targets):
                super().__call__(torch.cat(preds, dim=0), torch.cat(targets, dim=0))

        return Combined()

    def get_name(self):
        return "BothMSE"


def creator(config, batch_size):
    return torch.utils.data.DataLoader(NestedDataset(), batch_size=batch_size, shuffle=False)


@pytest.mark.parametrize("backend", ["ray", "spark"])
def test_nested_inputs_and_two_targets_train_as_one_process_and_evaluate_as_the_reference(orca_context, backend):
    est = Estimator.from_torch(model=lambda config: TwoHeadNested(), optimizer=sgd(0.05),
                               loss=lambda config: TwoLosses(), metrics=[BothHeadsMSE(), "mse"], backend=backend,
                               workers_per_node=2)
    try:
        hist = est.fit(creator, epochs=2, batch_size=8)
        got = est.get_model().state_dict()
        result = est.evaluate(creator, batch_size=8)
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [ROWS, ROWS]

    # one process over the same global batches: rank r reads rows r, r + 2, ...; 4 rows each a step
    x, y1, y2 = (torch.from_numpy(a) for a in _data())
    ref = TwoHeadNested()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    shares = [np.arange(ROWS)[r::2] for r in range(2)]
    steps = [np.concatenate([s[i * 4:(i + 1) * 4] for s in shares]) for i in range(6)]
    for _ in range(2):
        for rows in steps:
            opt.zero_grad()
            xr = x[rows]
            o1, o2 = ref((xr[:, 0:1], xr[:, 1:2]), {"x3": xr[:, 2:3]}, xr[:, 3:4])
            TwoLosses()(o1, o2, y1[rows], y2[rows]).backward()
            opt.step()
    for name, w in ref.state_dict().items():
        np.testing.assert_allclose(got[name].numpy(), w.numpy(), atol=1e-5)

    with torch.no_grad():
        o1, o2 = ref((x[:, 0:1], x[:, 1:2]), {"x3": x[:, 2:3]}, x[:, 3:4])
        loss = float(nn.functional.mse_loss(o1, y1) + nn.functional.mse_loss(o2, y2))
        both = float(((torch.cat([o1, o2]) - torch.cat([y1, y2])) ** 2).mean())
        first = float(((o1 - y1) ** 2).mean())
    assert result["num_samples"] == ROWS
    assert result["val_loss"] == pytest.approx(loss, rel=1e-5)
    assert result["val_BothMSE"] == pytest.approx(both, rel=1e-5)  # the metric's own call, both heads
    assert float(result["BothMSE"]) == pytest.approx(both, rel=1e-5)  # and under the reference's key
    assert result["val_mse"] == pytest.approx(first, rel=1e-5)  # a plain metric: the first output and target


def test_a_loss_that_does_not_take_every_output_and_target_is_named_clearly(orca_context):
    est = Estimator.from_torch(model=lambda config: TwoHeadNested(), optimizer=sgd(0.05),
                               loss=nn.MSELoss(), backend="ray", workers_per_node=2)
    try:
        with pytest.raises(Exception, match=r"loss\(\*outputs, \*targets\).*2 output\(s\).*2 target\(s\)"):
            est.fit(creator, epochs=1, batch_size=8)
    finally:
        est.shutdown()


def test_a_ray_datasets_number_columns_reach_the_model_as_one_n_by_k_input(orca_context):
    import ray

    orca_context.ray_runtime()
    x, y1, _ = _data()
    ds = ray.data.from_items([{"a": float(r[0]), "b": float(r[1]), "y": float(t)} for r, t in zip(x, y1[:, 0],
                                                                                               strict=True)])
    torch.manual_seed(9)
    model = nn.Linear(2, 1)  # Linear(2, 1): the two columns side by side, as Ray's to_torch gave them
    est = Estimator.from_torch(model=model, loss=nn.MSELoss(), optimizer=sgd(0.0), backend="ray",
                               workers_per_node=2)
    try:
        result = est.evaluate(ds, batch_size=8, feature_cols=["a", "b"], label_cols="y")
        pred = est.predict(ds, batch_size=8, feature_cols=["a", "b"])  # an array, in the rows' order
    finally:
        est.shutdown()
    with torch.no_grad():
        out = model(torch.from_numpy(x[:, :2]))
    assert result["num_samples"] == ROWS
    assert result["val_loss"] == pytest.approx(float(nn.functional.mse_loss(out, torch.from_numpy(y1))), rel=1e-5)
    np.testing.assert_allclose(np.asarray(pred).reshape(-1), out.numpy()[:, 0], atol=1e-6)
