"""read_csv / read_json / read_parquet: pandas arguments, paths, globs, URLs, missing paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from orca.core.data import LocalXShards, RayXShards, SparkXShards, read_csv, read_json, read_parquet

pytestmark = pytest.mark.timeout(120)


def _frame(start: int, rows: int) -> pd.DataFrame:
    ids = np.arange(start, start + rows)
    return pd.DataFrame({"id": ids, "value": ids * 1.5, "name": [f"n{i}" for i in ids]})


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("csv")
    _frame(0, 4).to_csv(root / "a.csv", index=False)
    _frame(4, 3).to_csv(root / "b.csv", index=False)
    _frame(7, 2).to_csv(root / "c.csv", index=False)
    (root / "_SUCCESS").write_text("")
    return root


def _merged(shards: Any) -> pd.DataFrame:
    return pd.concat(shards.collect(), ignore_index=True)


def test_read_csv_of_a_directory_reads_every_file_on_spark(spark: Any, csv_dir: Path) -> None:
    shards = read_csv(str(csv_dir))
    assert isinstance(shards, SparkXShards)
    assert shards.num_partitions() == 2
    pd.testing.assert_frame_equal(_merged(shards), _frame(0, 9))


def test_read_csv_num_shards_is_capped_by_the_number_of_files(spark: Any, csv_dir: Path) -> None:
    shards = read_csv(str(csv_dir), num_shards=10)
    assert shards.num_partitions() == 3
    assert shards.num_rows_per_partition() == [4, 3, 2]


def test_read_csv_of_a_glob(spark: Any, csv_dir: Path) -> None:
    shards = read_csv(str(csv_dir / "[ab].csv"))
    assert len(shards) == 7


def test_read_csv_of_an_fsspec_url(spark: Any, csv_dir: Path) -> None:
    shards = read_csv(f"file://{csv_dir}/c.csv")
    assert _merged(shards)["id"].tolist() == [7, 8]


def test_read_csv_passes_usecols(spark: Any, csv_dir: Path) -> None:
    merged = _merged(read_csv(str(csv_dir), usecols=["id", "name"]))
    assert list(merged.columns) == ["id", "name"]


def test_read_csv_passes_dtype(spark: Any, csv_dir: Path) -> None:
    merged = _merged(read_csv(str(csv_dir), dtype={"id": "float32"}))
    assert merged["id"].dtype == np.float32
    assert merged["id"].tolist() == list(range(9))


def test_read_csv_passes_names_and_header(spark: Any, csv_dir: Path) -> None:
    merged = _merged(read_csv(str(csv_dir / "a.csv"), names=["i", "v", "n"], header=0))
    assert list(merged.columns) == ["i", "v", "n"]
    assert merged["i"].tolist() == [0, 1, 2, 3]


def test_read_csv_header_none_keeps_the_header_line_as_data(spark: Any, csv_dir: Path) -> None:
    merged = _merged(read_csv(str(csv_dir / "c.csv"), header=None))
    assert list(merged.columns) == [0, 1, 2]
    assert merged[0].tolist() == ["id", "7", "8"]


def test_read_csv_of_a_missing_path_raises_naming_it(spark: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "no_such.csv")
    with pytest.raises(FileNotFoundError, match="no_such.csv"):
        read_csv(missing)


def test_read_csv_of_a_glob_matching_nothing_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"\*\.csv"):
        read_csv(str(tmp_path / "*.csv"), backend="local")


@pytest.mark.parametrize("backend", ["ray", "local"])
def test_read_csv_on_other_backends(backend: str, csv_dir: Path, request: pytest.FixtureRequest) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_runtime")
    shards = read_csv(str(csv_dir), num_shards=3, backend=backend)
    assert isinstance(shards, {"ray": RayXShards, "local": LocalXShards}[backend])
    pd.testing.assert_frame_equal(_merged(shards), _frame(0, 9))


def test_read_json_lines(spark: Any, tmp_path: Path) -> None:
    _frame(0, 3).to_json(tmp_path / "a.json", orient="records", lines=True)
    _frame(3, 2).to_json(tmp_path / "b.json", orient="records", lines=True)
    merged = _merged(read_json(str(tmp_path), lines=True, orient="records"))
    pd.testing.assert_frame_equal(merged, _frame(0, 5))


def test_read_json_passes_dtype(spark: Any, tmp_path: Path) -> None:
    _frame(0, 3).to_json(tmp_path / "a.json", orient="columns")
    merged = _merged(read_json(str(tmp_path / "a.json"), dtype={"id": "float64"}))
    assert merged["id"].dtype == np.float64 and merged["id"].tolist() == [0.0, 1.0, 2.0]


def test_read_json_of_a_missing_path_raises_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="gone.json"):
        read_json(str(tmp_path / "gone.json"), backend="local")


def test_read_parquet_passes_columns(spark: Any, tmp_path: Path) -> None:
    _frame(0, 5).to_parquet(tmp_path / "a.parquet", index=False)
    merged = _merged(read_parquet(str(tmp_path / "a.parquet"), columns=["name", "id"]))
    assert list(merged.columns) == ["name", "id"]
    assert merged["id"].tolist() == [0, 1, 2, 3, 4]


def test_read_parquet_of_a_directory_written_by_spark(spark: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "pq")
    spark.range(0, 10, numPartitions=2).selectExpr("id", "id * 2 as twice").write.parquet(out)
    merged = _merged(read_parquet(out)).sort_values("id", ignore_index=True)
    assert merged["twice"].tolist() == [i * 2 for i in range(10)]


def test_read_parquet_of_a_missing_path_raises_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing_dir"):
        read_parquet(str(tmp_path / "missing_dir"), backend="local")
