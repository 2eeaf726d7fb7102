"""``orca.core.data.chunks``, the reference's ``bigdl.orca.data.image.utils.chunks``: a partition's
records grouped into shards of ``size``, as the reference's tests build SparkXShards with it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orca.core.data import SparkXShards, chunks


def test_rows_are_grouped_in_order_and_the_last_chunk_holds_the_rest() -> None:
    assert list(chunks(range(12), 5)) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    assert list(chunks(iter("abcdef"), 2)) == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert list(chunks(range(3))) == [[0, 1, 2]]  # the reference's default size: 10
    assert list(chunks([], 4)) == []


def test_each_chunk_can_be_read_again_after_the_next_is_taken() -> None:
    it = chunks(range(7), 3)
    first, second = next(it), next(it)
    assert (first, second) == ([0, 1, 2], [3, 4, 5])
    assert list(first) == [0, 1, 2] and list(it) == [[6]]


@pytest.mark.parametrize("size", [0, -1, 2.5, True, "3"])
def test_a_size_that_is_not_a_positive_int_is_refused_when_called(size: Any) -> None:
    with pytest.raises(ValueError, match=rf"size must be an int >= 1 .*got {size!r}"):
        chunks(range(5), size)


@pytest.mark.timeout(120)
def test_shards_built_in_spark_map_partitions_as_the_reference_did(orca_context: Any) -> None:
    rdd = orca_context.range(0, 110, numSlices=2).map(lambda x: np.array([x] * 50))
    shards = SparkXShards(rdd.mapPartitions(lambda it: chunks(it, 5)).map(
        lambda x: {"x": np.stack([list(i) for i in x])}))
    got = shards.collect()
    # 55 rows per partition: 11 chunks of 5 each
    assert [s["x"].shape for s in got] == [(5, 50)] * 22
    rows = np.concatenate([s["x"] for s in got])
    np.testing.assert_array_equal(rows, np.repeat(np.arange(110)[:, None], 50, axis=1))
