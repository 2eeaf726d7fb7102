"""XShards behaviour, the same on every form: Spark (local[2]), Ray and in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from orca.core.data import LocalXShards, RayXShards, SparkXShards, XShards

pytestmark = pytest.mark.timeout(120)

FORMS = {"spark": SparkXShards, "ray": RayXShards, "local": LocalXShards}


@pytest.fixture(params=["spark", "ray", "local"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each XShards form; starts the engine it needs (session-scoped)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    elif request.param == "ray":
        request.getfixturevalue("ray_runtime")
    return request.param


def _dict_data(rows: int = 10) -> dict[str, np.ndarray]:
    return {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "y": np.arange(rows)}


def _frame(rows: int = 10) -> pd.DataFrame:
    return pd.DataFrame({"a": np.arange(rows), "b": np.arange(rows) * 0.5, "c": [f"s{i}" for i in range(rows)]})


# ---------------------------------------------------------------------- partition
def test_partition_builds_the_form_asked_for(backend: str) -> None:
    shards = XShards.partition(_dict_data(), num_shards=2, backend=backend)
    assert isinstance(shards, FORMS[backend])
    assert shards.num_partitions() == 2


def test_partition_dict_round_trips_values(backend: str) -> None:
    data = _dict_data()
    parts = XShards.partition(data, num_shards=3, backend=backend).collect()
    assert len(parts) == 3
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in parts]), data["x"])
    np.testing.assert_array_equal(np.concatenate([p["y"] for p in parts]), data["y"])


def test_partition_splits_rows_into_balanced_contiguous_ranges(backend: str) -> None:
    shards = XShards.partition(np.arange(10), num_shards=3, backend=backend)
    assert shards.num_rows_per_partition() == [4, 3, 3]
    assert [p.tolist() for p in shards.collect()] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_partition_nested_structure_keeps_its_shape(backend: str) -> None:
    data = ({"a": np.arange(6), "b": np.ones((6, 2))}, [np.arange(6) * 2])
    parts = XShards.partition(data, num_shards=2, backend=backend).collect()
    assert isinstance(parts[0], tuple) and isinstance(parts[0][0], dict) and isinstance(parts[0][1], list)
    np.testing.assert_array_equal(np.concatenate([p[1][0] for p in parts]), np.arange(6) * 2)
    assert [p[0]["b"].shape for p in parts] == [(3, 2), (3, 2)]


def test_partition_rejects_arrays_of_different_lengths() -> None:
    with pytest.raises(ValueError, match=r"data\['x'\]: 10, data\['y'\]: 8"):
        XShards.partition({"x": np.zeros(10), "y": np.zeros(8)}, num_shards=2, backend="local")


def test_partition_rejects_a_non_array_leaf() -> None:
    with pytest.raises(TypeError, match=r"data\['x'\] is a str"):
        XShards.partition({"x": "abc"}, backend="local")


def test_partition_defaults_to_spark_default_parallelism(spark: Any) -> None:
    shards = XShards.partition(np.arange(8))
    assert isinstance(shards, SparkXShards)
    assert shards.num_partitions() == spark.sparkContext.defaultParallelism == 2


def test_partition_without_a_context_choice_is_local_when_told() -> None:
    shards = XShards.partition(np.arange(5), backend="local")
    assert isinstance(shards, LocalXShards) and shards.num_partitions() == 2


def test_from_list_keeps_shards_in_order(backend: str) -> None:
    shards = XShards.from_list(["a", "b", "c"], backend=backend)
    assert shards.collect() == ["a", "b", "c"]
    assert shards.num_partitions() == 3


# ---------------------------------------------------------------------- transform, len, getitem
def test_transform_shard_applies_fn_with_args(backend: str) -> None:
    shards = XShards.partition(_dict_data(), num_shards=2, backend=backend)
    out = shards.transform_shard(lambda d, k: {"x": d["x"] * k, "y": d["y"]}, 3).collect()
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in out]), _dict_data()["x"] * 3)


def test_len_counts_rows_of_arrays(backend: str) -> None:
    assert len(XShards.partition(_dict_data(13), num_shards=3, backend=backend)) == 13


def test_len_counts_rows_of_pandas_frames(backend: str) -> None:
    shards = XShards.from_list([_frame(4), _frame(7)], backend=backend)
    assert len(shards) == 11
    assert shards.num_rows_per_partition() == [4, 7]


def test_len_counts_elements_of_other_shards(backend: str) -> None:
    assert len(XShards.from_list([[1, 2, 3], [4]], backend=backend)) == 4


def test_getitem_selects_a_key_of_every_shard(backend: str) -> None:
    y = XShards.partition(_dict_data(), num_shards=2, backend=backend)["y"]
    np.testing.assert_array_equal(np.concatenate(y.collect()), np.arange(10))


def test_getitem_selects_pandas_columns(backend: str) -> None:
    cols = XShards.from_list([_frame(3), _frame(2)], backend=backend)[["a", "c"]].collect()
    assert list(cols[0].columns) == ["a", "c"] and len(cols[1]) == 2


def test_getitem_unknown_key_raises_key_error_naming_available_keys(backend: str) -> None:
    shards = XShards.partition(_dict_data(), num_shards=2, backend=backend)
    with pytest.raises(KeyError, match=r"'z'.*available keys: \['x', 'y'\]"):
        shards["z"]


# ---------------------------------------------------------------------- repartition
def test_repartition_dict_shards_keeps_rows_in_order_and_balances(backend: str) -> None:
    data = _dict_data(11)
    shards = XShards.partition(data, num_shards=2, backend=backend).repartition(4)
    assert shards.num_partitions() == 4
    assert shards.num_rows_per_partition() == [3, 3, 3, 2]
    parts = shards.collect()
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in parts]), data["x"])
    np.testing.assert_array_equal(np.concatenate([p["y"] for p in parts]), data["y"])


def test_repartition_pandas_shards_keeps_all_rows_and_balances(backend: str) -> None:
    frames = [_frame(9), _frame(1), _frame(2)]
    shards = XShards.from_list(frames, backend=backend).repartition(2)
    assert shards.num_rows_per_partition() == [6, 6]
    merged = pd.concat(shards.collect())
    pd.testing.assert_frame_equal(merged, pd.concat(frames))


def test_repartition_to_more_partitions_than_rows_gives_empty_shards(backend: str) -> None:
    parts = XShards.partition({"x": np.arange(2)}, num_shards=1, backend=backend).repartition(3).collect()
    assert [p["x"].tolist() for p in parts] == [[0], [1], []]


def test_repartition_of_other_objects_on_spark_redistributes_them(spark: Any) -> None:
    shards = XShards.from_list([1, 2, 3, 4], backend="spark").repartition(2)
    assert shards.num_partitions() == 2
    assert sorted(shards.collect()) == [1, 2, 3, 4]


def test_repartition_of_other_objects_on_local_raises() -> None:
    with pytest.raises(ValueError, match="cannot repartition 4 local shards of type int into 2"):
        XShards.from_list([1, 2, 3, 4], backend="local").repartition(2)


# ---------------------------------------------------------------------- split, zip
def test_split_tuple_shards_into_one_xshards_per_element(backend: str) -> None:
    x, y = np.arange(8), np.arange(8) * 10
    first, second = XShards.partition((x, y), num_shards=2, backend=backend).split()
    np.testing.assert_array_equal(np.concatenate(first.collect()), x)
    np.testing.assert_array_equal(np.concatenate(second.collect()), y)
    assert first.num_partitions() == second.num_partitions() == 2


def test_split_of_non_sequence_shards_raises(backend: str) -> None:
    with pytest.raises(TypeError, match="tuples or lists; got dict"):
        XShards.partition(_dict_data(), num_shards=2, backend=backend).split()


def test_zip_pairs_shards(backend: str) -> None:
    a = XShards.partition(np.arange(6), num_shards=2, backend=backend)
    b = XShards.partition(np.arange(6) * 2, num_shards=2, backend=backend)
    pairs = a.zip(b).collect()
    assert [(p[0].tolist(), p[1].tolist()) for p in pairs] == [([0, 1, 2], [0, 2, 4]), ([3, 4, 5], [6, 8, 10])]


def test_zip_with_different_partition_counts_raises(backend: str) -> None:
    a = XShards.partition(np.arange(6), num_shards=2, backend=backend)
    b = XShards.partition(np.arange(6), num_shards=3, backend=backend)
    with pytest.raises(ValueError, match="this one has 2, the other has 3"):
        a.zip(b)


# ---------------------------------------------------------------------- schema, cache, pickle
def test_get_schema_of_pandas_shards_lists_columns_and_dtypes(backend: str) -> None:
    schema = XShards.from_list([_frame(3)], backend=backend).get_schema()
    assert schema["columns"] == ["a", "b", "c"]
    assert schema["dtypes"] == {"a": "int64", "b": "float64", "c": "object"}


def test_get_schema_of_dict_shards_lists_keys_shapes_dtypes(backend: str) -> None:
    schema = XShards.partition(_dict_data(), num_shards=2, backend=backend).get_schema()
    assert schema["keys"] == ["x", "y"]
    assert schema["shapes"] == {"x": (None, 3), "y": (None,)}
    assert schema["dtypes"] == {"x": "float32", "y": "int64"}


def test_cache_and_uncache_return_the_same_shards(backend: str) -> None:
    shards = XShards.partition(np.arange(4), num_shards=2, backend=backend)
    assert shards.cache() is shards
    assert [p.tolist() for p in shards.collect()] == [[0, 1], [2, 3]]
    assert shards.uncache() is shards


def test_spark_cache_persists_the_rdd(spark: Any) -> None:
    shards = XShards.partition(np.arange(4), num_shards=2, backend="spark")
    assert shards.cache().rdd.is_cached
    assert not shards.uncache().rdd.is_cached


def test_save_and_load_pickle_round_trip(backend: str, tmp_path: Path) -> None:
    data = _dict_data(7)
    XShards.partition(data, num_shards=3, backend=backend).save_pickle(str(tmp_path / "shards"))
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "part-00000-00000.pkl",
        "part-00001-00000.pkl",
        "part-00002-00000.pkl",
    ]
    loaded = XShards.load_pickle(str(tmp_path / "shards"), backend=backend, allow_pickle=True)
    assert isinstance(loaded, FORMS[backend]) and loaded.num_partitions() == 3
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in loaded.collect()]), data["x"])


def test_save_and_load_keep_frames_arrays_and_dicts_as_data_only(backend: str, tmp_path: Path) -> None:
    """``save`` writes Parquet for DataFrame shards and ``.npz`` for array / dict shards, where the
    shards live; ``load`` gives back equal shards (dtypes, strings, shapes) without unpickling."""
    data = _dict_data(7)
    XShards.partition(data, num_shards=3, backend=backend).save(str(tmp_path / "dicts"))
    assert sorted(p.name for p in (tmp_path / "dicts").iterdir()) == [
        "part-00000-00000.npz", "part-00001-00000.npz", "part-00002-00000.npz"]
    loaded = XShards.load(str(tmp_path / "dicts"), backend=backend)
    assert isinstance(loaded, FORMS[backend]) and loaded.num_partitions() == 3
    for key in ("x", "y"):
        got = np.concatenate([p[key] for p in loaded.collect()])
        assert got.dtype == data[key].dtype
        np.testing.assert_array_equal(got, data[key])
    frames = [_frame(2), _frame(3)]
    XShards.from_list(frames, backend=backend).save(f"file://{tmp_path}/frames")
    back = XShards.load(f"file://{tmp_path}/frames", backend=backend).collect()
    for got, want in zip(back, frames, strict=True):
        pd.testing.assert_frame_equal(got, want)
    XShards.partition(np.arange(6, dtype=np.int16), num_shards=2, backend=backend).save(str(tmp_path / "arrays"))
    arrays = XShards.load(str(tmp_path / "arrays"), backend=backend).collect()
    assert [a.tolist() for a in arrays] == [[0, 1, 2], [3, 4, 5]] and arrays[0].dtype == np.int16


def test_save_refuses_what_only_a_pickle_can_hold_and_load_names_load_pickle_for_pickles(tmp_path: Path) -> None:
    for shard, why in (([1, 2], "save_pickle"), ({"s": np.array(["a", None], dtype=object)}, "Python objects"),
                       ({1: np.zeros(2)}, "string keys")):
        with pytest.raises(TypeError, match=why):
            XShards.from_list([shard], backend="local").save(str(tmp_path / "bad"))
    XShards.from_list([_frame(2)], backend="local").save_pickle(str(tmp_path / "pickles"))
    with pytest.raises(FileNotFoundError, match="load_pickle"):
        XShards.load(str(tmp_path / "pickles"), backend="local")


def test_load_pickle_accepts_fsspec_urls(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/frames"
    XShards.from_list([_frame(2), _frame(3)], backend="local").save_pickle(url)
    loaded = XShards.load_pickle(url, backend="local", allow_pickle=True)
    assert loaded.num_rows_per_partition() == [2, 3]


def test_load_pickle_of_a_missing_path_names_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="nope"):
        XShards.load_pickle(missing, backend="local", allow_pickle=True)


def test_load_pickle_refuses_without_allow_pickle_and_runs_nothing(tmp_path: Path) -> None:
    """A pickle that would create a file when loaded: without allow_pickle=True it is never opened."""
    import pickle

    marker = tmp_path / "pwned"
    (tmp_path / "evil").mkdir()

    class Evil:
        def __reduce__(self):  # runs on unpickling
            return (open, (str(marker), "w"))

    (tmp_path / "evil" / "part-00000-00000.pkl").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ValueError, match="allow_pickle=True"):
        XShards.load_pickle(str(tmp_path / "evil"), backend="local")
    assert not marker.exists()


# ---------------------------------------------------------------------- converting forms
def test_to_local_collects_every_shard(backend: str) -> None:
    local = XShards.partition(np.arange(5), num_shards=2, backend=backend).to_local()
    assert isinstance(local, LocalXShards)
    assert [p.tolist() for p in local.shards] == [[0, 1, 2], [3, 4]]
