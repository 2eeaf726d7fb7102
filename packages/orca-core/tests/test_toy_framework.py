"""A whole framework written only against :mod:`orca.core.plugin`: a numpy linear model.

It passes the same conformance suite as orca-torch, orca-tf and orca-mxnet, on both launchers:
proof that adding a framework to Orca is a runner, an Estimator that declares its backends,
and this test module.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import cloudpickle
import numpy as np
import pytest

from orca.core.plugin import (
    Backend,
    BaseEstimator,
    Batch,
    NotFittedError,
    OrcaWorkerError,
    Rendezvous,
    Runner,
    declare,
    pack,
    unpack,
)
from orca.core.testing.bad_inputs import BadInputConformance
from orca.core.testing.conformance import (
    NUM_FEATURES,
    PARTITION_LAYOUTS,
    TRUE_W,
    EstimatorConformance,
    frame_with_layout,
    regression_arrays,
)
from orca.core.testing.spill import SpillProbe

# ---------------------------------------------------------------- the framework (what a plug-in writes)


class NumpyLinearRunner(Runner):
    """``y = x @ w + b`` with plain SGD on the mean squared error."""

    can_skip_steps = True
    reuses_process = True

    def setup(self, rendezvous: Rendezvous) -> None:
        super().setup(rendezvous)  # seeds numpy, joins the sync group
        self.w = np.random.normal(scale=0.1, size=NUM_FEATURES)
        self.b = np.zeros(1)
        self.w, self.b = self.broadcast_arrays([self.w, self.b])
        self.lr = float(self.config.get("lr", 0.05))

    def _predict(self, x: np.ndarray | list[np.ndarray]) -> np.ndarray:
        if isinstance(x, list):  # one input per column (read_csv's columns): the row is the columns side by side
            x = x[0] if len(x) == 1 else np.stack(x, axis=1)
        if x.ndim != 2 or x.shape[1] != NUM_FEATURES:
            raise ValueError(f"the model takes rows of {NUM_FEATURES} features, got shape {x.shape}.")
        return x.astype(np.float64) @ self.w + self.b[0]

    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        grad_w, grad_b, loss = np.zeros_like(self.w), np.zeros(1), 0.0
        if batch.size:
            x, y = batch.x[0] if len(batch.x) == 1 else np.stack(batch.x, axis=1), batch.y[0].reshape(-1)
            err = self._predict(x) - y
            loss = float(np.mean(err ** 2))
            grad_w = 2 * x.T @ err / batch.size * batch.weight  # weighted: the mean is the global batch's
            grad_b = np.array([2 * err.mean() * batch.weight])
        reduced = self.allreduce_mean_(pack([grad_w, grad_b]))
        if skip_non_finite and not np.isfinite(reduced).all():
            return None  # the same on every rank: every rank skips
        grad_w, grad_b = unpack(reduced, [grad_w, grad_b])
        self.w -= self.lr * grad_w
        self.b -= self.lr * grad_b
        return loss

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        pred = self._predict(batch.x)
        return float(np.mean((pred - batch.y[0].reshape(-1)) ** 2)), [pred.reshape(-1, 1)]

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        return [self._predict(batch.x).reshape(-1, 1).astype(np.float32)]

    def optimizer_params(self) -> dict[str, Any]:
        return {"optimizer": "GradientDescent", "lr": self.lr, "schedule": None}  # (None: not a run parameter)

    def weights(self) -> list[np.ndarray]:
        return [self.w, self.b]

    def get_state(self) -> dict[str, Any]:
        return {"w": self.w.copy(), "b": self.b.copy()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.w, self.b = np.array(state["w"], np.float64), np.array(state["b"], np.float64)


class NumpyEstimator(BaseEstimator):
    """The toy framework's Estimator: its backends, and its file format."""

    backends = declare(Backend("ray", "ray", NumpyLinearRunner, "Ray actors"),
                       Backend("spark", "spark", NumpyLinearRunner, "Spark barrier tasks"))

    @classmethod
    def from_numpy(cls, lr: float = 0.05, backend: str = "spark", workers_per_node: int = 2) -> NumpyEstimator:
        return cls(spec={"config": {"lr": lr}, "seed": 0}, backend=backend, workers_per_node=workers_per_node,
                   use_tqdm=False)

    def get_model(self) -> dict[str, np.ndarray]:
        state = self.get_state()
        if state is None:
            raise NotFittedError("fit or load the model first.")
        return state

    def save(self, path: str) -> str:
        with open(path, "wb") as fh:  # np.savez would add ".npz" to a path without it
            np.savez(fh, **self.get_model())
        return path

    def load(self, path: str) -> None:
        with np.load(path, allow_pickle=False) as f:
            self.set_state({"w": f["w"], "b": f["b"]})


# ---------------------------------------------------------------- its test module


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module


class TestNumpyToyConformance(EstimatorConformance, BadInputConformance):
    atol = 1e-5
    overflowing_feature = (np.float64, 1e200)  # the toy model computes in float64
    supports_data_creator = False  # the toy runner reads no native loaders
    #: the suite's TensorBoard read-back on the spark launcher; the ray one is
    #: test_tensorboard_summaries_are_each_epochs_merged_stats_for_any_framework below (CI time)
    tensorboard_backends = ("spark",)

    @pytest.fixture(scope="class", params=["ray", "spark"])
    @classmethod
    def backend(cls, request: Any) -> str:
        return request.param

    #: the suite's partition matrix runs here as test_any_partition_layout_trains_and_predicts_exactly_as_one_process
    #: below: exact against hand-computed gradient descent, on DataFrames and XShards (not twice, CI time)
    test_any_partition_layout_trains_the_same_model_and_predicts_every_row = None
    #: and the share-on-disk test as test_a_share_over_worker_data_memory_mb_trains_from_disk_with_the_in_memory_weights
    #: (which also sees each rank's files, and trains with the window shuffle)
    test_a_share_on_disk_gives_the_in_memory_model_and_predictions = None

    def make_estimator(self, backend: str) -> NumpyEstimator:
        return NumpyEstimator.from_numpy(backend=backend)

    def single_process_predict(self, est: NumpyEstimator, x: np.ndarray) -> np.ndarray:
        model = est.get_model()
        return (np.asarray(x, np.float64) @ model["w"] + model["b"][0]).reshape(-1, 1)


@pytest.mark.timeout(120)
def test_a_ray_dataset_of_many_small_blocks_trains_and_predicts_in_order(ray_runtime: Any) -> None:
    """64 one-row blocks (``from_items``' default): the rows reach the actors in a few parts (a
    conversion task per block started a Ray worker process each, a minute per call on two cores),
    in order: the fit equals one on the arrays, and the predictions are the rows' own."""
    import ray

    from orca.core.engine.sources import RayDatasetSource

    rng = np.random.default_rng(5)
    x = rng.normal(size=(64, 4))  # the toy model takes 4 features
    y = x @ np.array([0.5, -1.0, 2.0, 1.5]) + 0.25
    ds = ray.data.from_items([{"x": r, "y": float(t)} for r, t in zip(x, y, strict=True)]).materialize()
    assert ds.num_blocks() == 64
    refs = RayDatasetSource(ds, ["x"], ["y"]).ray_refs(need_labels=True)
    assert len(refs) <= int(ray.cluster_resources()["CPU"]) and sum(n for _, n in refs) == 64
    np.testing.assert_array_equal(np.concatenate([ray.get(r)["x"][0] for r, _ in refs]), x)

    results = []
    for data, kw in ((ds, {"feature_cols": ["x"], "label_cols": ["y"]}), ({"x": x, "y": y[:, None]}, {})):
        est = NumpyEstimator.from_numpy(backend="ray")
        try:
            est.fit(data, epochs=2, batch_size=16, shuffle=False, **kw)
            pred = est.predict(ds, feature_cols=["x"], batch_size=16)
            results.append(est.get_model()["w"])
        finally:
            est.shutdown()
        model = est.get_model()  # a Ray Dataset's predictions come back as an array, in row order
        np.testing.assert_allclose(np.asarray(pred).reshape(-1), (x @ model["w"] + model["b"][0]).reshape(-1),
                                   atol=1e-9)
    np.testing.assert_allclose(results[0], results[1], atol=1e-12)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["ray", "spark"])
def test_any_partition_layout_trains_and_predicts_exactly_as_one_process(spark: Any, backend: str) -> None:
    """101 rows in every layout of PARTITION_LAYOUTS, as a Spark DataFrame and as an XShards: full-batch
    gradient descent (batch_size = all rows) does not depend on which worker holds which row, so
    3 epochs end at the weights of 3 full-batch steps computed here, to 1e-12, and every row is
    predicted once, in order. No layout hangs, drops or repeats a row. (Partitions reach workers
    through the engine, the same for every framework: the toy runner stands for all of them.)"""
    from orca.core.data import XShards

    rng = np.random.default_rng(11)
    x = rng.normal(size=(101, NUM_FEATURES)).astype(np.float32).astype(np.float64)  # exact in the float32 frame
    y = (x @ np.array([1.0, -0.5, 2.0, 0.25]) + 0.5).astype(np.float32).astype(np.float64)
    est = NumpyEstimator.from_numpy(lr=0.1, backend=backend)
    try:
        for name, sizes in PARTITION_LAYOUTS.items():
            bounds = np.cumsum([0, *sizes])
            parts = list(zip(bounds[:-1], bounds[1:], strict=True))
            df = frame_with_layout(spark, x, y, sizes)
            shards = XShards.from_list([{"x": x[a:b], "y": y[a:b, None]} for a, b in parts], backend=backend)
            for label, data, kw in (("DataFrame", df, {"feature_cols": ["x"], "label_cols": ["y"]}),
                                    ("XShards", shards, {})):
                est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
                hist = est.fit(data, epochs=3, batch_size=101, shuffle=False, **kw)
                assert [h["num_samples"] for h in hist] == [101] * 3, (name, label)
                w, b = np.zeros(NUM_FEATURES), 0.0
                for _ in range(3):  # full-batch gradient descent on the mean squared error, by hand
                    err = x @ w + b - y
                    w, b = w - 0.1 * 2 * x.T @ err / 101, b - 0.1 * 2 * err.mean()
                got = est.get_model()
                np.testing.assert_allclose(got["w"], w, atol=1e-12, err_msg=f"{name} {label}")
                np.testing.assert_allclose(got["b"], [b], atol=1e-12, err_msg=f"{name} {label}")
            pred = est.predict(df, feature_cols=["x"]).toPandas().sort_values("id")
            assert len(pred) == 101 and pred["id"].tolist() == list(range(101)), name
            np.testing.assert_allclose(np.stack(pred["prediction"].to_numpy()).reshape(-1), x @ w + b, atol=1e-5)
            out = est.predict(shards)
            got_rows = np.concatenate([np.asarray(s["prediction"]).reshape(-1) for s in out.collect()])
            np.testing.assert_allclose(got_rows, x @ w + b, atol=1e-5, err_msg=name)
    finally:
        est.shutdown()


@pytest.mark.timeout(120)
def test_fit_listeners_get_each_epochs_merged_stats_live_and_cannot_break_the_fit(ray_runtime: Any) -> None:
    """A driver-side listener (what TensorBoard and MLflow tracking are built on) sees the fit's
    begin and end and rank 0's events between, in order, each epoch's the History's own entry; a
    listener that raises is logged, the fit goes on."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, NUM_FEATURES))
    y = x @ np.array([1.0, -0.5, 2.0, 0.25])
    est = NumpyEstimator.from_numpy(backend="ray")
    events: list[dict[str, Any]] = []

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("a listener bug")

    est.use_tqdm = False  # listeners alone turn rank 0's reports on
    est.fit_listeners += [events.append, broken]
    try:
        hist = est.fit({"x": x, "y": y[:, None]}, epochs=3, batch_size=8, validation_data={"x": x, "y": y[:, None]})
    finally:
        est.shutdown()
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["fit_begin", "begin"] and kinds[-1] == "fit_end" and kinds.count("epoch") == 3
    assert events[0]["params"]["epochs"] == 3 and events[-1]["history"] == [dict(h) for h in hist]
    assert sum(e.get("n", 0) for e in events if e["event"] == "step") == 3 * 5  # every step of 40 rows / 8
    epochs = [{k: v for k, v in e.items() if k != "event"} for e in events if e["event"] == "epoch"]
    for got, want in zip(epochs, hist, strict=True):
        assert got["epoch"] == want["epoch"] and got["loss"] == want["loss"] and got["val_loss"] == want["val_loss"]


@pytest.mark.timeout(120)
def test_tensorboard_summaries_are_each_epochs_merged_stats_for_any_framework(ray_runtime: Any, tmp_path: Any) -> None:
    """set_tensorboard (the reference's, on BaseEstimator: every framework has it) writes one point
    per epoch at its last iteration, continuing over fits; TensorBoard's reader gives back the
    History's merged train and validation losses."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, NUM_FEATURES))
    data = {"x": x, "y": (x @ np.array([1.0, -0.5, 2.0, 0.25]))[:, None]}
    est = NumpyEstimator.from_numpy(backend="ray")
    with pytest.raises(ValueError, match="set_tensorboard"):
        est.get_train_summary("Loss")
    with pytest.raises(TypeError, match="takes strings"):
        est.set_tensorboard(str(tmp_path), "")
    est.set_tensorboard(str(tmp_path / "logs"), "toy")
    try:
        hist = est.fit(data, epochs=2, batch_size=8, validation_data=data)
        hist2 = est.fit(data, epochs=1, batch_size=20, validation_data=data)
    finally:
        est.shutdown()
    loss, val = est.get_train_summary("Loss"), est.get_validation_summary("Loss")
    np.testing.assert_array_equal(loss[:, 0], [5, 10, 12])  # 40 rows: 5 steps of 8, then 2 of 20
    np.testing.assert_allclose(loss[:, 1], [h["loss"] for h in [*hist, *hist2]], rtol=1e-6)
    np.testing.assert_allclose(val[:, 1], [h["val_loss"] for h in [*hist, *hist2]], rtol=1e-6)
    assert (est.get_train_summary("Throughput")[:, 1] > 0).all() and len(est.get_train_summary("nothing")) == 0


OUTLIVES_DRIVER = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from orca.core import OrcaContext, init_orca_context, stop_orca_context
from test_toy_framework import NUM_FEATURES, NumpyEstimator

init_orca_context(cluster_mode="local", cores=2, runtime="ray")
x = np.random.default_rng(0).normal(size=(16, NUM_FEATURES))
est = NumpyEstimator.from_numpy(backend="ray")
est.fit({{"x": x, "y": x.sum(1, keepdims=True)}}, epochs=2, batch_size=8)
before = np.asarray(est.predict(x, batch_size=8))
out = {{}}
est.shutdown()
out["after_shutdown"] = bool(np.array_equal(np.asarray(est.predict(x, batch_size=8)), before))
stop_orca_context()
stop_orca_context()  # a second stop does nothing
out["after_stop"] = bool(np.array_equal(np.asarray(est.predict(x, batch_size=8)), before))
out["new_context"] = OrcaContext.active() is not None
out["next_epoch"] = est.fit({{"x": x, "y": x.sum(1, keepdims=True)}}, epochs=1, batch_size=8)[-1]["epoch"]
est.shutdown()
stop_orca_context()
est.shutdown()  # its context is gone: nothing to stop, nothing started
out["context_after"] = OrcaContext.active() is not None
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_an_estimator_outlives_its_workers_and_its_context() -> None:
    """After shutdown, and after its OrcaContext was stopped (twice), the Estimator predicts as
    before and trains on from its next epoch: its state is the driver's, and new workers start in
    the current context instead of waiting on the dead ones (which failed after 30 s with Ray's
    "Can't find actor")."""
    import os

    from orca.core.testing.clusters import run_python

    out = run_python(OUTLIVES_DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__))), timeout_s=240)
    assert out == {"after_shutdown": True, "after_stop": True, "new_context": True, "next_epoch": 3,
                   "context_after": False}


class _NoSkipRunner(NumpyLinearRunner):
    can_skip_steps = False


class _NoSkipEstimator(NumpyEstimator):
    backends = declare(Backend("spark", "spark", _NoSkipRunner, "Spark barrier tasks"))


@pytest.mark.timeout(60)
def test_skipping_steps_is_refused_on_the_driver_where_the_runner_cannot(orca_context: Any) -> None:
    """A framework whose runner does not implement skipping is told so before any worker starts,
    and a non-bool flag is refused too."""
    est = _NoSkipEstimator.from_numpy(backend="spark")
    x, y = regression_arrays()
    try:
        with pytest.raises(ValueError, match=r"_NoSkipEstimator on the 'spark' backend cannot skip non-finite"):
            est.fit({"x": x, "y": y}, batch_size=8, skip_non_finite_steps=True)
        with pytest.raises(TypeError, match="skip_non_finite_steps must be True or False"):
            NumpyEstimator.from_numpy().fit({"x": x, "y": y}, batch_size=8, skip_non_finite_steps="yes")
        assert est._group is None  # nothing was started
    finally:
        est.shutdown()


class _RefusedRunner(NumpyLinearRunner):
    """Rank 0 fails as a framework's process group fails on a peer's refused address; rank 1 joins
    the sync group and waits there for rank 0, retrying its refused connection."""

    def setup(self, rendezvous: Rendezvous) -> None:
        if rendezvous.rank == 0:
            raise RuntimeError("Gloo connectFullMesh failed: Connection refused, remote=[127.0.1.1]:29500")
        super().setup(rendezvous)


class _RefusedEstimator(NumpyEstimator):
    backends = declare(Backend("ray", "ray", _RefusedRunner, "Ray actors"),
                       Backend("spark", "spark", _RefusedRunner, "Spark barrier tasks"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_a_rank_that_fails_to_connect_fails_the_fit_at_once_while_its_peer_still_waits(
        orca_context: Any, ray_runtime: Any, backend: str) -> None:
    """The fit ends seconds after rank 0's failure, with rank 0's error and what to check, though
    rank 1 still waits for rank 0 (a Spark barrier stage's results come back only when every task
    ended: rank 0 tells the driver ahead of its result, and the driver stops the stage)."""
    est = _RefusedEstimator.from_numpy(backend=backend)
    x, y = regression_arrays(32)
    t0 = time.monotonic()
    try:
        with pytest.raises(OrcaWorkerError, match=r"Orca worker 0 .*failed during (fit|setup): RuntimeError: Gloo "
                                                  r"connectFullMesh failed.*127\.0\.1\.1") as info:
            est.fit({"x": x, "y": y}, epochs=1, batch_size=8)
    finally:
        est.shutdown()
    assert info.value.rank == 0
    assert "SPARK_LOCAL_IP" in str(info.value) and "driver_host=" in str(info.value)  # what to check
    assert time.monotonic() - t0 < 60  # not the start-up timeout (300 s) nor the worker timeout (180 s)


@pytest.mark.timeout(120)
def test_a_dropped_estimator_gives_its_ray_cpus_back_and_a_held_one_is_named(ray_runtime: Any,
                                                                             monkeypatch: Any) -> None:
    """Ray has 2 CPUs here and each Estimator's 2 workers take both. While one Estimator holds them,
    another's fit fails on the driver saying so (after a short wait), and the holder is listed by
    ``live_worker_groups`` (what the test plugin uses to fail a module that leaves workers up). An
    Estimator the user dropped while it sat in a reference cycle gives its CPUs back without a
    shutdown: the driver collects garbage before it gives up."""
    from orca.core.engine import ray_backend
    from orca.core.engine.ray_backend import live_worker_groups

    monkeypatch.setattr(ray_backend, "FREE_CPUS_WAIT_S", 1.0)  # the failing launch waits 1 s, not 10 (CI time)
    x, y = regression_arrays()
    holder = NumpyEstimator.from_numpy(backend="ray")
    other = NumpyEstimator.from_numpy(backend="ray")
    try:
        holder.fit({"x": x, "y": y}, epochs=1, batch_size=8)
        assert [g for g in live_worker_groups() if g is holder._group] == [holder._group]
        with pytest.raises(RuntimeError, match=r"Ray has 0 free CPUs but 2 workers need 2.*Call shutdown\(\)"):
            other.fit({"x": x, "y": y}, epochs=1, batch_size=8)
        holder.cycle = holder  # a reference cycle: only the garbage collector frees it
        del holder
        hist = other.fit({"x": x, "y": y}, epochs=1, batch_size=8)
        assert hist[-1]["num_samples"] == len(x)
        assert [g for g in live_worker_groups() if g is not other._group] == []
    finally:
        other.shutdown()
    assert other._group not in live_worker_groups()


def _pids(est: NumpyEstimator) -> list[int]:
    import os

    return sorted(est._group.call(lambda runner: os.getpid()))


@pytest.mark.timeout(180)
def test_a_shut_down_estimators_ray_workers_serve_the_next_one_warm_and_train_as_fresh_ones(
        orca_context: Any, ray_runtime: Any, monkeypatch: Any) -> None:
    """``est.shutdown()`` parks its actors (``warm_workers_s``): the next Estimator of the same kind
    runs in the same processes and trains exactly as the first did from the same seed (nothing of
    the first model or its sync group stays); an Estimator of another size ends them and starts its
    own; the time limit, ``release_warm_workers()`` and ``warm_workers_s=0`` end them too."""
    import ray

    from orca.core import release_warm_workers
    from orca.core.engine import ray_backend

    x, y = regression_arrays()
    data = {"x": x, "y": y}

    def fit(est: NumpyEstimator) -> tuple[list[int], dict[str, np.ndarray]]:
        est.fit(data, epochs=2, batch_size=8)
        return _pids(est), est.get_model()

    def cpus_free() -> float:
        return float(ray.available_resources().get("CPU", 0.0))

    first, second, third = (NumpyEstimator.from_numpy(backend="ray") for _ in range(3))
    try:
        pids, want = fit(first)
        first.shutdown()
        assert cpus_free() == 0  # parked: still holding their CPUs
        assert fit(second)[0] == pids  # the same processes: no start, no import
        np.testing.assert_array_equal(second.get_model()["w"], want["w"])  # and the same SGD from the same seed
        np.testing.assert_array_equal(second.get_model()["b"], want["b"])
        second.shutdown()
        one = NumpyEstimator.from_numpy(backend="ray", workers_per_node=1)  # another kind: 1 worker
        try:
            got, _ = fit(one)
            assert len(got) == 1 and not set(got) & set(pids)
        finally:
            one.shutdown()
        assert release_warm_workers() == 1 and release_warm_workers() == 0
        deadline = time.monotonic() + 20
        while cpus_free() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cpus_free() == 2  # the released actor is gone

        monkeypatch.setattr(orca_context.settings, "warm_workers_s", 1.0)
        pids, _ = fit(third)
        third.shutdown()
        deadline = time.monotonic() + 20
        while cpus_free() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cpus_free() == 2 and ray_backend.release_parked() == 0  # the timer ended them

        monkeypatch.setattr(orca_context.settings, "warm_workers_s", 0.0)
        pids, _ = fit(first)
        first.shutdown()
        assert ray_backend.release_parked() == 0  # nothing parked: they ended at shutdown
    finally:
        for est in (first, second, third):
            est.shutdown()
        release_warm_workers()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_a_share_over_worker_data_memory_mb_trains_from_disk_with_the_in_memory_weights(spark: Any, tmp_path: Any,
                                                                                      backend: str) -> None:
    """worker_data_memory_mb=0.01 (10 KB) against 2 x 2,000 rows (~50 KB of Arrow a worker): every
    rank's share goes to disk (seen during the fit: training and validation rows, 20 bytes a row,
    in Spark's local directory or the actor's temporary one),
    and without shuffling the fit ends at the in-memory fit's weights and validation loss, and
    evaluate gives its loss, to 1e-12; the folders are gone after. With the window shuffle it
    learns the true function. ``shuffle="full"`` from disk trains exactly as the in-memory exact
    shuffle, and ``shuffle="window"`` in memory exactly as the disk's window shuffle (to 1e-12)."""
    import glob
    import json
    import os

    from orca.core import OrcaContext
    from orca.core.engine.spill import spill_dir

    before_folders = set(glob.glob(os.path.join(spill_dir(), "orca-feed-*")))  # another process's are not ours
    x, y = regression_arrays(4000, seed=5)
    df = frame_with_layout(spark, x, y, [2000, 2000])
    kw = {"feature_cols": ["x"], "label_cols": ["y"]}
    est = NumpyEstimator.from_numpy(lr=0.05, backend=backend)

    def run(memory_mb: float, shuffle: bool | str, probe: str | None = None) -> tuple[Any, ...]:
        nonlocal est
        OrcaContext.worker_data_memory_mb = memory_mb
        if shuffle is not False:  # the shuffle follows the epoch number: each shuffled fit starts at epoch 1
            est.shutdown()
            est = NumpyEstimator.from_numpy(lr=0.05, backend=backend)
        est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
        hist = est.fit(df, epochs=2, batch_size=64, shuffle=shuffle, validation_data=df,
                       callbacks=[SpillProbe(probe)] if probe else None, **kw)
        return est.get_model(), hist[-1]["val_loss"], est.evaluate(df, batch_size=50, **kw)["val_loss"]

    try:
        mem, val_mem, eval_mem = run(2048, False)
        os.makedirs(tmp_path / "probe")
        m, val_disk, eval_disk = run(0.01, False, str(tmp_path / "probe"))
        for rank in (0, 1):
            found = json.loads((tmp_path / "probe" / f"rank{rank}.json").read_text())
            # its training and validation rows, each whole (the ranks share this machine's spill directory;
            # on Ray a rank may start training while the other still writes its share: more folders, maybe part-written)
            ours = {d: n for d, n in found.items() if d not in before_folders}
            assert len(ours) <= 4 and list(ours.values()).count(2000 * 20) >= 2, found
        np.testing.assert_allclose(m["w"], mem["w"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(m["b"], mem["b"], rtol=0, atol=1e-12)
        assert val_disk == pytest.approx(val_mem, rel=1e-12) and eval_disk == pytest.approx(eval_mem, rel=1e-12)
        m, _, eval_shuffled = run(0.01, True)
        np.testing.assert_allclose(m["w"], TRUE_W, atol=0.05)
        assert eval_shuffled < 0.01
        if backend == "spark":  # the modes live in the feeds, which both launchers share (CI time)
            # a 2,000-row share is one window of one chunk in both settings here: the window orders agree
            m_window, _, _ = run(2048, "window")
            for key in ("w", "b"):
                np.testing.assert_allclose(m_window[key], m[key], rtol=0, atol=1e-12)
            m_full_disk, _, _ = run(0.01, "full")
            m_full, _, _ = run(2048, True)
            for key in ("w", "b"):
                np.testing.assert_allclose(m_full_disk[key], m_full[key], rtol=0, atol=1e-12)
            assert not np.allclose(m_full["w"], m["w"], rtol=0, atol=1e-9)  # the two shuffles do differ
    finally:
        OrcaContext.worker_data_memory_mb = 2048.0
        est.shutdown()
    assert set(glob.glob(os.path.join(spill_dir(), "orca-feed-*"))) <= before_folders
