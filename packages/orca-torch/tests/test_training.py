"""Training correctness of orca.torch on both backends: exact data-parallel SGD, replicas in
step, a real CNN, every input type and awkward partitionings."""

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import HOROVOD, LinearNet, predict_plain, sgd
from torch import nn

from orca.core.data import XShards
from orca.torch import Estimator

pytestmark = pytest.mark.timeout(300)


def one_weight_model():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.5)
    return model


def expected_sgd_weight(x, y, w, lr, batches):
    for idx in batches:
        xb, yb = x[idx], y[idx]
        w = w - lr * np.mean(2 * (w * xb - yb) * xb)
    return w


def test_data_parallel_sgd_equals_single_process_on_the_same_global_batches(orca_context, all_backends):
    backend = all_backends
    x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
    y = (2 * x).astype(np.float32)
    est = Estimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    try:
        est.fit({"x": x, "y": y}, epochs=2, batch_size=4, shuffle=False)
        got = float(est.get_model().weight.item())
    finally:
        est.shutdown()
    # worker 0 holds rows 0-3 and worker 1 rows 4-7; step s takes 2 rows from each
    batches = [[0, 1, 4, 5], [2, 3, 6, 7]] * 2
    want = expected_sgd_weight(x[:, 0].astype(np.float64), y[:, 0].astype(np.float64), 0.5, 0.1, batches)
    assert got == pytest.approx(want, abs=1e-6)


def test_the_next_estimator_trains_in_the_warm_ray_workers_exactly_as_the_first(orca_context):
    """``shutdown()`` on the ray backend parks the two actors; the next Estimator of the same size
    runs in the same processes (no start, no torch import) and, from the same model, ends at the
    known SGD weight as the first did: its process group and optimizer are its own."""
    import os

    x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
    y = (2 * x).astype(np.float32)
    batches = [[0, 1, 4, 5], [2, 3, 6, 7]] * 2
    want = expected_sgd_weight(x[:, 0].astype(np.float64), y[:, 0].astype(np.float64), 0.5, 0.1, batches)
    pids, weights = [], []
    for _ in range(2):
        est = Estimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend="ray",
                                   workers_per_node=2)
        try:
            est.fit({"x": x, "y": y}, epochs=2, batch_size=4, shuffle=False)
            pids.append(sorted(est._group.call(lambda runner: os.getpid())))
            weights.append(float(est.get_model().weight.item()))
        finally:
            est.shutdown()
    from orca.core import release_warm_workers

    assert release_warm_workers() == 2
    assert pids[0] == pids[1] and len(set(pids[0])) == 2, pids
    assert weights[0] == weights[1] == pytest.approx(want, abs=1e-6)


def test_one_worker_trains_exactly_as_the_plain_torch_loop_and_skips_a_non_finite_step(orca_context):
    """One worker takes the plain loop's path (fresh gradients each step, nothing to all-reduce): SGD with
    momentum and weight decay over the same batches ends at the plain loop's weights to 1e-6; with
    skip_non_finite_steps a batch whose gradient overflows is left out, as if the plain loop skipped it."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32))[:, None].astype(np.float32)
    bad = x.copy()
    bad[20, 1] = 3e38  # in the second batch of 16: finite, but its squared error overflows float32

    def optim(model, config):
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)

    def plain(skip_step=None):
        torch.manual_seed(0)
        model = LinearNet()
        opt = optim(model, None)
        for _epoch in range(2):
            for step, start in enumerate(range(0, 48, 16)):
                if step == skip_step:
                    continue
                opt.zero_grad()
                nn.MSELoss()(model(torch.from_numpy(x[start:start + 16])), torch.from_numpy(y[start:start + 16])).backward()
                opt.step()
        return [p.detach().numpy().copy() for p in model.parameters()]

    for data, skip, want in (({"x": x, "y": y}, False, plain()), ({"x": bad, "y": y}, True, plain(skip_step=1))):
        torch.manual_seed(0)
        est = Estimator.from_torch(model=LinearNet(), optimizer=optim, loss=nn.MSELoss(), backend="spark",
                                   workers_per_node=1)
        try:
            hist = est.fit(data, epochs=2, batch_size=16, shuffle=False, skip_non_finite_steps=skip)
            got = [p.detach().numpy() for p in est.get_model().parameters()]
        finally:
            est.shutdown()
        assert est.num_workers == 1
        if skip:
            assert [h["skipped_steps"] for h in hist] == [1, 1]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", ["ray", *HOROVOD])
def test_skewed_and_empty_shards_keep_exact_global_batches(orca_context, backend):
    """Worker 0 gets 6 rows, worker 1 gets 0 rows of the first shard...: every step still uses the global batch."""
    x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
    y = (2 * x).astype(np.float32)
    shards = XShards.from_list([{"x": x[:6], "y": y[:6]}, {"x": x[6:6], "y": y[6:6]}, {"x": x[6:], "y": y[6:]}],
                               backend="local")
    est = Estimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    try:
        hist = est.fit(shards, epochs=1, batch_size=8, shuffle=False)
        got = float(est.get_model().weight.item())
    finally:
        est.shutdown()
    assert hist[-1]["num_samples"] == 8
    want = expected_sgd_weight(x[:, 0].astype(np.float64), y[:, 0].astype(np.float64), 0.5, 0.1,
                               [list(range(8))])
    assert got == pytest.approx(want, abs=1e-6)


def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return xtr, ytr, xte, yte


def cnn(config):
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))


def test_cnn_on_digits_reaches_90_percent_test_accuracy(orca_context, all_backends):
    backend = all_backends
    xtr, ytr, xte, yte = digits()
    est = Estimator.from_torch(model=cnn, optimizer=lambda m, c: torch.optim.Adam(m.parameters(), lr=3e-3),
                               loss=nn.CrossEntropyLoss(), metrics=["accuracy"], backend=backend, workers_per_node=2)
    try:
        hist = est.fit({"x": xtr, "y": ytr}, epochs=8, batch_size=64, validation_data={"x": xte, "y": yte})
        stats = est.evaluate({"x": xte, "y": yte}, batch_size=64)
        assert len(set(est.worker_weight_digests())) == 1
        plain = predict_plain(est.get_model(), xte)
    finally:
        est.shutdown()
    assert stats["val_accuracy"] > 0.9
    assert hist[-1]["val_accuracy"] == pytest.approx(stats["val_accuracy"])
    # the metric is exact over all workers: equal to the single-process accuracy
    assert stats["val_accuracy"] == pytest.approx(float((plain.argmax(1) == yte).mean()))
    assert stats["num_samples"] == len(yte)
    assert hist.history["train_loss"][-1] < hist.history["train_loss"][0]


@pytest.fixture(scope="module")
def reg(orca_context):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(120, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -1.0, 2.0, 0.5], np.float32)).astype(np.float32)
    return x, y


def fit_linear(backend, data, **kw):
    torch.manual_seed(0)
    est = Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), metrics=["mse"],
                               backend=backend, workers_per_node=2)
    hist = est.fit(data, epochs=4, batch_size=16, **kw)
    return est, hist


def assert_learned(est, hist, x, n):
    assert hist[-1]["num_samples"] == n
    assert hist.history["train_loss"][-1] < 0.1 * hist.history["train_loss"][0]
    assert len(set(est.worker_weight_digests())) == 1


@pytest.mark.parametrize("partitions", [1, 3, 5])
def test_dataframe_with_any_partition_count_trains_on_two_workers(spark, reg, backend, partitions):
    x, y = reg
    df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(partitions)
    est, hist = fit_linear(backend, df, feature_cols=["x"], label_cols=["y"])
    try:
        assert_learned(est, hist, x, len(x))
    finally:
        est.shutdown()


def test_dataframe_with_empty_partitions_trains(spark, reg, backend):
    x, y = reg
    pdf = pd.DataFrame({"x": list(x), "y": y, "k": np.zeros(len(y), int)})
    df = spark.createDataFrame(pdf).repartition(4, "k")  # every row in one partition, three empty
    est, hist = fit_linear(backend, df.select("x", "y"), feature_cols=["x"], label_cols=["y"])
    try:
        assert_learned(est, hist, x, len(x))
    finally:
        est.shutdown()


def test_ml_vector_column_and_validation_dataframe(spark, reg, backend):
    from pyspark.ml.linalg import Vectors

    x, y = reg
    df = spark.createDataFrame([(Vectors.dense(r.tolist()), float(t)) for r, t in zip(x, y, strict=True)],
                               ["features", "label"])
    train, val = df.randomSplit([0.8, 0.2], seed=1)
    est, hist = fit_linear(backend, train, feature_cols=["features"], label_cols=["label"], validation_data=val)
    try:
        assert "val_loss" in hist[-1] and "val_mse" in hist[-1]
        assert hist[-1]["val_loss"] == pytest.approx(hist[-1]["val_mse"], rel=1e-4)
        assert hist[-1]["val_loss"] < 0.5
    finally:
        est.shutdown()


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, a, b):
        return self.fc(torch.cat([a, b], dim=1))


def test_several_feature_columns_become_several_model_inputs(spark, reg, backend):
    x, y = reg
    df = spark.createDataFrame(pd.DataFrame({"a": list(x[:, :2]), "b": list(x[:, 2:]), "y": y}))
    torch.manual_seed(0)
    est = Estimator.from_torch(model=TwoInputs(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    try:
        hist = est.fit(df, epochs=4, batch_size=16, feature_cols=["a", "b"], label_cols=["y"])
        assert hist.history["train_loss"][-1] < 0.1 * hist.history["train_loss"][0]
        out = est.predict(df, feature_cols=["a", "b"]).toPandas()
        model = est.get_model()
        with torch.no_grad():
            want = model(torch.from_numpy(np.stack(out["a"].to_numpy()).astype(np.float32)),
                         torch.from_numpy(np.stack(out["b"].to_numpy()).astype(np.float32))).numpy()[:, 0]
        np.testing.assert_allclose(np.stack(out["prediction"].to_numpy())[:, 0], want, atol=1e-5)
    finally:
        est.shutdown()


def test_xshards_of_dicts_and_of_pandas_train_and_predict(spark, reg, backend):
    x, y = reg
    dict_shards = XShards.partition({"x": x, "y": y}, num_shards=3)
    est, hist = fit_linear(backend, dict_shards)
    try:
        assert_learned(est, hist, x, len(x))
        pred = est.predict(XShards.partition({"x": x}, num_shards=3))
        got = np.concatenate([s["prediction"] for s in pred.collect()])
        np.testing.assert_allclose(got, predict_plain(est.get_model(), x), atol=1e-5)
        frames = XShards.partition({"x": x, "y": y}, num_shards=2).transform_shard(
            lambda s: pd.DataFrame({"x": list(s["x"]), "y": s["y"]}))
        hist2 = est.fit(frames, epochs=1, batch_size=16, feature_cols=["x"], label_cols=["y"])
        assert hist2[-1]["num_samples"] == len(x)
        out = pd.concat(est.predict(frames, feature_cols=["x"]).collect())
        np.testing.assert_allclose(out["prediction"].to_numpy(), predict_plain(est.get_model(), x)[:, 0], atol=1e-5)
    finally:
        est.shutdown()


def test_data_creator_and_dataloader_instance(orca_context, reg, backend):
    from torch.utils.data import DataLoader, TensorDataset

    x, y = reg
    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y[:, None]))

    def creator(config, batch_size):
        return DataLoader(ds, batch_size=batch_size, shuffle=True)

    est, hist = fit_linear(backend, creator)
    try:
        assert hist[-1]["num_samples"] == len(x)
        assert hist.history["train_loss"][-1] < 0.1 * hist.history["train_loss"][0]
        hist2 = est.fit(DataLoader(ds, batch_size=16, shuffle=True), epochs=1)
        assert hist2[-1]["num_samples"] == len(x)
        assert est.evaluate(creator, batch_size=16)["num_samples"] == len(x)
    finally:
        est.shutdown()


def test_ray_dataset_input(orca_context, reg):
    import ray

    orca_context.ray_runtime()
    x, y = reg
    ds = ray.data.from_items([{"x": r, "y": float(t)} for r, t in zip(x, y, strict=True)])
    est, hist = fit_linear("ray", ds, feature_cols=["x"], label_cols=["y"])
    try:
        assert_learned(est, hist, x, len(x))
    finally:
        est.shutdown()


def test_native_loader_with_rows_no_worker_count_divides_equals_one_process(orca_context, all_backends):
    """41 rows, 2 workers, 4 rows per worker step: rank 0 reads 21 rows (6 batches), rank 1 20
    (5 batches). The last step is rank 0's single row alone: no row padded or repeated, and the
    weights equal a single-process run over the same global batches to 1e-6."""
    from torch.utils.data import DataLoader, TensorDataset

    rng = np.random.default_rng(3)
    x = rng.normal(size=(41, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3)[:, None].astype(np.float32)
    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    def model_creator(config):
        torch.manual_seed(7)
        return nn.Linear(3, 1)

    def creator(config, batch_size):
        return DataLoader(ds, batch_size=batch_size, shuffle=False)

    est = Estimator.from_torch(model=model_creator, optimizer=sgd(0.1), loss=nn.MSELoss(), backend=all_backends,
                               workers_per_node=2)
    try:
        hist = est.fit(creator, epochs=2, batch_size=8)
        got = [p.detach().numpy() for p in est.get_model().parameters()]
    finally:
        est.shutdown()
    assert [h["num_samples"] for h in hist] == [41, 41]

    ref = model_creator({})
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    shares = [np.arange(41)[r::2] for r in range(2)]
    steps = [np.concatenate([s[i * 4:(i + 1) * 4] for s in shares]) for i in range(6)]
    assert sorted(np.concatenate(steps).tolist()) == list(range(41))
    for _ in range(2):
        for rows in steps:
            opt.zero_grad()
            nn.MSELoss()(ref(torch.from_numpy(x[rows])), torch.from_numpy(y[rows])).backward()
            opt.step()
    for g, w in zip(got, ref.parameters(), strict=True):
        np.testing.assert_allclose(g, w.detach().numpy(), atol=1e-6)


class ConvLinear(nn.Module):
    """Several tensors of several shapes (conv kernel and bias, linear weight and bias): the flat
    gradient's packing order must be the same on every rank and match the parameters'."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.conv = nn.Conv1d(1, 3, kernel_size=3)
        self.fc = nn.Linear(3 * 4, 2)
        self.out = nn.Linear(2, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(torch.tanh(self.conv(x.unsqueeze(1))).flatten(1))))


def _two_worker_state(model_cls, x, y, backend):
    """The state_dict after 2 epochs of SGD (lr 0.1, global batch 8, no shuffle) on 2 workers."""
    est = Estimator.from_torch(model=lambda config: model_cls(), optimizer=sgd(0.1), loss=nn.MSELoss(),
                               backend=backend, workers_per_node=2)
    try:
        est.fit({"x": x, "y": y}, epochs=2, batch_size=8, shuffle=False)
        return est.get_model().state_dict()
    finally:
        est.shutdown()


def test_multi_tensor_model_sgd_equals_single_process_on_the_same_global_batches(orca_context, all_backends):
    rng = np.random.default_rng(12)
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.normal(size=(16, 1)).astype(np.float32)
    got = _two_worker_state(ConvLinear, x, y, all_backends)
    # worker 0 holds rows 0-7 and worker 1 rows 8-15; step s takes 4 rows from each
    ref = ConvLinear()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for rows in [[*range(0, 4), *range(8, 12)], [*range(4, 8), *range(12, 16)]] * 2:
        opt.zero_grad()
        nn.MSELoss()(ref(torch.from_numpy(x[rows])), torch.from_numpy(y[rows])).backward()
        opt.step()
    for name, want in ref.state_dict().items():
        np.testing.assert_allclose(got[name].numpy(), want.numpy(), atol=1e-6, err_msg=name)


class ConvBatchNorm(nn.Module):
    """Conv, BatchNorm (weight, bias and the running_mean/running_var/num_batches_tracked buffers)
    and a linear head: parameters and buffers in one model."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.conv = nn.Conv1d(1, 2, kernel_size=3)
        self.bn = nn.BatchNorm1d(2)
        self.out = nn.Linear(2 * 4, 1)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.conv(x.unsqueeze(1)))).flatten(1))


def test_batchnorm_model_equals_replicas_that_average_gradients_and_running_statistics(orca_context, all_backends):
    """BatchNorm is not synchronised within a step (as in DDP without SyncBatchNorm): each worker
    normalises with its own rows' statistics and updates its own running statistics; gradients
    are averaged every step and the running statistics at each epoch's end. Two replicas doing
    exactly that in one process end with every parameter and buffer the Estimator returns."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=(16, 6)).astype(np.float32) * 2 + 1
    y = rng.normal(size=(16, 1)).astype(np.float32)
    got = _two_worker_state(ConvBatchNorm, x, y, all_backends)
    replicas = [ConvBatchNorm(), ConvBatchNorm()]
    opts = [torch.optim.SGD(r.parameters(), lr=0.1) for r in replicas]
    shares = [list(range(0, 8)), list(range(8, 16))]  # worker r holds rows 8r..8r+7, 4 per step
    for _ in range(2):
        for step in range(2):
            grads = []
            for replica, opt, share in zip(replicas, opts, shares, strict=True):
                rows = share[step * 4:(step + 1) * 4]
                opt.zero_grad()
                nn.MSELoss()(replica(torch.from_numpy(x[rows])), torch.from_numpy(y[rows])).backward()
                grads.append([p.grad.clone() for p in replica.parameters()])
            for replica, opt in zip(replicas, opts, strict=True):
                for p, g0, g1 in zip(replica.parameters(), *grads, strict=True):
                    p.grad = (g0 + g1) / 2
                opt.step()
        with torch.no_grad():  # epoch end: running statistics averaged over the workers
            for b0, b1 in zip(replicas[0].buffers(), replicas[1].buffers(), strict=True):
                if b0.is_floating_point():
                    b0.copy_((b0 + b1) / 2)
                    b1.copy_(b0)
    want = replicas[0].state_dict()
    assert set(got) == set(want) and "bn.running_var" in got
    assert not np.allclose(want["bn.running_mean"].numpy(), 0)  # the statistics moved: the check has teeth
    for name, value in want.items():
        np.testing.assert_allclose(got[name].numpy(), value.numpy(), atol=1e-5, err_msg=name)


class TwoBuckets(nn.Module):
    """1.1 MB of parameters: with DDP's 1 MB first bucket, the gradient goes in two buckets (the
    last two layers, then the first), each all-reduced from the backward's hooks."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.a = nn.Linear(3, 256)
        self.b = nn.Linear(256, 1024)
        self.c = nn.Linear(1024, 1)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def test_bucketed_allreduce_from_backward_hooks_is_the_global_batch_gradient(orca_context, backend):
    from orca.torch.runner import _Buckets

    model = TwoBuckets()
    params = list(model.parameters())
    buckets = _Buckets(torch.zeros(sum(p.numel() for p in params)), params, lambda t: t)
    assert [s.numel() for s in buckets.slices] == [1 + 1024 + 1024 + 256 * 1024, 256 + 3 * 256]
    rng = np.random.default_rng(3)
    x = rng.normal(size=(11, 3)).astype(np.float32)
    y = rng.normal(size=(11, 1)).astype(np.float32)

    def trained(xs, ys, epochs):
        est = Estimator.from_torch(model=lambda config: TwoBuckets(), optimizer=sgd(0.05), loss=nn.MSELoss(),
                                   backend=backend, workers_per_node=2)
        try:
            hist = est.fit({"x": xs, "y": ys}, epochs=epochs, batch_size=16, shuffle=False)
            return est.get_model().state_dict(), hist
        finally:
            est.shutdown()

    def full_batch_gd(xs, ys, steps):
        ref = TwoBuckets()
        opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        for _ in range(steps):
            opt.zero_grad()
            nn.MSELoss()(ref(torch.from_numpy(xs)), torch.from_numpy(ys)).backward()
            opt.step()
        return ref.state_dict()

    # 11 rows on 2 workers, a global batch past them: each epoch one step of every row, the two
    # buckets started from each worker's hooks; then 1 row: worker 1 has none, runs no backward
    # and starts both buckets after it, in the same order as worker 0's hooks did
    for xs, ys, epochs in ((x, y, 3), (x[:1], y[:1], 2)):
        got, hist = trained(xs, ys, epochs)
        assert [h["num_samples"] for h in hist] == [len(xs)] * epochs
        for name, want in full_batch_gd(xs, ys, epochs).items():
            np.testing.assert_allclose(got[name].numpy(), want.numpy(), atol=1e-6, err_msg=name)


def test_buckets_start_in_bucket_order_whatever_order_the_backward_fills_them():
    from orca.torch.runner import _Buckets

    params = [torch.zeros(n) for n in (300_000, 10, 300_000, 10)]  # 1.2 MB, 40 B, 1.2 MB, 40 B
    flat = torch.zeros(sum(p.numel() for p in params))
    started = []
    buckets = _Buckets(flat, params, lambda t: started.append((t.data_ptr() - flat.data_ptr()) // 4, ) or _Done())
    assert [s.numel() for s in buckets.slices] == [300_010, 300_010]  # last two params, then the first two
    buckets.ready(params[0])  # the first bucket's params are not all ready: nothing starts
    buckets.ready(params[1])
    assert started == []  # bucket 1 is complete, but bucket 0 must start first
    buckets.ready(params[3])
    assert started == []
    buckets.ready(params[2])
    assert started == [300_010, 0]  # bucket 0 (the tail of the buffer), then bucket 1
    buckets.finish()
    assert started == [300_010, 0]  # nothing starts twice
    buckets.ready(params[3])  # the next step: a rank that uses only the last params
    buckets.finish()  # starts bucket 0 (params 2 and 3 are part of it) and bucket 1, in order
    assert started[2:] == [300_010, 0]


class _Done:
    def wait(self):
        return None
