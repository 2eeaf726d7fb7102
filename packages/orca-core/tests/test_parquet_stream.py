"""read_parquet's XShards given to an Estimator: counted from the footers, read by the workers
themselves as Arrow batches (Parquet row groups), with the weights of the pandas XShards path."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orca.core.data import read_parquet
from orca.core.data._parquet import BATCH_ROWS, ParquetOrigin, Piece, parquet_origin
from orca.core.engine.adapters import get_data_source
from orca.core.engine.sources import FileShardsSource, WorkerRead
from orca.core.engine.spill import DiskFeed
from orca.core.testing.conformance import NUM_FEATURES, TRUE_W
from orca.core.testing.spill import SpillProbe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_toy_framework import NumpyEstimator  # noqa: E402 - the toy framework of orca-core's tests

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module

KW = {"feature_cols": ["x"], "label_cols": ["y"]}


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, NUM_FEATURES))
    return x, x @ TRUE_W.astype(np.float64) + 0.5 + 0.01 * rng.normal(size=n)


def _write(path: Path, x: np.ndarray, y: np.ndarray, row_group_size: int) -> None:
    """``x`` as a list<double> column of 4 values a row, ``y`` a double; ``other`` a string."""
    table = pa.table({"x": pa.array(list(x), type=pa.list_(pa.float64())), "y": y,
                      "other": [f"r{i}" for i in range(len(y))]})
    pq.write_table(table, path, row_group_size=row_group_size)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    """2 files of 300 rows, row groups of 64 rows (4 full and one of 44 per file)."""
    root = tmp_path_factory.mktemp("pq")
    x, y = _rows(600, seed=1)
    _write(root / "part-0.parquet", x[:300], y[:300], 64)
    _write(root / "part-1.parquet", x[300:], y[300:], 64)
    (root / "_SUCCESS").write_text("")
    return str(root), x, y


def _model(est: NumpyEstimator) -> dict[str, np.ndarray]:
    return est.get_model()


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], atol: float = 1e-12) -> None:
    for key in ("w", "b"):
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=atol)


# ---------------------------------------------------------------- on the driver: footers only


def test_the_row_count_comes_from_the_footers_not_the_data(tmp_path: Path) -> None:
    """A file whose data pages are overwritten with garbage (its footer intact): reading its data
    fails, yet the source knows its 1,000 rows, and the partitions theirs."""
    x, y = _rows(1000, seed=2)
    path = tmp_path / "broken.parquet"
    _write(path, x, y, 256)
    raw = bytearray(path.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    raw[4:len(raw) - footer] = b"\xff" * (len(raw) - footer - 4)
    path.write_bytes(bytes(raw))
    with pytest.raises(Exception):  # noqa: B017 - any reader error: the data is garbage
        pq.read_table(path)

    shards = read_parquet(str(path), backend="local")
    source = get_data_source(shards, **KW, need_labels=True)
    assert isinstance(source, FileShardsSource)
    assert source.num_rows == 1000
    assert shards.num_rows_per_partition() == [1000] and shards.num_partitions() == 1
    assert [p.rows for p in source.origin.pieces] == [256, 256, 256, 232]
    with pytest.raises(Exception):  # noqa: B017 - the frames themselves cannot be read
        shards.collect()


def test_row_groups_are_split_by_rows_contiguously_at_row_group_boundaries() -> None:
    pieces = tuple(Piece("f", i, n) for i, n in enumerate([100, 100, 100, 10, 10, 300, 80]))
    origin = ParquetOrigin(pieces, None, (), (700,))
    shares = origin.split(2)
    assert [p.row_group for p in shares[0]] == [0, 1, 2, 3, 4] and [p.row_group for p in shares[1]] == [5, 6]
    assert [sum(p.rows for p in s) for s in shares] == [320, 380]  # the boundary nearest 350
    # thirds at 233 and 467 rows: the nearest boundaries are 200 and 320 (not 620)
    assert [[p.row_group for p in s] for s in origin.split(3)] == [[0, 1], [2, 3, 4], [5, 6]]
    many = origin.split(9)  # more workers than row groups: some get none, none twice
    assert [p for s in many for p in s] == list(pieces) and sum(not s for s in many) >= 2
    assert origin.split(1) == [list(pieces)]


def test_a_worker_reads_its_row_groups_as_bounded_arrow_batches_and_streams_them_to_disk(tmp_path: Path) -> None:
    """What a worker runs (WorkerRead.fill): batches of at most BATCH_ROWS rows of the named columns
    only, and with a memory setting of 0 bytes no batch is kept: each is converted and appended to
    the share's files as it arrives (the builder holds none when the read ends)."""
    x, y = _rows(25_000, seed=3)
    _write(tmp_path / "a.parquet", x, y, 12_000)
    origin = parquet_origin(read_parquet(str(tmp_path / "a.parquet"), backend="local"))
    assert origin is not None
    read = WorkerRead(origin.pieces, ["x"], ["y"])
    sizes = [(b.num_rows, b.schema.names) for b in read.batches()]
    assert sum(n for n, _ in sizes) == 25_000 and max(n for n, _ in sizes) <= BATCH_ROWS
    assert all(names == ["x", "y"] for _, names in sizes)  # "other" is never read
    builder = read.fill(0)
    assert builder._items == [] and builder._held == 0
    feed = builder.finish()
    try:
        assert isinstance(feed, DiskFeed) and feed.num_rows == 25_000
        got_x, got_y = feed.read(0, 25_000)
        np.testing.assert_array_equal(got_x[0], x)
        np.testing.assert_array_equal(got_y[0], y)
    finally:
        feed.close()


def test_read_parquet_keeps_its_frames_and_a_transform_forgets_the_row_groups(tmp_path: Path) -> None:
    x, y = _rows(40, seed=4)
    _write(tmp_path / "a.parquet", x[:25], y[:25], 10)
    _write(tmp_path / "b.parquet", x[25:], y[25:], 10)
    shards = read_parquet(str(tmp_path), backend="local", columns=["y", "x"])
    want = [pd.read_parquet(tmp_path / f, columns=["y", "x"]) for f in ("a.parquet", "b.parquet")]
    for got, frame in zip(shards.collect(), want, strict=True):
        pd.testing.assert_frame_equal(got, frame)
    assert len(shards) == 40 and shards.num_rows_per_partition() == [25, 15]
    moved = shards.transform_shard(lambda df: df.assign(y=df["y"] * 2))
    assert parquet_origin(moved) is None and parquet_origin(shards) is not None
    assert not isinstance(get_data_source(moved, **KW, need_labels=True), FileShardsSource)
    np.testing.assert_allclose(pd.concat(moved.collect())["y"], y * 2)
    # arguments that change the rows: read as before, without row groups
    filtered = read_parquet(str(tmp_path), backend="local", filters=[("y", ">", 0.0)])
    assert parquet_origin(filtered) is None and len(filtered) == int((y > 0).sum())


# ---------------------------------------------------------------- bad input, on the driver


def test_bad_columns_and_files_fail_on_the_driver_naming_them(orca_context: Any, tmp_path: Path) -> None:
    x, y = _rows(30, seed=5)
    _write(tmp_path / "a.parquet", x, y, 10)
    shards = read_parquet(str(tmp_path), backend="spark")
    est = NumpyEstimator.from_numpy(backend="spark")
    try:
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"data: feature column 'features' not found; the Parquet file "
                                             r".*a\.parquet' has columns \['x', 'y', 'other'\]\. Fix feature_cols"):
            est.fit(shards, feature_cols=["features"], label_cols=["y"], batch_size=8)
        with pytest.raises(ValueError, match=r"data: label column 'label' not found"):
            est.evaluate(shards, feature_cols=["x"], label_cols=["label"])
        only_x = read_parquet(str(tmp_path), backend="spark", columns=["x"])
        with pytest.raises(ValueError, match=r"validation_data: label column 'y' not found.*\(read with "
                                             r"columns=\['x'\]\)\. Fix feature_cols/label_cols or read_parquet's columns="):
            est.fit(shards, **KW, batch_size=8, validation_data=only_x)
        with pytest.raises(ValueError, match=r"give label_cols=\[...\]"):
            est.fit(shards, feature_cols=["x"], batch_size=8)
        with pytest.raises(ValueError, match=r"read_parquet: columns \['nope'\] not found in .*a\.parquet'; it has "
                                             r"columns \['x', 'y', 'other'\]"):
            read_parquet(str(tmp_path), columns=["x", "nope"])
        (tmp_path / "empty").mkdir()
        pq.write_table(pa.table({"x": pa.array([], pa.list_(pa.float64())), "y": pa.array([], pa.float64())}),
                       tmp_path / "empty" / "e.parquet")
        with pytest.raises(ValueError, match=r"data is empty \(0 rows in its 1 Parquet file\(s\)\)"):
            est.fit(read_parquet(str(tmp_path / "empty")), **KW, batch_size=8)
        (tmp_path / "nothing").mkdir()
        with pytest.raises(FileNotFoundError, match="No data files found"):
            read_parquet(str(tmp_path / "nothing"))
        (tmp_path / "notes.txt").write_text("not parquet")
        with pytest.raises(ValueError, match=r"notes\.txt' is not a readable Parquet file"):
            read_parquet(str(tmp_path / "notes.txt"))
        assert time.monotonic() - start < 10
        assert est._group is None  # no worker was started
    finally:
        est.shutdown()


# ---------------------------------------------------------------- both launchers


def _frames_built(shards: Any, spark: Any) -> int:
    """Partitions of ``shards`` whose pandas frames were built (and cached) anywhere so far."""
    if hasattr(shards, "rdd"):
        infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
        return sum(int(i.numCachedPartitions()) for i in infos if i.id() == shards.rdd.id())
    started = shards._start is None if hasattr(shards, "_start") else True
    return shards.num_partitions() if started else 0


@pytest.mark.timeout(420)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_a_fit_on_parquet_xshards_equals_the_pandas_xshards_fit(spark: Any, request: pytest.FixtureRequest,
                                                               two_files: tuple[str, np.ndarray, np.ndarray],
                                                               tmp_path: Path, backend: str) -> None:
    """2 files of 300 rows on 2 workers: each worker reads its file's row groups, and the fit ends at
    the weights of the same data as pandas XShards (read_parquet's frames, transformed: the old
    path) — without shuffling and with the default shuffle (same seed) to 1e-12, the validation
    and evaluation losses and the predictions too. With worker_data_memory_mb=0.001 every rank's
    share goes to disk (seen during the fit: 300 rows of 40 bytes), and the weights are the same.
    The frames of the XShards are never built: no worker, task or driver held the data as pandas."""
    from orca.core import OrcaContext

    path, x, y = two_files
    if backend == "ray":
        request.getfixturevalue("ray_runtime")
    shards = read_parquet(path, backend=backend)
    if backend == "spark":
        shards = shards.cache()  # so that any frame built would be seen (cached) after
    assert parquet_origin(shards) is not None and shards.num_partitions() == 2
    old = read_parquet(path, backend=backend).transform_shard(lambda df: df)  # the pandas path
    assert parquet_origin(old) is None

    def run(data: Any, shuffle: bool, memory_mb: float = 2048.0, probe: str | None = None,
            predict: bool = True) -> tuple[Any, ...]:
        OrcaContext.worker_data_memory_mb = memory_mb
        est = NumpyEstimator.from_numpy(lr=0.05, backend=backend)
        try:
            est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
            hist = est.fit(data, epochs=2, batch_size=64, shuffle=shuffle, validation_data=data,
                           callbacks=[SpillProbe(probe)] if probe else None, **KW)
            ev = est.evaluate(data, batch_size=50, **KW)["val_loss"]
            rows = None
            if predict:
                out = est.predict(data, feature_cols=["x"], batch_size=50)
                rows = np.concatenate([np.asarray(s["prediction"].tolist()).reshape(-1) for s in out.collect()])
            return _model(est), hist[-1]["val_loss"], ev, rows, hist[-1]["num_samples"]
        finally:
            OrcaContext.worker_data_memory_mb = 2048.0
            est.shutdown()

    try:
        in_memory, val, ev, _, n = run(shards, False, predict=False)
        assert n == 600
        (tmp_path / "probe").mkdir()
        before = set(glob.glob(os.path.join(_spill_dir(), "orca-feed-*")))
        spilled, val_disk, ev_disk, _, _ = run(shards, False, memory_mb=0.001, probe=str(tmp_path / "probe"),
                                               predict=False)
        _same(spilled, in_memory)
        assert val_disk == pytest.approx(val, rel=1e-12) and ev_disk == pytest.approx(ev, rel=1e-12)
        for rank in (0, 1):
            found = json.loads((tmp_path / "probe" / f"rank{rank}.json").read_text())
            ours = {d: b for d, b in found.items() if d not in before}
            assert list(ours.values()).count(300 * 5 * 8) >= 2, found  # its training and validation shares
        assert _frames_built(shards, spark) == 0  # fit and evaluate never built a pandas frame of the data

        for shuffle in (False, True):
            got, val, ev, pred, n = run(shards, shuffle)
            want, want_val, want_ev, want_pred, want_n = run(old, shuffle)
            _same(got, want)
            assert n == want_n == 600
            assert val == pytest.approx(want_val, rel=1e-12) and ev == pytest.approx(want_ev, rel=1e-12)
            np.testing.assert_allclose(pred, want_pred, rtol=0, atol=1e-12)
            np.testing.assert_allclose(pred, x @ got["w"] + got["b"][0], rtol=0, atol=1e-5)  # in row order
            if not shuffle:
                _same(got, in_memory)
        assert ev < 0.1 * float(np.mean(y ** 2))  # it learns
    finally:
        OrcaContext.worker_data_memory_mb = 2048.0
    # the control: the predictions go back into the frames, which are built (and cached) for it
    assert _frames_built(shards, spark) == 2
    if backend == "spark":
        shards.uncache()


def _spill_dir() -> str:
    from orca.core.engine.spill import spill_dir

    return spill_dir()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_any_row_group_layout_trains_as_one_process(spark: Any, request: pytest.FixtureRequest, tmp_path: Path,
                                                   backend: str) -> None:
    """3 files of 50, 170 and 81 rows in row groups of 32 (uneven shares, split at row-group
    boundaries), read as Ray XShards on the Spark launcher and as local XShards on the Ray one:
    full-batch gradient descent does not depend on who holds which row, so 3 epochs end at 3
    full-batch steps computed here, to 1e-12; the count comes from the footers."""
    x, y = _rows(301, seed=6)
    bounds = [0, 50, 220, 301]
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        _write(tmp_path / f"f{i}.parquet", x[a:b], y[a:b], 32)
    form = "ray" if backend == "spark" else "local"
    request.getfixturevalue("ray_runtime")  # Ray XShards, or the Ray launcher
    shards = read_parquet(str(tmp_path), backend=form, num_shards=2)
    assert get_data_source(shards, **KW, need_labels=True).num_rows == 301
    est = NumpyEstimator.from_numpy(lr=0.1, backend=backend)
    try:
        est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
        hist = est.fit(shards, epochs=3, batch_size=301, shuffle=False, **KW)
        assert [h["num_samples"] for h in hist] == [301] * 3
        w, b = np.zeros(NUM_FEATURES), 0.0
        for _ in range(3):
            err = x @ w + b - y
            w, b = w - 0.1 * 2 * x.T @ err / 301, b - 0.1 * 2 * err.mean()
        _same(est.get_model(), {"w": w, "b": np.array([b])})
        mse = est.evaluate(shards, batch_size=64, **KW)["val_loss"]
        assert mse == pytest.approx(float(np.mean((x @ w + b - y) ** 2)), rel=1e-9)
    finally:
        est.shutdown()
    assert _frames_built(shards, spark) == 0
