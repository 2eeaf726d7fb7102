"""A worker's share on local disk (orca.core.engine.spill): the same lock-step plan and, without
shuffling, the same batches as the in-memory feed; a window shuffle that sees every row once."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from orca.core.engine.feed import Feed, check_shuffle
from orca.core.engine.spill import DiskFeed, FeedBuilder, part_bytes


def _parts(rows: int, sizes: list[int], seed: int = 0) -> list[dict[str, list[np.ndarray]]]:
    """Parts (as Arrow record batches arrive) of rows whose first feature is the row's index."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.arange(rows, dtype=np.float32)[:, None], rng.normal(size=(rows, 2)).astype(np.float32)], 1)
    img = rng.normal(size=(rows, 2, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=rows).astype(np.int64)
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == rows
    return [{"x": [x[a:b], img[a:b]], "y": [y[a:b]]} for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _build(parts: list[dict[str, list[np.ndarray]]], memory_bytes: int | None, tmp_path: Any) -> Any:
    builder: FeedBuilder[Any] = FeedBuilder(memory_bytes, directory=str(tmp_path))
    for p in parts:
        builder.add(p, part_bytes(p))
    return builder.finish()


def _same_batch(a: Any, b: Any) -> None:
    assert (a.size, a.weight, a.global_size) == (b.size, b.weight, b.global_size)
    for u, v in zip(a.x + a.y, b.x + b.y, strict=True):
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(u, v)


def test_a_share_over_the_memory_budget_goes_to_disk_and_its_folder_goes_on_close(tmp_path: Any) -> None:
    parts = _parts(100, [30, 0, 45, 25])
    small = _build(parts, None, tmp_path)
    assert isinstance(small, Feed) and small.num_rows == 100
    assert isinstance(_build(parts, 10**9, tmp_path), Feed)
    disk = _build(parts, 1000, tmp_path)  # 1000 bytes: the second part crosses it
    assert isinstance(disk, DiskFeed) and disk.num_rows == 100
    assert os.path.isdir(disk.folder) and os.path.dirname(disk.folder) == str(tmp_path)
    assert sorted(os.listdir(disk.folder)) == ["x0.bin", "x1.bin", "y0.bin"]
    assert os.path.getsize(os.path.join(disk.folder, "x1.bin")) == 100 * 6 * 4
    disk.close()
    assert not os.path.exists(disk.folder)


@pytest.mark.parametrize("window_rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("counts, rank", [([100], 0), ([100, 37, 0], 0), ([12, 100], 1), ([100, 101], 0)])
def test_without_shuffle_the_disk_feed_gives_the_in_memory_feeds_batches(tmp_path: Any, window_rows: int,
                                                                       counts: list[int], rank: int) -> None:
    """The same steps, local batch sizes, loss weights and rows, also when batches span windows and
    when other ranks hold more or fewer rows (exact global batches)."""
    parts = _parts(100, [30, 45, 25])
    memory = Feed.concat(parts)
    disk = _build(parts, 0, tmp_path)
    disk._window_rows = window_rows
    for batch_size in (1, 16, 64, 500):
        want = list(memory.train_batches(counts, rank, batch_size, epoch=2, shuffle=False))
        got = list(disk.train_batches(counts, rank, batch_size, epoch=2, shuffle=False))
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _same_batch(a, b)
        for a, b in zip(disk.batches(batch_size), memory.batches(batch_size), strict=True):
            _same_batch(a, b)


@pytest.mark.parametrize("window_rows", [5, 32, 1000])
def test_the_window_shuffle_sees_every_row_once_and_its_order_follows_epoch_and_seed(tmp_path: Any,
                                                                                    window_rows: int) -> None:
    parts = _parts(203, [100, 103])
    memory = Feed.concat(parts)
    disk = _build(parts, 0, tmp_path)
    disk._window_rows = window_rows
    counts = [203, 150]

    def order(epoch: int, seed: int) -> np.ndarray:
        batches = list(disk.train_batches(counts, 0, 32, epoch=epoch, shuffle=True, seed=seed))
        plan = list(memory.train_batches(counts, 0, 32, epoch=epoch, shuffle=True, seed=seed))
        assert [(b.size, b.weight, b.global_size) for b in batches] == [(b.size, b.weight, b.global_size) for b in plan]
        rows = np.concatenate([b.x[0][:, 0] for b in batches]).astype(int)
        for b in batches:  # each row's columns stay together
            np.testing.assert_array_equal(b.x[1], memory.x[1][b.x[0][:, 0].astype(int)])
            np.testing.assert_array_equal(b.y[0], memory.y[0][b.x[0][:, 0].astype(int)])
        return rows

    first = order(0, 0)
    assert sorted(first) == list(range(203))
    np.testing.assert_array_equal(order(0, 0), first)
    assert not np.array_equal(order(1, 0), first)
    assert not np.array_equal(order(0, 1), first)
    assert not np.array_equal(first, np.arange(203))


@pytest.mark.parametrize("window_rows", [5, 32, 1000])
@pytest.mark.parametrize("counts, rank", [([203, 150], 0), ([150, 203], 1), ([203, 0, 7], 0)])
def test_each_shuffle_mode_gives_the_same_batches_in_memory_and_on_disk(tmp_path: Any, window_rows: int,
                                                                       counts: list[int], rank: int) -> None:
    """For the same seed and epoch, ``"full"`` on disk reads the rows in the in-memory exact
    shuffle's order and ``"window"`` in memory follows the disk's window plan: the same batches,
    row for row, so a fit does not depend on where a worker's share lives. ``True`` is the exact
    shuffle in memory and the window shuffle on disk."""
    parts = _parts(203, [100, 103])
    memory = Feed.concat(parts)
    disk = _build(parts, 0, tmp_path)
    disk._window_rows = window_rows
    window_bytes = window_rows * memory.row_bytes
    assert memory.row_bytes == disk.row_bytes == 44
    for epoch, seed in ((0, 0), (3, 7)):
        kw = {"epoch": epoch, "seed": seed, "window_bytes": window_bytes}
        for mem_mode, disk_mode in (("full", "full"), ("window", "window"), (True, "full"), ("window", True)):
            want = list(memory.train_batches(counts, rank, 32, shuffle=mem_mode, **kw))
            got = list(disk.train_batches(counts, rank, 32, shuffle=disk_mode, **kw))
            assert len(got) == len(want) > 0
            for a, b in zip(got, want, strict=True):
                _same_batch(a, b)
    # the window shuffle in memory sees every row once and is not the exact shuffle's order
    window = np.concatenate([b.x[0][:, 0] for b in memory.train_batches(counts, rank, 32, shuffle="window",
                                                                            window_bytes=window_bytes)])
    full = np.concatenate([b.x[0][:, 0] for b in memory.train_batches(counts, rank, 32, shuffle="full")])
    assert sorted(window.astype(int)) == list(range(203))
    assert not np.array_equal(window, full)


@pytest.mark.parametrize("bad", ["sometimes", "Full", 1, None, 0.5])
def test_a_shuffle_that_is_not_a_mode_is_refused_naming_the_modes(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"shuffle=.* is not a shuffle mode: use True .* 'full' .* 'window' .* False"):
        check_shuffle(bad)
    for good in (True, False, "full", "window"):
        assert check_shuffle(good) is good


def test_rows_of_another_shape_are_refused_with_the_column_named(tmp_path: Any) -> None:
    parts = _parts(10, [5, 5])
    parts[1]["x"][1] = np.zeros((5, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"x array 1 has rows of shape \(3, 3\) here and \(2, 3\) in the rows before"):
        _build(parts, 0, tmp_path)


def test_a_share_with_string_columns_stays_in_memory_with_a_warning(tmp_path: Any, caplog: Any) -> None:
    """Python objects have no raw layout on disk: such a share is kept whole (and said so)."""
    parts = [{"x": [np.array(["a", "bb", "c"], dtype=object)], "y": [np.arange(3.0)]} for _ in range(3)]
    with caplog.at_level("WARNING", logger="orca.core.engine.spill"):
        feed = _build(parts, 0, tmp_path)
    assert isinstance(feed, Feed) and feed.num_rows == 9 and list(feed.x[0][:3]) == ["a", "bb", "c"]
    assert "columns of Python objects (strings), which cannot go to disk" in caplog.text
    assert os.listdir(tmp_path) == []


def test_rows_of_a_wider_dtype_than_the_first_are_refused(tmp_path: Any) -> None:
    """Writing float64 rows into a float32 column would lose precision silently."""
    parts = _parts(10, [5, 5])
    parts[1]["x"][0] = parts[1]["x"][0].astype(np.float64)
    with pytest.raises(ValueError, match="x array 0 is float64 here and float32 in the rows before"):
        _build(parts, 0, tmp_path)
    parts[1]["x"][0] = parts[1]["x"][0].astype(np.float16)  # a narrower one joins exactly
    assert _build(parts, 0, tmp_path).num_rows == 10


def test_gathering_rows_from_disk_maps_a_bounded_region_at_a_time(tmp_path: Any, monkeypatch: Any) -> None:
    """``shuffle="full"`` from disk gathers rows through maps of at most MAP_BYTES each (so a share
    far larger than an address-space limit can be read): with a 3-row region, any order of rows,
    repeats and the share's last rows come back exactly."""
    from orca.core.engine import spill

    parts = _parts(203, [100, 103])
    memory = Feed.concat(parts)
    disk = _build(parts, 0, tmp_path)
    monkeypatch.setattr(spill, "MAP_BYTES", 3 * 12)  # x0 rows are 12 bytes: 3 rows a region
    rows = np.array([202, 0, 5, 5, 201, 100, 3, 150, 1])
    for col, want in zip(disk.x + disk.y, memory.x + memory.y, strict=True):
        np.testing.assert_array_equal(col.take(rows, disk.num_rows), want[rows])
    assert disk.x[0].take(np.zeros(0, np.int64), disk.num_rows).shape == (0, 3)
