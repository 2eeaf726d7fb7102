"""read_csv's (and read_json's, lines=True) XShards given to an Estimator: each worker reads its own
files in chunks, as Arrow batches, never the whole share as pandas (issue #18), and trains the
model one process trains on the same rows."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import pytest

from orca.core.data import read_csv, read_json
from orca.core.data._origin import file_origin
from orca.core.data._text import SHARED_CHUNK_ROWS, TextOrigin
from orca.core.engine.adapters import get_data_source
from orca.core.engine.sources import FileShardsSource
from orca.core.engine.spill import DiskFeed
from orca.core.testing.conformance import NUM_FEATURES, TRUE_W

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_parquet_stream import _frames_built  # noqa: E402 - frames built of an XShards, so far
from test_toy_framework import NumpyEstimator  # noqa: E402 - the toy framework of orca-core's tests

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module

XCOLS = [f"x{i}" for i in range(NUM_FEATURES)]
KW = {"feature_cols": XCOLS, "label_cols": ["y"]}


def _frame(n: int, seed: int, start: int = 0) -> pd.DataFrame:
    """``n`` rows of 4 float features, a float label near a known linear model, and a string id."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, NUM_FEATURES))
    frame = pd.DataFrame(x, columns=XCOLS)
    frame["y"] = x @ TRUE_W.astype(np.float64) + 0.5 + 0.01 * rng.normal(size=n)
    frame["id"] = [f"r{i}" for i in range(start, start + n)]
    return frame


def _write(root: Path, sizes: list[int], seed: int, empty: bool = True) -> list[Path]:
    """CSV files of ``sizes`` rows (ids counting on across them), and an empty file (Spark writes one
    for an empty partition); the paths in order."""
    root.mkdir(exist_ok=True)
    paths, start = [], 0
    for i, n in enumerate(sizes):
        path = root / f"part-{i:05d}.csv"
        _frame(n, seed + i, start).to_csv(path, index=False)
        paths.append(path)
        start += n
    if empty:
        (root / f"part-{len(sizes):05d}.csv").write_text("")
    return paths


def _truth(paths: list[Path]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The rows as one process reads the files: features, labels, ids."""
    frame = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    return frame[XCOLS].to_numpy(), frame["y"].to_numpy(), list(frame["id"])


def _ids(reads: list[Any]) -> list[list[str]]:
    """The ids each share reads, in order."""
    return [[i for b in r.batches() for i in b.column("id").to_pylist()] for r in reads]


def _gd(x: np.ndarray, y: np.ndarray, epochs: int, lr: float) -> tuple[np.ndarray, float]:
    """Full-batch gradient descent on the mean squared error (what the toy model's SGD does with one
    global batch of every row)."""
    w, b = np.zeros(NUM_FEATURES), 0.0
    for _ in range(epochs):
        err = x @ w + b - y
        w, b = w - lr * 2 * x.T @ err / len(y), b - lr * 2 * err.mean()
    return w, b


# ---------------------------------------------------------------- on the driver: headers and a sample


def test_files_split_by_bytes_or_shared_by_chunks_every_row_read_once(tmp_path: Path) -> None:
    """3 files and an empty one: 2 shares are contiguous runs of files balanced by bytes; a single
    file for 3 workers is shared, each keeping every third chunk of 256 rows; every row is read
    exactly once, in the files' order within a share."""
    paths = _write(tmp_path / "three", [5_000, 20_000, 7_000], seed=1)
    _, _, ids = _truth(paths)
    shards = read_csv(str(tmp_path / "three"), backend="local")
    source = get_data_source(shards, **KW, need_labels=True)
    assert isinstance(source, FileShardsSource) and source.num_rows is None  # counted only by reading
    origin = source.origin
    assert isinstance(origin, TextOrigin) and origin.num_files == 4 and origin.files[-1].size == 0
    reads = source.worker_reads(2, need_labels=True)
    assert [[Path(p.path).name for p in r.pieces] for r in reads] == [
        ["part-00000.csv", "part-00001.csv"], ["part-00002.csv", "part-00003.csv"]]  # the cut nearest half the bytes
    got = _ids([r.__class__(r.pieces, ["id"], [], r.reader) for r in reads])
    assert got[0] + got[1] == ids

    single = read_csv(str(paths[1]), backend="local")
    three = get_data_source(single, **KW, need_labels=True).worker_reads(3, need_labels=True)
    assert all(p.parts == 3 for r in three for p in r.pieces)
    got = _ids([r.__class__(r.pieces, ["id"], [], r.reader) for r in three])
    assert sorted(i for share in got for i in share) == sorted(ids[5_000:25_000])  # each row once
    assert all(abs(len(share) - 20_000 / 3) <= SHARED_CHUNK_ROWS for share in got)  # balanced to a chunk
    assert got[0][:SHARED_CHUNK_ROWS] == ids[5_000:5_000 + SHARED_CHUNK_ROWS]  # the first chunk goes to rank 0
    assert got[1][0] == ids[5_000 + SHARED_CHUNK_ROWS]
    assert shards.num_partitions() == 2 and shards.num_rows_per_partition() == [25_000, 7_000]  # reads the frames


def test_a_worker_reads_bounded_chunks_of_its_columns_and_streams_them_to_disk(tmp_path: Path) -> None:
    """What a worker runs: batches of at most 10,000 rows, of the model's columns only (the string
    id is never parsed into a batch), and with a memory setting of 0 bytes each is converted and
    appended to the share's files as it arrives: the builder holds none when the read ends."""
    paths = _write(tmp_path, [25_000], seed=2, empty=False)
    x, y, _ = _truth(paths)
    read = get_data_source(read_csv(str(tmp_path), backend="local"), **KW, need_labels=True).worker_reads(1, True)[0]
    sizes = [(b.num_rows, b.schema.names) for b in read.batches()]
    assert [n for n, _ in sizes] == [10_000, 10_000, 5_000]
    assert all(names == [*XCOLS, "y"] for _, names in sizes)
    builder = read.fill(0)
    assert builder._items == [] and builder._held == 0
    feed = builder.finish()
    try:
        assert isinstance(feed, DiskFeed) and feed.num_rows == 25_000
        got_x, got_y = feed.read(0, 25_000)
        np.testing.assert_array_equal(np.stack(got_x, axis=1), x)
        np.testing.assert_array_equal(got_y[0], y)
    finally:
        feed.close()


def test_column_types_come_from_the_first_rows_and_a_later_row_that_differs_names_the_fix(tmp_path: Path) -> None:
    """A label of whole numbers in the first 12,000 rows, then 1.5: the chunks are parsed with the
    sample's int64, so the read fails naming the file and dtype=; with dtype={"y": "float64"}
    every row is read, as pandas reads the whole file."""
    frame = _frame(12_001, seed=3)
    frame["y"] = np.arange(12_001).astype(object)
    frame.loc[12_000, "y"] = 1.5
    frame.to_csv(tmp_path / "a.csv", index=False)
    source = get_data_source(read_csv(str(tmp_path), backend="local"), **KW, need_labels=True)
    assert dict(source.origin.dtypes)["y"] == "int64"
    with pytest.raises(ValueError, match=r"read_csv: '.*a\.csv': .*column types of the first rows \(.*'y': "
                                         r"'int64'.*pass dtype=\{column: type\} to read_csv"):
        source.worker_reads(1, True)[0].load(None)
    fixed = get_data_source(read_csv(str(tmp_path), backend="local", dtype={"y": "float64"}), **KW, need_labels=True)
    feed = fixed.worker_reads(1, True)[0].load(None)
    np.testing.assert_array_equal(feed.y[0], pd.read_csv(tmp_path / "a.csv")["y"].to_numpy())


def test_a_transform_forgets_the_files_and_unchunkable_arguments_read_frames_whole(tmp_path: Path) -> None:
    paths = _write(tmp_path, [40, 30], seed=4)
    shards = read_csv(str(tmp_path), backend="local")
    for got, path in zip(shards.collect(), paths, strict=False):
        pd.testing.assert_frame_equal(got, pd.read_csv(path))
    moved = shards.transform_shard(lambda df: df.assign(y=df["y"] * 2))
    assert file_origin(moved) is None and file_origin(shards) is not None
    assert not isinstance(get_data_source(moved, **KW, need_labels=True), FileShardsSource)
    assert file_origin(read_csv(str(tmp_path), backend="local", nrows=5)) is None
    (tmp_path / "j").mkdir()
    pd.read_csv(paths[0]).to_json(tmp_path / "j" / "a.json", orient="records")
    assert file_origin(read_json(str(tmp_path / "j"), backend="local")) is None  # not JSON lines: whole
    assert len(read_json(str(tmp_path / "j"), backend="local").collect()[0]) == 40


# ---------------------------------------------------------------- bad input, on the driver


def test_bad_columns_and_files_fail_on_the_driver_naming_them(orca_context: Any, tmp_path: Path) -> None:
    _write(tmp_path / "d", [30], seed=5)
    shards = read_csv(str(tmp_path / "d"), backend="spark")
    est = NumpyEstimator.from_numpy(backend="spark")
    try:
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"data: feature column 'features' not found; the CSV file .*part-00000"
                                             r"\.csv' has columns \['x0', 'x1', 'x2', 'x3', 'y', 'id'\]\. Fix "
                                             r"feature_cols"):
            est.fit(shards, feature_cols=["features"], label_cols=["y"], batch_size=8)
        with pytest.raises(ValueError, match=r"data: label column 'label' not found"):
            est.evaluate(shards, feature_cols=XCOLS, label_cols=["label"])
        only_x = read_csv(str(tmp_path / "d"), backend="spark", usecols=XCOLS)
        with pytest.raises(ValueError, match=r"validation_data: label column 'y' not found.*\(read with "
                                             r"usecols=\['x0', 'x1', 'x2', 'x3'\]\)\. Fix feature_cols/label_cols or "
                                             r"read_csv's usecols="):
            est.fit(shards, **KW, batch_size=8, validation_data=only_x)
        with pytest.raises(ValueError, match=r"give label_cols=\[...\]"):
            est.fit(shards, feature_cols=XCOLS, batch_size=8)
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "a.csv").write_text("x0,x1,x2,x3,y\n")
        (tmp_path / "empty" / "b.csv").write_text("")
        with pytest.raises(ValueError, match=r"data is empty \(0 rows in its 2 CSV file\(s\)\)"):
            est.fit(read_csv(str(tmp_path / "empty")), **KW, batch_size=8)
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "a.csv").write_text("x0,x1\n1,2\n")
        with pytest.raises(ValueError, match=r"read_csv: '.*a\.csv' could not be read \(.*\); check the files and "
                                             r"the arguments given to read_csv"):
            read_csv(str(tmp_path / "bad"), usecols=["nope"])
        assert time.monotonic() - start < 10
        assert est._group is None  # no worker was started
    finally:
        est.shutdown()


# ---------------------------------------------------------------- both launchers


@pytest.mark.timeout(420)
@pytest.mark.parametrize("backend", ["spark", "ray"])
def test_a_fit_on_csv_xshards_trains_as_one_process(spark: Any, request: pytest.FixtureRequest, tmp_path: Path,
                                                    backend: str) -> None:
    """3 CSV files of 50, 170 and 81 rows and an empty one, as 2 partitions, on 2 workers (uneven
    shares, their counts known only once read: on Ray the actors meet on them): full-batch
    gradient descent does not depend on who holds which row, so 3 epochs end at 3 full-batch
    steps computed here, to 1e-12, with the shares in memory and streamed to disk alike; evaluate
    gives the loss of those weights and predict the rows in order. The same rows as one JSON-lines
    file, shared by the two workers chunk by chunk, train to the same weights. The CSV frames are
    never built."""
    from orca.core import OrcaContext

    paths = _write(tmp_path / "csv", [50, 170, 81], seed=6)
    x, y, _ = _truth(paths)
    lines = tmp_path / "json" / "all.jsonl"
    lines.parent.mkdir()
    pd.concat([pd.read_csv(p) for p in paths]).to_json(lines, orient="records", lines=True, double_precision=15)
    as_json = pd.read_json(lines, lines=True)  # (JSON keeps 15 digits: its own truth)
    jx, jy = as_json[XCOLS].to_numpy(), as_json["y"].to_numpy()
    form = "spark" if backend == "spark" else "ray"
    if backend == "ray":
        request.getfixturevalue("ray_runtime")
    shards = read_csv(str(tmp_path / "csv"), backend=form, num_shards=2)
    if form == "spark":
        shards = shards.cache()  # so that any frame built would be seen (cached) after
    want_w, want_b = _gd(x, y, 3, 0.1)

    def run(data: Any, memory_mb: float) -> tuple[Any, ...]:
        OrcaContext.worker_data_memory_mb = memory_mb
        est = NumpyEstimator.from_numpy(lr=0.1, backend=backend)
        try:
            est.set_state({"w": np.zeros(NUM_FEATURES), "b": np.zeros(1)})
            hist = est.fit(data, epochs=3, batch_size=301, shuffle=False, **KW)
            mse = est.evaluate(data, batch_size=64, **KW)["val_loss"]
            return est.get_model(), hist, mse, est
        finally:
            OrcaContext.worker_data_memory_mb = 2048.0
            est.shutdown()

    for memory_mb in (2048.0, 0.001):
        model, hist, mse, _ = run(shards, memory_mb)
        assert [h["num_samples"] for h in hist] == [301] * 3
        np.testing.assert_allclose(model["w"], want_w, rtol=0, atol=1e-12)
        assert model["b"][0] == pytest.approx(want_b, abs=1e-12)
        assert mse == pytest.approx(float(np.mean((x @ want_w + want_b - y) ** 2)), rel=1e-9)
    assert _frames_built(shards, spark) == 0  # no worker, task or driver built a pandas frame of the data

    json_shards = read_json(str(lines), lines=True, backend=form)
    reads = get_data_source(json_shards, **KW, need_labels=True).worker_reads(2, True)
    assert [p.parts for r in reads for p in r.pieces] == [2, 2]  # one file, shared chunk by chunk
    model, hist, _, _ = run(json_shards, 2048.0)
    json_w, json_b = _gd(jx, jy, 3, 0.1)
    np.testing.assert_allclose(model["w"], json_w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(json_w, want_w, rtol=0, atol=1e-9)

    est = NumpyEstimator.from_numpy(lr=0.1, backend=backend)
    try:
        est.set_state({"w": json_w, "b": np.array([json_b])})
        out = est.predict(json_shards, feature_cols=XCOLS, batch_size=50)
        pred = np.concatenate([np.asarray(s["prediction"].tolist()).reshape(-1) for s in out.collect()])
        np.testing.assert_allclose(pred, jx @ json_w + json_b, rtol=0, atol=1e-5)  # float32 outputs, in row order
    finally:
        est.shutdown()
    if form == "spark":
        shards.uncache()
