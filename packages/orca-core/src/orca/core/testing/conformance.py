"""The Estimator conformance suite every framework package runs against its own Estimator.

Subclass :class:`EstimatorConformance` in a test module (the subclass name must start
with ``Test``), provide a ``backend`` fixture and the hooks below, and set capability
flags; pytest collects every inherited test:

    class TestTorchConformance(EstimatorConformance):
        @pytest.fixture(scope="class", params=["ray", "spark"])
        @classmethod
        def backend(cls, request):
            return request.param

        def make_estimator(self, backend): ...
        def single_process_predict(self, est, x): ...

The task is a 4-input, 1-output linear regression, so every framework can state it and
its results are known: the loss falls towards zero and the learned model's predictions
can be recomputed in one process.

The ``backend`` fixture is class-scoped: one trained Estimator per backend serves every test
that only reads a trained one (``trained``); a test that needs a fresh Estimator gets it from
:meth:`EstimatorConformance.fresh`, which first stops the shared one's workers (one worker
group at a time on a 2-core machine; the shared one restarts from its driver-held state).

CI tier and full matrix (:mod:`orca.core.testing.matrix`): the launcher-level tests (a slow
fit, a stalled or killed worker, the partition layouts, non-finite losses) run on the backends
a package names in ``launcher_backends``/``partition_backends``; ``ORCA_FULL_MATRIX=1`` runs
them on every backend.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pyspark.errors import PythonException

from orca.core.engine.callbacks import Callback
from orca.core.engine.errors import OrcaWorkerError
from orca.core.testing.failures import KillOnce, kill_one_worker, worker_pids
from orca.core.testing.matrix import full_matrix, skip_unless_runs_on

NUM_FEATURES = 4
#: the worker_timeout_s of the liveness tests: short, so that slow steps span many of them
LIVENESS_TIMEOUT_S = 2.5
TRUE_W = np.array([1.5, -2.0, 0.5, 3.0], np.float32)
TRUE_B = 0.25


def regression_arrays(rows: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``x`` (rows, 4) float32 and ``y = x @ w + b`` (rows,) float32."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, NUM_FEATURES)).astype(np.float32)
    return x, (x @ TRUE_W + TRUE_B).astype(np.float32)


#: rows per partition for 2 workers: 1 (= N-1) partition, 3N+1, empty partitions, one worker's share
#: all empty, a 1:100 skew (N partitions of equal size is every other test's layout)
PARTITION_LAYOUTS: dict[str, list[int]] = {
    "one": [101], "3n+1": [15] * 6 + [11], "empty": [0, 60, 0, 0, 41, 0], "all_but_one_empty": [0, 0, 101, 0],
    "skew_1_100": [1, 100]}


def frame_with_layout(spark: Any, x: np.ndarray, y: np.ndarray, sizes: list[int]) -> Any:
    """A DataFrame ``id, x, y`` of ``x``/``y``'s rows in order whose partitions hold exactly ``sizes`` rows."""
    bounds = np.cumsum([0, *sizes])
    parts = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    xs, ys = x.tolist(), y.reshape(-1).tolist()
    rows = spark.sparkContext.parallelize(range(len(parts)), len(parts)).flatMap(
        lambda i: [(j, xs[j], float(ys[j])) for j in range(*parts[i])])
    df = spark.createDataFrame(rows, "id long, x array<float>, y float")
    assert df.rdd.glom().map(len).collect() == sizes
    return df


class SlowSteps(Callback):
    """Sleeps ``seconds`` after every training step: a slow worker that still makes progress."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        time.sleep(self.seconds)


class RaiseAt(Callback):
    """Rank ``rank`` raises :class:`UserCodeError` (user code failing in a worker) after step ``step``
    of the first epoch."""

    def __init__(self, rank: int, step: int) -> None:
        self.fail_rank, self.step = rank, step

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        if self.rank == self.fail_rank and step == self.step:
            raise UserCodeError(f"user code failed on rank {self.rank} after step {step}")


class UserCodeError(RuntimeError):
    """What :class:`RaiseAt` raises: a type no framework or engine raises by itself."""


class StallAt(Callback):
    """Rank ``rank`` stops making progress for good after step ``step`` of the first epoch."""

    def __init__(self, rank: int, step: int) -> None:
        self.stall_rank, self.step = rank, step

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        if self.rank == self.stall_rank and step == self.step:
            time.sleep(3600)


def _gone(pid: int, within_s: float) -> bool:
    """True once process ``pid`` has exited (or is a zombie) within ``within_s``."""
    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.25)
    return False


class EstimatorConformance:
    """Behaviours every Orca Estimator must have. See the module docstring."""

    #: capability flags
    supports_fit: bool = True
    supports_save: bool = True
    epochs: int = 8
    batch_size: int = 32
    #: predictions must match the single-process model within this
    atol: float = 1e-5
    #: the trained model's R^2 on held-out rows of the known linear function at least this
    min_heldout_r2: float = 0.99
    #: a fit restarted after a lost worker ends this close to an uninterrupted one
    recovery_atol: float = 1e-6
    #: backends that run the launcher-level tests (a slow fit, a stalled or killed worker, a
    #: non-finite loss); ``None``: all. A package may run them on one backend to keep CI within its
    #: time budget: the engine code under test is shared, and orca-core's toy framework runs them
    #: on every launcher (``ORCA_FULL_MATRIX=1`` runs them on every backend)
    launcher_backends: tuple[str, ...] | None = None
    #: backends that run the liveness and recovery tests (a slow fit, a stalled worker, a worker
    #: killed mid-fit), the costliest: ``None``: ``launcher_backends``
    liveness_backends: tuple[str, ...] | None = None
    #: backends that run the share-on-disk test (``None``: ``launcher_backends`` and
    #: ``partition_backends``): one per launcher where a package can afford it
    spill_backends: tuple[str, ...] | None = None
    #: backends that run the partition matrix (``None``: ``launcher_backends``); best on a launcher
    #: other than ``launcher_backends``'s, so that CI runs the package's runner on both launchers
    partition_backends: tuple[str, ...] | None = None
    #: ``(dtype, value)``: a finite feature whose squared error overflows the model's arithmetic
    #: (float32 frameworks: 3e38; a model computing in float64 needs a float64 1e200)
    overflowing_feature: tuple[Any, float] = (np.float32, 3e38)
    #: ``fit(skip_non_finite_steps=True)`` is supported
    supports_skipping_non_finite: bool = True
    #: backends that run the TensorBoard read-back test (driver-side, shared engine code: one is
    #: enough in CI); ``None``: ``launcher_backends``
    tensorboard_backends: tuple[str, ...] | None = None

    # ------------------------------------------------------------ hooks
    def make_estimator(self, backend: str) -> Any:
        """A fresh Estimator for the 4-input linear task on ``backend`` with 2 workers."""
        raise NotImplementedError

    def single_process_predict(self, est: Any, x: np.ndarray) -> np.ndarray:
        """Predict ``x`` with the plain framework model taken from ``est`` (no Orca workers)."""
        raise NotImplementedError

    # ------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def data(cls, orca_context: Any) -> dict[str, Any]:
        import pandas as pd

        x, y = regression_arrays()
        spark = orca_context.spark_session()
        df = spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y})).repartition(2)
        return {"x": x, "y": y, "df": df}

    #: the Estimator ``trained`` shares among the tests of one backend (None outside them)
    _shared: Any = None

    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, backend: str, data: dict[str, Any]) -> Iterator[Any]:
        """One Estimator trained on ``data`` per backend, for the tests that only read it."""
        if not cls.supports_fit:
            pytest.skip("this Estimator is inference-only")
        est = cls().fresh(backend)
        history = est.fit(data["df"], epochs=cls.epochs, batch_size=cls.batch_size, feature_cols=["x"],
                          label_cols=["y"])
        est._conformance_history = history
        cls._shared = est
        yield est
        cls._shared = None
        est.shutdown()

    def _liveness_backends(self) -> tuple[str, ...] | None:
        return self.liveness_backends if self.liveness_backends is not None else self.launcher_backends

    def fresh(self, backend: str) -> Any:
        """A new Estimator (:meth:`make_estimator`), after stopping the workers of the shared ones
        (``trained``'s and the bad-input matrix's)."""
        for live in [type(self)._shared, *getattr(type(self), "_bad_estimators", {}).values()]:
            if live is not None:
                live.shutdown()  # it restarts from the state its driver keeps on next use
        return self.make_estimator(backend)

    @pytest.fixture
    def predictor(self, backend: str, request: Any) -> Any:
        """The trained Estimator, or a fresh one for an inference-only Estimator."""
        if self.supports_fit:
            yield request.getfixturevalue("trained")
            return
        est = self.fresh(backend)
        yield est
        est.shutdown()

    # ------------------------------------------------------------ tests
    @pytest.mark.timeout(300)
    def test_fit_lowers_the_loss(self, trained: Any) -> None:
        losses = trained._conformance_history.history["train_loss"]
        assert len(losses) == self.epochs
        assert losses[-1] < losses[0] * 0.2

    @pytest.mark.timeout(300)
    def test_fit_learns_the_known_function_on_held_out_rows(self, trained: Any) -> None:
        """The task has a known optimum (``y = x @ TRUE_W + TRUE_B``): on rows the fit never saw,
        the trained model explains at least ``min_heldout_r2`` of the variance of ``y``."""
        x, y = regression_arrays(128, seed=99)
        pred = self.single_process_predict(trained, x).reshape(-1)
        r2 = 1.0 - float(np.mean((pred - y) ** 2)) / float(np.var(y))
        assert r2 >= self.min_heldout_r2, f"held-out R^2 {r2:.4f} < {self.min_heldout_r2}"

    @pytest.mark.timeout(300)
    def test_fit_reports_global_sample_count(self, trained: Any, data: dict[str, Any]) -> None:
        assert trained._conformance_history[-1]["num_samples"] == len(data["x"])

    @pytest.mark.timeout(300)
    def test_weights_identical_on_every_worker(self, trained: Any) -> None:
        digests = trained.worker_weight_digests()
        assert len(digests) == trained.num_workers >= 2
        assert len(set(digests)) == 1

    @pytest.mark.timeout(300)
    def test_evaluate_matches_single_process_mse(self, trained: Any, data: dict[str, Any]) -> None:
        stats = trained.evaluate(data["df"], batch_size=64, feature_cols=["x"], label_cols=["y"])
        pred = self.single_process_predict(trained, data["x"]).reshape(-1)
        expected = float(np.mean((pred - data["y"]) ** 2))
        assert stats["num_samples"] == len(data["x"])
        assert stats["val_loss"] == pytest.approx(expected, rel=1e-3, abs=1e-6)

    @pytest.mark.timeout(300)
    def test_predict_matches_single_process_model(self, predictor: Any, data: dict[str, Any]) -> None:
        trained = predictor
        out = trained.predict(data["df"], feature_cols=["x"]).toPandas()
        got = np.stack(out["prediction"].to_numpy()).reshape(-1)
        xs = np.stack(out["x"].to_numpy()).astype(np.float32)
        expected = self.single_process_predict(trained, xs).reshape(-1)
        np.testing.assert_allclose(got, expected, atol=self.atol, rtol=1e-5)
        arr = np.asarray(trained.predict(data["x"])).reshape(-1)
        np.testing.assert_allclose(arr, self.single_process_predict(trained, data["x"]).reshape(-1),
                                   atol=self.atol, rtol=1e-5)

    @pytest.mark.timeout(300)
    def test_save_load_round_trip_keeps_predictions(self, trained: Any, data: dict[str, Any], backend: str,
                                                    tmp_path: Any) -> None:
        if not self.supports_save:
            pytest.skip("no save")
        path = str(tmp_path / "model.bin")
        trained.save(path)
        before = np.asarray(trained.predict(data["x"]))
        trained.shutdown()  # one worker group at a time on a small machine
        fresh = self.fresh(backend)
        try:
            fresh.load(path)
            np.testing.assert_allclose(np.asarray(fresh.predict(data["x"])), before, atol=1e-6)
        finally:
            fresh.shutdown()

    @pytest.mark.timeout(120)
    def test_unknown_feature_column_is_rejected_on_the_driver(self, backend: str, data: dict[str, Any]) -> None:
        est = self.fresh(backend)
        try:
            with pytest.raises(ValueError, match="nope"):
                if self.supports_fit:
                    est.fit(data["df"], epochs=1, batch_size=32, feature_cols=["nope"], label_cols=["y"])
                else:
                    est.predict(data["df"], feature_cols=["nope"])
        finally:
            est.shutdown()

    @pytest.mark.timeout(120)
    def test_inference_only_estimator_refuses_fit_and_evaluate(self, backend: str, data: dict[str, Any]) -> None:
        if self.supports_fit:
            pytest.skip("this Estimator trains")
        est = self.fresh(backend)
        try:
            for call in (lambda: est.fit(data["df"], epochs=1, feature_cols=["x"], label_cols=["y"]),
                         lambda: est.evaluate(data["df"], feature_cols=["x"], label_cols=["y"])):
                with pytest.raises(NotImplementedError, match="inference-only"):
                    call()
        finally:
            est.shutdown()

    @pytest.mark.timeout(120)
    def test_unsupported_data_type_is_rejected(self, backend: str) -> None:
        est = self.fresh(backend)
        try:
            with pytest.raises(TypeError, match="not supported"):
                est.predict("not data")
        finally:
            est.shutdown()

    @pytest.mark.timeout(600)
    def test_a_failing_call_keeps_the_trained_model(self, predictor: Any, data: dict[str, Any]) -> None:
        """A call that fails in the workers (a shape the model rejects) costs nothing: the next call
        predicts exactly as before, on the same workers where they live across calls."""
        est = predictor
        before = np.asarray(est.predict(data["x"], batch_size=32))
        group = getattr(est, "_group", None)
        pids = worker_pids(est) if group is not None and group.started else None
        with pytest.raises((OrcaWorkerError, ValueError)):
            est.predict(np.zeros((8, NUM_FEATURES + 3), np.float32), batch_size=4)
        np.testing.assert_array_equal(np.asarray(est.predict(data["x"], batch_size=32)), before)
        if pids is not None:
            assert worker_pids(est) == pids, "a user error restarted healthy workers"

    @pytest.mark.timeout(600)
    def test_a_killed_worker_loses_nothing_trained(self, predictor: Any, data: dict[str, Any]) -> None:
        """A worker process killed after fit (SIGKILL): the Estimator still predicts with the weights
        of the last completed fit, from the state the driver holds."""
        est = predictor
        before = np.asarray(est.predict(data["x"], batch_size=32))
        kill_one_worker(est)
        np.testing.assert_array_equal(np.asarray(est.predict(data["x"], batch_size=32)), before)
        if self.supports_fit:
            stats = est.evaluate(data["df"], batch_size=64, feature_cols=["x"], label_cols=["y"])
            expected = float(np.mean((self.single_process_predict(est, data["x"]).reshape(-1) - data["y"]) ** 2))
            assert stats["val_loss"] == pytest.approx(expected, rel=1e-3, abs=1e-6)

    @pytest.mark.timeout(300)
    def test_any_partition_layout_trains_the_same_model_and_predicts_every_row(self, backend: str,
                                                                               data: dict[str, Any],
                                                                               orca_context: Any) -> None:
        """Every layout of :data:`PARTITION_LAYOUTS` (101 rows, 2 workers): a full-batch step does not
        depend on which worker holds which row, so from the same state every layout ends at the model
        the one-partition layout ends at (to ``atol``), with all 101 rows counted; every row is
        predicted once, as the single-process model does. Nothing hangs, drops or repeats a row.
        Partitions reach the workers through the launcher: run once per launcher (see
        ``launcher_backends`` and ``partition_backends``)."""
        backends = self.partition_backends if self.partition_backends is not None else self.launcher_backends
        skip_unless_runs_on(backend, backends)
        x, y = regression_arrays(101, seed=3)
        spark = orca_context.spark_session()
        probe = data["x"][:16]
        est = self.fresh(backend)
        try:
            start, models = None, {}
            for name, sizes in PARTITION_LAYOUTS.items():
                df = frame_with_layout(spark, x, y, sizes)
                if self.supports_fit:
                    cols = {"feature_cols": ["x"], "label_cols": ["y"]}
                    if start is None:  # one step away from the initial model, so the state is the driver's
                        est.fit(df, epochs=1, batch_size=101, shuffle=False, **cols)
                        start = est.get_state()
                    est.set_state(start)
                    hist = est.fit(df, epochs=1, batch_size=101, shuffle=False, **cols)
                    assert hist[-1]["num_samples"] == 101, (name, hist[-1])
                    models[name] = self.single_process_predict(est, probe).reshape(-1)
                out = est.predict(df, feature_cols=["x"]).toPandas().sort_values("id")
                assert out["id"].tolist() == list(range(101)), name
                np.testing.assert_allclose(np.stack(out["prediction"].to_numpy()).reshape(-1),
                                           self.single_process_predict(est, x).reshape(-1), atol=self.atol,
                                           rtol=1e-5, err_msg=name)
        finally:
            est.shutdown()
        for name, got in models.items():
            np.testing.assert_allclose(got, models["one"], atol=self.atol, rtol=1e-5, err_msg=name)

    @pytest.mark.timeout(300)
    def test_a_share_on_disk_gives_the_in_memory_model_and_predictions(self, backend: str,
                                                                       orca_context: Any) -> None:
        """``worker_data_memory_mb`` far below each worker's share (150 rows a worker): the share
        streams to local disk, and without shuffling a fit from the same state ends at the model the
        in-memory fit ends at (to ``atol``), with the same evaluation loss; prediction of in-process
        data (through the workers' shares) gives the same rows. See docs/data-and-memory.md."""
        from orca.core.context import OrcaContext

        if self.spill_backends is not None:
            skip_unless_runs_on(backend, self.spill_backends)
        elif self.launcher_backends is not None and self.partition_backends is not None:
            skip_unless_runs_on(backend, (*self.launcher_backends, *self.partition_backends))
        x, y = regression_arrays(300, seed=4)
        df = frame_with_layout(orca_context.spark_session(), x, y, [150, 150])
        cols = {"feature_cols": ["x"], "label_cols": ["y"]}
        est = self.fresh(backend)
        before = OrcaContext.worker_data_memory_mb
        out: dict[str, Any] = {}
        try:
            if self.supports_fit:  # one step first, so the start state is the driver's
                est.fit(df, epochs=1, batch_size=300, shuffle=False, **cols)
                start = est.get_state()
            for mode, memory_mb in (("memory", before), ("disk", 0.001)):
                OrcaContext.worker_data_memory_mb = memory_mb
                if self.supports_fit:
                    est.set_state(start)
                    est.fit(df, epochs=2, batch_size=32, shuffle=False, **cols)
                    out[mode + "_loss"] = est.evaluate(df, batch_size=64, **cols)["val_loss"]
                out[mode] = np.asarray(est.predict(x, batch_size=64)).reshape(-1)
        finally:
            OrcaContext.worker_data_memory_mb = before
            est.shutdown()
        np.testing.assert_allclose(out["disk"], out["memory"], atol=self.atol, rtol=1e-5)
        np.testing.assert_allclose(out["disk"], self.single_process_predict(est, x).reshape(-1), atol=self.atol,
                                   rtol=1e-5)
        if self.supports_fit:
            assert out["disk_loss"] == pytest.approx(out["memory_loss"], rel=1e-4, abs=self.atol)

    @pytest.mark.timeout(300)
    def test_an_exception_in_a_worker_reaches_the_driver_with_its_traceback(self, backend: str, trained: Any,
                                                                          data: dict[str, Any]) -> None:
        """User code (a callback) raises in rank 1's process after its step 2, while rank 0 goes on to
        its next step's all-reduce: the fit fails on the driver with an :class:`OrcaWorkerError` (not a
        lost worker, not a timeout) whose rank is 1 and whose worker traceback holds the user's
        exception, its message and the frame that raised it; the trained Estimator keeps its model."""
        skip_unless_runs_on(backend, self.launcher_backends)
        est = trained
        before = np.asarray(est.predict(data["x"][:16], batch_size=8)).reshape(-1)
        with pytest.raises(OrcaWorkerError) as caught:
            est.fit({"x": data["x"][:64], "y": data["y"][:64]}, epochs=2, batch_size=8, shuffle=False,
                    callbacks=[RaiseAt(rank=1, step=2)])
        err = caught.value
        assert type(err) is OrcaWorkerError, f"a user error reported as {type(err).__name__}: {err}"
        assert err.rank == 1, f"the error names rank {err.rank}, not 1: {err}"
        assert "UserCodeError: user code failed on rank 1 after step 2" in err.worker_traceback, str(err)
        assert "in on_batch_end" in err.worker_traceback, str(err)  # the frame that raised it
        assert "user code failed on rank 1" in str(err)  # what the user reads
        np.testing.assert_array_equal(np.asarray(est.predict(data["x"][:16], batch_size=8)).reshape(-1), before)

    @pytest.mark.timeout(300)
    def test_a_bad_row_met_in_a_worker_reaches_the_driver_with_its_traceback(self, backend: str, predictor: Any,
                                                                              data: dict[str, Any],
                                                                              orca_context: Any) -> None:
        """Row 50 of a 64-row DataFrame (the second partition) holds 5 features instead of 4: only the
        worker that converts that partition meets it. The prediction fails on the driver with the
        worker's traceback, whose message names the column and both lengths: an
        :class:`OrcaWorkerError` from an eager call, or Spark's ``PythonException`` when the lazy
        DataFrame a Spark-launched ``predict`` returns is computed. The Estimator predicts as
        before. Inference-only Estimators too. The path differs per launcher: it runs on each
        package's launcher-level and partition backends (one per launcher)."""
        if self.launcher_backends is not None and self.partition_backends is not None:
            skip_unless_runs_on(backend, (*self.launcher_backends, *self.partition_backends))
        spark = orca_context.spark_session()
        x, y = regression_arrays(64, seed=5)
        rows = [(i, x[i].tolist() + ([9.0] if i == 50 else []), float(y[i])) for i in range(64)]
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), "id long, x array<float>, y float")
        before = np.asarray(predictor.predict(data["x"][:16], batch_size=8)).reshape(-1)
        with pytest.raises((OrcaWorkerError, PythonException)) as caught:
            # a DataFrame prediction on Spark is lazy: the worker meets the row when it is computed
            predictor.predict(df, feature_cols=["x"], batch_size=8).toPandas()
        err = caught.value
        if isinstance(err, OrcaWorkerError):
            assert err.worker_traceback, f"no worker traceback reached the driver: {err}"
        assert "Traceback (most recent call last)" in str(err), str(err)
        assert "column 'x' holds arrays of different lengths (4..5)" in str(err), str(err)
        np.testing.assert_array_equal(np.asarray(predictor.predict(data["x"][:16], batch_size=8)).reshape(-1), before)

    @pytest.mark.timeout(300)
    def test_tensorboard_summaries_are_the_historys_merged_stats(self, backend: str, data: dict[str, Any],
                                                                  tmp_path: Any, request: Any) -> None:
        """TensorBoard turned on with one argument (``set_tensorboard(log_dir)``: ``app_name`` is
        ``"orca"``), then a 2-epoch fit with validation data on the trained Estimator: TensorBoard's
        own reader finds in ``log_dir/orca/train`` and ``.../validation`` one point per epoch, at the
        epoch's last iteration, whose ``Loss`` is the History's ``loss`` (``val_loss`` for
        validation) and whose every other tag but ``Throughput`` is the History's stat of that name
        (``val_<tag>`` for validation). Inference-only Estimators skip it (``supports_fit``). The
        summaries are written on the driver by the shared engine: one backend per package in CI
        (``tensorboard_backends``, by default ``launcher_backends``)."""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        skip_unless_runs_on(backend, self.tensorboard_backends if self.tensorboard_backends is not None
                            else self.launcher_backends)
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        est = request.getfixturevalue("trained")  # (after the skips: no Estimator trained for a skipped test)
        before = est.get_state()
        xy = {"x": data["x"][:64], "y": data["y"][:64]}
        est.set_tensorboard(str(tmp_path / "tb"))
        try:
            hist = est.fit(xy, epochs=2, batch_size=16, validation_data=xy)
        finally:  # the shared Estimator as it was: its model, no summaries
            est.fit_listeners.remove(est._summaries)
            est._summaries.close()
            est._summaries = None
            est.set_state(before)
        steps = np.cumsum([h["batch_count"] for h in hist]).tolist()
        for kind, prefix in (("train", ""), ("validation", "val_")):
            acc = EventAccumulator(str(tmp_path / "tb" / "orca" / kind), size_guidance={"scalars": 0})
            acc.Reload()
            tags = acc.Tags()["scalars"]
            assert "Loss" in tags, (kind, tags)
            for tag in tags:
                points = sorted((s.step, s.value) for s in acc.Scalars(tag))
                assert [p[0] for p in points] == steps, (kind, tag, points)
                if tag == "Throughput":
                    assert all(p[1] > 0 for p in points), points
                    continue
                key = prefix + ("loss" if tag == "Loss" else tag)
                np.testing.assert_allclose([p[1] for p in points], [h[key] for h in hist], rtol=1e-6,
                                           err_msg=f"{kind}/{tag}")

    # ------------------------------------------------------------ liveness
    @pytest.fixture
    def short_timeout(self, orca_context: Any) -> Iterator[float]:
        """Workers of Estimators made in the test may be silent for only LIVENESS_TIMEOUT_S."""
        settings = orca_context.settings
        before = settings.worker_timeout_s
        settings.worker_timeout_s = LIVENESS_TIMEOUT_S
        yield LIVENESS_TIMEOUT_S
        settings.worker_timeout_s = before

    @pytest.mark.timeout(300)
    def test_a_slow_fit_that_makes_progress_is_never_timed_out(self, backend: str, data: dict[str, Any],
                                                                short_timeout: float) -> None:
        """Every step takes 0.35 x the timeout and the epoch (12 steps) over 4 x it: the fit completes."""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        skip_unless_runs_on(backend, self._liveness_backends())
        est = self.fresh(backend)
        try:
            t0 = time.monotonic()
            hist = est.fit({"x": data["x"][:96], "y": data["y"][:96]}, epochs=1, batch_size=8,
                           callbacks=[SlowSteps(0.35 * short_timeout)])
            took = time.monotonic() - t0
        finally:
            est.shutdown()
        assert [(h["num_samples"], h["batch_count"]) for h in hist] == [(96, 12)]
        assert took > 4 * short_timeout  # the fit outlived the timeout many times over

    @pytest.mark.timeout(300)
    def test_a_stalled_worker_fails_the_call_naming_it(self, backend: str, data: dict[str, Any],
                                                       short_timeout: float) -> None:
        """Rank 1 hangs in a callback: the fit fails with a TimeoutError that names rank 1, its pid
        and what it was doing, soon after the timeout, and the hung process is stopped."""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        skip_unless_runs_on(backend, self._liveness_backends())
        est = self.fresh(backend)
        try:
            with pytest.raises(TimeoutError) as info:
                est.fit({"x": data["x"][:64], "y": data["y"][:64]}, epochs=2, batch_size=8,
                        callbacks=[StallAt(1, 2)])
        finally:
            est.shutdown()
        msg = str(info.value)
        assert "rank 1" in msg and "while training (epoch 1, step" in msg, msg
        quiet = float(re.search(r"made no progress for (\d+)s", msg).group(1))  # type: ignore[union-attr]
        assert short_timeout - 1 <= quiet <= short_timeout + 10, msg
        pid = int(re.search(r"pid (\d+)", msg).group(1))  # type: ignore[union-attr]
        assert _gone(pid, 30), f"the stalled worker (pid {pid}) still runs"

    # ------------------------------------------------------------ recovery
    @pytest.mark.timeout(600)
    def test_a_worker_killed_mid_fit_is_recovered_with_max_failures(self, backend: str, data: dict[str, Any],
                                                                    tmp_path: Any) -> None:
        """Rank 1 SIGKILLs itself in epoch 2: with max_failures=1 the fit restarts from epoch 1's
        state and ends with the weights of an uninterrupted run; with max_failures=0 it fails at
        once with a WorkerLostError and the Estimator keeps its model."""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        skip_unless_runs_on(backend, self._liveness_backends())
        from orca.core.engine.errors import WorkerLostError

        xy = {"x": data["x"][:32], "y": data["y"][:32]}
        probe = data["x"][:16]
        results = []
        for kill in (True, False):
            est = self.fresh(backend)
            try:
                cbs = [KillOnce(str(tmp_path / "killed"))] if kill else []
                hist = est.fit(xy, epochs=3, batch_size=8, callbacks=cbs, max_failures=1)
                results.append(self.single_process_predict(est, probe).reshape(-1))
                assert [h["epoch"] for h in hist] == [1, 2, 3]
                assert [r["epoch"] for r in hist.restarts] == ([2] if kill else [])
                assert [h["restarts"] for h in hist] == ([0, 1, 0] if kill else [0, 0, 0])
                if not kill:  # the same kill without max_failures: one clear error, the model kept
                    before = np.asarray(est.predict(probe, batch_size=8)).reshape(-1)
                    with pytest.raises(WorkerLostError):
                        est.fit(xy, epochs=1, batch_size=8, callbacks=[KillOnce(str(tmp_path / "again"), epoch=3)],
                                max_failures=0)
                    np.testing.assert_array_equal(np.asarray(est.predict(probe, batch_size=8)).reshape(-1), before)
            finally:
                est.shutdown()
        np.testing.assert_allclose(results[0], results[1], atol=self.recovery_atol)

    @pytest.mark.timeout(300)
    def test_a_non_finite_loss_stops_the_fit_naming_epoch_and_step(self, backend: str, data: dict[str, Any]) -> None:
        """A feature so large that the loss overflows, in the row rank 1 trains on at step 3 of epoch 1
        (rows are not shuffled): the fit fails with an error naming rank 1, epoch 1 and step 3, and the
        Estimator keeps its model. (A NaN in the data would be refused on the driver before training:
        the value is finite, only the loss is not.)"""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        skip_unless_runs_on(backend, self.launcher_backends)
        dtype, huge = self.overflowing_feature
        x, y = data["x"][:32].astype(dtype), data["y"][:32]
        x[16 + 2 * 4, 0] = huge  # rank 1 holds rows 16-31 and takes 4 of them per step
        est = self.fresh(backend)
        try:
            before = np.asarray(est.predict(data["x"][:16], batch_size=8)).reshape(-1)
            with pytest.raises(OrcaWorkerError, match=r"FloatingPointError.*epoch 1, step 3 \(rank 1\)"):
                est.fit({"x": x, "y": y}, epochs=2, batch_size=8, shuffle=False)
            np.testing.assert_array_equal(np.asarray(est.predict(data["x"][:16], batch_size=8)).reshape(-1), before)
        finally:
            est.shutdown()

    @pytest.mark.timeout(300)
    def test_skipping_non_finite_steps_equals_the_fit_without_those_steps(self, backend: str,
                                                                           data: dict[str, Any]) -> None:
        """The overflowing row of the test above, with ``skip_non_finite_steps=True``: the global step
        it is in (rank 0's rows 8-11 and rank 1's rows 24-27, every epoch) is left out on both
        ranks, the History counts one skipped step per epoch, and the model equals one trained on
        the same rows without that step's rows (each rank then holds the same other steps)."""
        if not self.supports_fit:
            pytest.skip("this Estimator is inference-only")
        if not self.supports_skipping_non_finite:
            pytest.skip("supports_skipping_non_finite is False for this Estimator")
        if backend != (self.launcher_backends or (backend,))[0] and not full_matrix():
            pytest.skip("runner-level test (the skip is decided in the runner): runs on one backend")
        dtype, huge = self.overflowing_feature
        x, y = data["x"][:32].astype(dtype), data["y"][:32]
        x[16 + 2 * 4, 0] = huge
        keep = np.r_[0:8, 12:24, 28:32]
        probe = data["x"][32:64]
        preds, losses = [], []
        for rows, skip in ((slice(None), True), (keep, False)):
            est = self.fresh(backend)
            try:
                hist = est.fit({"x": x[rows], "y": y[rows]}, epochs=2, batch_size=8, shuffle=False,
                               skip_non_finite_steps=skip)
                if skip:
                    assert [h["skipped_steps"] for h in hist] == [1, 1]
                    assert [h["batch_count"] for h in hist] == [4, 4]
                    assert all(np.isfinite(h["loss"]) for h in hist)
                losses.append([h["loss"] for h in hist])
                preds.append(np.asarray(est.predict(probe, batch_size=8)).reshape(-1))
            finally:
                est.shutdown()
        assert np.isfinite(preds[0]).all()
        np.testing.assert_allclose(preds[0], preds[1], atol=self.recovery_atol)
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
