"""The engine's pure parts: the lock-step plan, mergeable metrics, balanced slicing, Arrow
conversion and the input dispatcher (no workers needed)."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from orca.core.engine.adapters import get_data_source
from orca.core.engine.callbacks import latest_checkpoint
from orca.core.engine.convert import arrow_column_to_numpy, check_class_indices, check_finite, shard_to_part
from orca.core.engine.feed import Feed, balanced_slices, split_sizes, steps_per_epoch
from orca.core.engine.history import History
from orca.core.engine.metrics import AUC, MAE, MSE, Accuracy, make_metrics, merge_states


def test_every_worker_takes_the_same_number_of_steps_whatever_its_share():
    counts = [10, 0, 3]
    feeds = [Feed([np.arange(c, dtype=np.float32)], [np.arange(c)]) for c in counts]
    plans = [list(f.train_batches(counts, r, batch_size=4, shuffle=False)) for r, f in enumerate(feeds)]
    steps = steps_per_epoch(13, 4)
    assert [len(p) for p in plans] == [steps] * 3
    for s in range(steps):
        sizes = [p[s].size for p in plans]
        assert all(p[s].global_size == sum(sizes) for p in plans)
        # loss weights make the mean over workers equal the global-batch mean
        assert sum(p[s].weight * p[s].size for p in plans if p[s].size) / 3 == pytest.approx(
            sum(sz * sz for sz in sizes) / sum(sizes))
    assert sum(b.size for p in plans for b in p) == 13


def test_equal_shares_have_unit_weights_and_cover_every_row_once():
    counts = [8, 8]
    feed = Feed([np.arange(8)], [np.arange(8)])
    batches = list(feed.train_batches(counts, 0, batch_size=4, epoch=3, shuffle=True, seed=1))
    assert [b.weight for b in batches] == [1.0] * 4
    assert sorted(np.concatenate([b.x[0] for b in batches]).tolist()) == list(range(8))


def test_split_sizes_match_numpy_array_split():
    for n in range(12):
        for parts in range(1, 5):
            assert split_sizes(n, parts) == [len(a) for a in np.array_split(np.arange(n), parts)]


def test_balanced_slices_cut_exact_equal_row_ranges_across_parts():
    refs = [("a", 5), ("b", 0), ("c", 2), ("d", 7)]
    out = balanced_slices(refs, 3)
    rows = [sum(hi - lo for _, lo, hi in s) for s in out]
    assert rows == [5, 5, 4]  # sized as np.array_split
    assert out[0] == [("a", 0, 5)]
    assert out[1] == [("c", 0, 2), ("d", 0, 3)]
    assert out[2] == [("d", 3, 7)]


def test_one_part_for_two_workers_is_split_between_them():
    assert [sum(hi - lo for _, lo, hi in s) for s in balanced_slices([("only", 9)], 2)] == [5, 4]


def test_metrics_merge_exactly_instead_of_averaging_means():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(50, 3))
    target = rng.integers(0, 3, size=50)
    chunks = [(0, 7), (7, 50)]  # very uneven shares
    states = []
    for lo, hi in chunks:
        metrics = make_metrics(["accuracy", "mse", "mae"])
        for m in metrics:
            m.update(pred[lo:hi], target[lo:hi] if m.name == "accuracy" else pred[lo:hi] * 0.5)
        states.append({m.name: m.state for m in metrics})
    merged = merge_states(make_metrics(["accuracy", "mse", "mae"]), states)
    assert merged["accuracy"] == pytest.approx(np.mean(pred.argmax(1) == target))
    assert merged["mse"] == pytest.approx(np.mean((pred * 0.5) ** 2))
    assert merged["mae"] == pytest.approx(np.mean(np.abs(pred * 0.5)))


def test_auc_matches_the_rank_formula_with_ties():
    from sklearn.metrics import roc_auc_score

    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.4, 0.9, 0.2])
    labels = np.array([0, 0, 1, 1, 1, 1, 0])
    a, b = AUC(), AUC()
    a.update(scores[:3, None], labels[:3])
    b.update(scores[3:, None], labels[3:])
    a.merge(b.state)
    assert a.result() == pytest.approx(roc_auc_score(labels, scores))


def test_make_metrics_rejects_unknown_names_and_types():
    with pytest.raises(ValueError, match="unknown metric name 'f1x'"):
        make_metrics("f1x")
    with pytest.raises(TypeError, match="not supported"):
        make_metrics([3])
    assert [m.name for m in make_metrics({"a": Accuracy(), "e": MSE, "m": MAE()})] == ["a", "e", "m"]


def test_arrow_columns_become_shaped_arrays():
    col = pa.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    assert arrow_column_to_numpy(col, "img").shape == (2, 2, 2)
    assert arrow_column_to_numpy(pa.array([1, 2, 3]), "n").tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="different lengths"):
        arrow_column_to_numpy(pa.array([[1.0], [1.0, 2.0]]), "ragged")
    with pytest.raises(ValueError, match="null"):
        arrow_column_to_numpy(pa.array([1.0, None]), "gaps")


def test_a_column_of_several_batches_is_joined_by_one_copy_into_a_writable_array() -> None:
    """The batches a worker holds become one numpy array per column by a single copy (each batch a
    view, then joined): the values, in order, writable (a model may write into its batches);
    batches of different row shapes, or a null in any, are refused naming the column."""
    chunks = [pa.array([[float(i), float(i) + 0.5] for i in range(n, n + 3)]) for n in (0, 3, 6)]
    got = arrow_column_to_numpy(pa.chunked_array(chunks), "v")
    np.testing.assert_array_equal(got, [[i, i + 0.5] for i in range(9)])
    assert got.flags.writeable and got.flags.owndata
    with pytest.raises(ValueError, match=r"column 'v' holds arrays of different shapes \(\(1,\)\.\.\(2,\)\)"):
        arrow_column_to_numpy(pa.chunked_array([pa.array([[1.0, 2.0]]), pa.array([[1.0]])]), "v")
    with pytest.raises(ValueError, match="column 'n' has 1 null"):
        arrow_column_to_numpy(pa.chunked_array([pa.array([1.0]), pa.array([None, 2.0])]), "n")


def test_finite_checks_find_nan_and_inf_but_not_finite_values_whose_sum_overflows() -> None:
    big = np.full(4, np.finfo(np.float32).max, np.float32)  # finite; their float32 sum is inf
    check_finite({"x": [big], "y": [np.zeros(4)]}, "data", ["x"], ["y"])
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones((5, 3))
        x[3, 1] = bad
        with pytest.raises(ValueError, match=r"data: feature column 'x' holds 1 NaN/Inf value\(s\) \(the first in "
                                             r"row 3\)"):
            check_finite({"x": [x], "y": [np.zeros(5)]}, "data", ["x"], ["y"])
    both = np.array([np.inf, -np.inf, 1.0])  # their sum is NaN
    with pytest.raises(ValueError, match=r"label column 'y' holds 2 NaN/Inf"):
        check_finite({"x": [np.ones(3)], "y": [both]}, "data", ["x"], ["y"])


def test_pandas_and_dict_shards_become_parts():
    frame = pd.DataFrame({"a": [1.0, 2.0], "v": [np.ones(3), np.zeros(3)], "y": [0, 1]})
    part = shard_to_part(frame, ["a", "v"], ["y"])
    assert [a.shape for a in part["x"]] == [(2,), (2, 3)]
    with pytest.raises(KeyError, match="'nope'"):
        shard_to_part(frame, ["nope"], None)
    part = shard_to_part({"x": (np.zeros((4, 2)), np.ones(4)), "y": np.ones(4)}, None, None)
    assert len(part["x"]) == 2 and len(part["y"]) == 1


def test_dispatcher_names_the_argument_and_what_is_accepted():
    with pytest.raises(TypeError, match="validation_data of type str is not supported"):
        get_data_source("file.csv", need_labels=True, arg="validation_data")
    with pytest.raises(ValueError, match="no labels"):
        get_data_source(np.zeros((3, 2)), need_labels=True)
    with pytest.raises(ValueError, match="empty"):
        get_data_source({"x": np.zeros((0, 2)), "y": np.zeros(0)}, need_labels=True)
    with pytest.raises(TypeError, match="not numeric"):
        get_data_source({"x": np.array(["a", "b"]), "y": np.zeros(2)}, need_labels=True)
    assert get_data_source(lambda config, bs: None, need_labels=True).is_creator


def test_history_is_a_list_of_epochs_and_a_dict_of_lists():
    h = History([{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0}])
    assert h[-1]["loss"] == 1.0
    assert h.history == {"epoch": [1, 2], "loss": [2.0, 1.0]}


def test_latest_checkpoint_picks_the_highest_epoch(tmp_path):
    for name in ["model-2.ckpt", "model-10.ckpt", "model-9.ckpt", "notes.txt"]:
        (tmp_path / name).write_bytes(b"x")
    assert latest_checkpoint(str(tmp_path)).endswith("model-10.ckpt")
    with pytest.raises(FileNotFoundError):
        latest_checkpoint(str(tmp_path / "missing"))


@pytest.mark.parametrize(("labels", "ignore", "first", "count"), [
    (np.array([0, 1, 2, 3, 7]), None, "3", 2),  # above the classes
    (np.array([[0, -1], [2, 1]]), None, "-1", 1),  # negative, any shape
    (np.array([0.0, 1.0, 1.5]), None, "1.5", 1),  # a float label that is no index
    (np.array([0, -100, 9]), -100, "9", 1),  # the ignored value is not out of range
])
def test_class_indices_out_of_range_are_named_with_the_fix(labels, ignore, first, count) -> None:
    with pytest.raises(ValueError, match=rf"CE: label {first} is out of range for a model with 3 outputs.*"
                                         rf"\({count} label\(s\).*Re-index the labels to 0\.\.2"):
        check_class_indices(labels, 3, "CE", ignore)


def test_class_indices_in_range_pass() -> None:
    check_class_indices(np.array([0, 1, 2, 2, 0]), 3, "CE")
    check_class_indices(np.array([0.0, 2.0]), 3, "CE")
    check_class_indices(np.array([0, -100, 2]), 3, "CE", ignore_index=-100)
    check_class_indices(np.zeros((0,), np.int64), 3, "CE")
