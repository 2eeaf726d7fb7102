"""XShards <-> Spark DataFrames (through Arrow) and Spark <-> Ray conversion, on real engines."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from orca.core.data import RayXShards, SparkXShards, XShards

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------- to_spark_df
def test_to_spark_df_of_dict_shards_makes_array_columns_equal_to_input(spark: Any) -> None:
    x = np.arange(24, dtype=np.float64).reshape(8, 3)
    y = np.arange(8, dtype=np.int64)
    df = XShards.partition({"x": x, "y": y}, num_shards=3).to_spark_df()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("x", "array<double>"),
        ("y", "bigint"),
    ]
    rows = sorted(df.collect(), key=lambda r: r["y"])
    np.testing.assert_array_equal(np.array([r["x"] for r in rows]), x)
    np.testing.assert_array_equal(np.array([r["y"] for r in rows]), y)


def test_to_spark_df_of_3d_arrays_makes_nested_array_columns(spark: Any) -> None:
    x = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    df = XShards.partition({"x": x}, num_shards=1).to_spark_df()
    assert df.schema["x"].dataType.simpleString() == "array<array<float>>"
    np.testing.assert_array_equal(np.array([r["x"] for r in df.collect()], dtype=np.float32), x)


def test_to_spark_df_of_pandas_shards_keeps_columns_and_rows(spark: Any) -> None:
    frames = [pd.DataFrame({"a": [1, 2], "s": ["u", "v"]}), pd.DataFrame({"a": [3], "s": ["w"]})]
    df = XShards.from_list(frames).to_spark_df()
    assert df.columns == ["a", "s"]
    assert sorted((r["a"], r["s"]) for r in df.collect()) == [(1, "u"), (2, "v"), (3, "w")]


def test_to_spark_df_of_other_shards_raises_type_error(spark: Any) -> None:
    with pytest.raises(TypeError, match="pandas DataFrames or dicts of numpy arrays; got int"):
        XShards.from_list([1, 2]).to_spark_df()


def test_to_spark_df_from_ray_shards(ray_runtime: Any, spark: Any) -> None:
    shards = XShards.partition({"v": np.arange(5)}, num_shards=2, backend="ray")
    df = shards.to_spark_df()
    assert sorted(r["v"] for r in df.collect()) == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------- from_spark_df
def test_from_spark_df_gives_one_pandas_frame_per_partition(spark: Any) -> None:
    df = spark.range(0, 10, numPartitions=3).selectExpr("id", "id * 0.5 as half", "cast(id as string) as s")
    shards = XShards.from_spark_df(df)
    assert isinstance(shards, SparkXShards)
    assert shards.num_partitions() == 3
    frames = shards.collect()
    assert all(isinstance(f, pd.DataFrame) for f in frames)
    merged = pd.concat(frames, ignore_index=True)
    assert merged["id"].tolist() == list(range(10))
    assert merged["half"].tolist() == [i * 0.5 for i in range(10)]
    assert merged["s"].tolist() == [str(i) for i in range(10)]


def test_from_spark_df_with_num_shards_repartitions(spark: Any) -> None:
    df = spark.range(0, 12, numPartitions=1)
    shards = XShards.from_spark_df(df, num_shards=3)
    assert shards.num_partitions() == 3
    assert len(shards) == 12


def test_from_spark_df_empty_partitions_give_empty_frames_with_columns(spark: Any) -> None:
    df = spark.range(0, 1, numPartitions=1).repartition(3)
    frames = XShards.from_spark_df(df).collect()
    assert sorted(len(f) for f in frames) == [0, 0, 1]
    assert all(list(f.columns) == ["id"] for f in frames)


def test_from_spark_df_array_column_round_trips_with_to_spark_df(spark: Any) -> None:
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    df = XShards.partition({"x": x, "i": np.arange(6)}, num_shards=2).to_spark_df()
    frames = XShards.from_spark_df(df).collect()
    merged = pd.concat(frames, ignore_index=True).sort_values("i")
    np.testing.assert_array_equal(np.stack(merged["x"].to_numpy()), x)


# ---------------------------------------------------------------------- Spark <-> Ray
def test_spark_to_ray_keeps_values_and_partitions(spark: Any, ray_runtime: Any) -> None:
    data = {"x": np.arange(30, dtype=np.float32).reshape(10, 3), "y": np.arange(10)}
    spark_shards = XShards.partition(data, num_shards=3, backend="spark")
    ray_shards = spark_shards.to_ray()
    assert isinstance(ray_shards, RayXShards) and len(ray_shards.refs) == 3
    parts = ray_shards.collect()
    np.testing.assert_array_equal(np.concatenate([p["x"] for p in parts]), data["x"])
    assert ray_shards.num_rows_per_partition() == [4, 3, 3]


def test_spark_to_ray_objects_outlive_the_spark_python_workers(spark: Any, ray_runtime: Any) -> None:
    ray_shards = XShards.partition(np.arange(6), num_shards=2, backend="spark").to_ray()
    # a later Spark job on the same workers must not free them either
    XShards.partition(np.arange(4), num_shards=2, backend="spark").to_ray()
    doubled = ray_shards.transform_shard(lambda a: a * 2).collect()
    assert [d.tolist() for d in doubled] == [[0, 2, 4], [6, 8, 10]]


def test_ray_to_spark_keeps_values(spark: Any, ray_runtime: Any) -> None:
    spark_shards = XShards.partition(np.arange(7), num_shards=3, backend="ray").to_spark()
    assert isinstance(spark_shards, SparkXShards) and spark_shards.num_partitions() == 3
    assert [p.tolist() for p in spark_shards.collect()] == [[0, 1, 2], [3, 4], [5, 6]]


def test_zip_of_spark_and_ray_shards_pairs_them(spark: Any, ray_runtime: Any) -> None:
    a = XShards.partition(np.arange(4), num_shards=2, backend="ray")
    b = XShards.partition(np.arange(4) + 10, num_shards=2, backend="spark")
    pairs = a.zip(b).collect()
    assert [(p[0].tolist(), p[1].tolist()) for p in pairs] == [([0, 1], [10, 11]), ([2, 3], [12, 13])]


def test_transform_shard_on_spark_is_lazy(spark: Any) -> None:
    calls = spark.sparkContext.accumulator(0)

    def count(shard: Any) -> Any:
        calls.add(1)
        return shard

    shards = XShards.partition(np.arange(4), num_shards=2, backend="spark").transform_shard(count)
    assert calls.value == 0
    shards.collect()
    assert calls.value == 2


def test_from_spark_df_public_map_in_arrow_route_gives_the_same_frames(spark: Any) -> None:
    from orca.core.data._arrow import spark_df_to_pandas_rdd, spark_df_to_pandas_rdd_map_in_arrow

    df = spark.range(0, 7, numPartitions=2).selectExpr("id", "id * 3 as t")
    fast = spark_df_to_pandas_rdd(df).collect()
    public = spark_df_to_pandas_rdd_map_in_arrow(df).collect()
    assert len(fast) == len(public) == 2
    for a, b in zip(fast, public, strict=True):
        pd.testing.assert_frame_equal(a, b)


def test_from_spark_df_then_to_spark_df_round_trips_decimal_and_array_columns(spark: Any) -> None:
    df = spark.range(0, 2000, numPartitions=2).selectExpr(
        "id", "id * 2.0 as dec", "array(id, id + 1) as arr", "cast(id as string) as s"
    )
    back = XShards.from_spark_df(df).to_spark_df()
    got = sorted((r["id"], float(r["dec"]), list(r["arr"]), r["s"]) for r in back.collect())
    assert got == [(i, i * 2.0, [i, i + 1], str(i)) for i in range(2000)]
