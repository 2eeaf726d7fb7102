"""The reference's context, as its callers use it: ``sc = init_orca_context(...)`` is the running
SparkContext (``SparkSession(sc)``, ``SQLContext(sc)``, ``sc.parallelize``, ``sc.stop()``) that also
answers as Orca's context; ``object_store_memory="1g"``; and the reference's class settings
(``train_data_store``, ``pandas_read_backend``, ``serialize_data_creator``).

The in-process tests use the session's shared local context (real Spark ``local[2]``); stopping
a context and starting Ray with an object store of a given size run in a fresh interpreter
(``run_python``), once for the module, several tests reading its report.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from orca.core import OrcaContext, OrcaSettings, init_orca_context
from orca.core import context as context_module
from orca.core.context import _object_store_bytes, _validate
from orca.core.plugin import warnings_reset
from orca.core.testing.clusters import run_python

# ----------------------------------------------------------------------------- the SparkContext


@pytest.mark.timeout(120)
def test_init_orca_context_returns_the_running_spark_context(orca_context: Any) -> None:
    from pyspark import SparkContext

    assert isinstance(orca_context, SparkContext)
    assert SparkContext._active_spark_context is orca_context
    assert OrcaContext.get_spark_context() is orca_context
    assert orca_context.spark_session().sparkContext is orca_context
    assert orca_context.master == "local[2]"
    assert orca_context.getConf().get("spark.driver.host") == "127.0.0.1"


@pytest.mark.timeout(120)
def test_spark_session_and_rdds_of_the_returned_context_compute(orca_context: Any) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession(orca_context)
    df = spark.createDataFrame([(1, 2.0), (2, 3.5), (3, -1.5)], ["a", "b"])
    row = df.selectExpr("sum(a) AS a", "sum(b) AS b", "count(*) AS n").collect()[0]
    assert (row["a"], row["b"], row["n"]) == (6, 4.0, 3)
    assert orca_context.parallelize(range(100), 4).sum() == 4950
    assert orca_context.parallelize(range(10), 3).map(lambda x: x * x).collect() == [x * x for x in range(10)]


@pytest.mark.timeout(120)
def test_sql_context_of_the_returned_context_works(orca_context: Any) -> None:
    sql = pytest.importorskip("pyspark.sql")
    if not hasattr(sql, "SQLContext"):
        pytest.skip("this pyspark has no SQLContext")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pyspark deprecates SQLContext
        sqlcontext = sql.SQLContext(orca_context)
    df = sqlcontext.createDataFrame([(1, "a"), (5, "b")], ["x", "k"])
    assert df.selectExpr("sum(x)").collect()[0][0] == 6
    assert sqlcontext.sparkSession.sparkContext is orca_context


@pytest.mark.timeout(60)
def test_the_returned_context_answers_as_the_orca_context(orca_context: Any) -> None:
    assert isinstance(orca_context, OrcaContext)
    assert orca_context.cluster_mode == "local" and orca_context.runtime == "spark"
    assert orca_context.cores == 2 and orca_context.memory == "2g"
    assert orca_context.has_spark is True
    assert isinstance(orca_context.settings, OrcaSettings)
    assert orca_context.settings.worker_timeout_s == 180.0
    assert orca_context.spark_session() is OrcaContext.get_spark_session()
    assert len(orca_context.context_id) == 8
    assert orca_context.ray_mode() == "embedded"
    assert {"spark_session", "ray_runtime", "settings", "parallelize"} <= set(dir(orca_context))
    with pytest.raises(AttributeError, match="no_such_attribute"):
        orca_context.no_such_attribute  # noqa: B018 - the read is the test


@pytest.mark.timeout(60)
def test_a_second_init_returns_the_same_object(orca_context: Any) -> None:
    assert init_orca_context() is orca_context
    assert init_orca_context(cluster_mode="local", cores=2) is orca_context
    assert OrcaContext.active() is orca_context
    assert OrcaContext.current() is orca_context


# ----------------------------------------------------------------------------- object_store_memory


@pytest.mark.parametrize(("value", "size"), [
    ("1g", 1 << 30), ("2G", 2 << 30), ("512m", 512 << 20), ("1024k", 1 << 20), ("1.5g", 3 << 29),
    (1073741824, 1 << 30), ("1073741824", 1 << 30), (None, None),
])
def test_object_store_memory_is_parsed_to_bytes(value: Any, size: int | None) -> None:
    assert _object_store_bytes(value) == size
    _, extra = _validate("local", 2, "2g", 1, "spark", None, {"object_store_memory": value})
    assert extra["object_store_memory"] == size


@pytest.mark.parametrize("value", ["lots", "", "1x", "-1g", 0, -5, True, 1.5])
def test_object_store_memory_that_is_not_a_size_is_refused_before_anything_starts(value: Any) -> None:
    with pytest.raises(ValueError, match=r"object_store_memory=.* is not a size; give bytes as an int"):
        init_orca_context(object_store_memory=value)


# ----------------------------------------------------------------------------- settings


@pytest.fixture
def fresh_settings(orca_context: Any) -> Iterator[None]:
    """Undo what a test assigns on the class; the one-time warnings count from zero."""
    before = dict(vars(orca_context.settings))
    try:
        with warnings_reset():
            yield
    finally:
        context_module._class_settings.clear()
        for name, value in before.items():
            setattr(orca_context.settings, name, value)


def _assign(name: str, value: Any) -> list[str]:
    """``OrcaContext.<name> = value``; the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        setattr(OrcaContext, name, value)
    return [str(w.message) for w in seen if issubclass(w.category, UserWarning)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("store", "read_back", "memory_mb"), [
    ("DRAM", "DRAM", math.inf), ("dram", "DRAM", math.inf), ("DISK_2", "DISK_2", 0.0),
    ("disk_10", "DISK_10", 0.0), ("PMEM", "PMEM", math.inf),
])
def test_train_data_store_sets_worker_data_memory_mb(orca_context: Any, fresh_settings: None, store: str,
                                                     read_back: str, memory_mb: float) -> None:
    from orca.core.engine.spill import feed_memory_bytes

    _assign("train_data_store", store)
    assert OrcaContext.train_data_store == read_back
    assert orca_context.settings.train_data_store == read_back
    assert orca_context.settings.worker_data_memory_mb == memory_mb
    assert feed_memory_bytes() == (sys.maxsize if memory_mb == math.inf else 0)
    settings, _ = _validate("local", 2, "2g", 1, "spark", None, {})  # the next context's
    assert (settings.train_data_store, settings.worker_data_memory_mb) == (read_back, memory_mb)
    settings, _ = _validate("local", 2, "2g", 1, "spark", None, {"train_data_store": store})
    assert (settings.train_data_store, settings.worker_data_memory_mb) == (read_back, memory_mb)
    OrcaContext.worker_data_memory_mb = 512
    assert OrcaContext.train_data_store is None  # Orca's own setting now decides
    assert orca_context.settings.worker_data_memory_mb == 512


@pytest.mark.timeout(60)
def test_a_disk_store_streams_a_share_to_local_disk_and_dram_keeps_it(orca_context: Any, fresh_settings: None,
                                                                      tmp_path: Any) -> None:
    from orca.core.engine.feed import Feed
    from orca.core.engine.spill import DiskFeed, FeedBuilder, feed_memory_bytes, part_bytes

    part = {"x": [np.arange(40, dtype=np.float32).reshape(20, 2)], "y": [np.arange(20, dtype=np.float32)]}
    built = {}
    for store in ("DISK_2", "DRAM"):
        OrcaContext.train_data_store = store
        builder: FeedBuilder[Any] = FeedBuilder(feed_memory_bytes(), directory=str(tmp_path))
        builder.add(part, part_bytes(part))
        built[store] = builder.finish()
    assert isinstance(built["DISK_2"], DiskFeed) and built["DISK_2"].num_rows == 20
    assert built["DISK_2"].window_bytes == 1 << 20  # the smallest window (worker_data_memory_mb=0)
    assert isinstance(built["DRAM"], Feed) and built["DRAM"].num_rows == 20
    built["DISK_2"].close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", ["SSD", "DISK_", "DISK_x", "DISK_2_3", "", 2])
def test_train_data_store_refuses_other_values_naming_the_valid_ones(fresh_settings: None, bad: Any) -> None:
    with pytest.raises(ValueError, match=r"train_data_store must be 'DRAM', 'DISK_n' \(n an integer"):
        OrcaContext.train_data_store = bad


@pytest.mark.timeout(60)
def test_pmem_warns_once_that_it_is_kept_as_dram(fresh_settings: None) -> None:
    first = _assign("train_data_store", "PMEM")
    assert len(first) == 1 and "persistent memory" in first[0]
    assert _assign("train_data_store", "pmem") == []


@pytest.mark.timeout(60)
def test_pandas_read_backend_spark_is_accepted_with_one_warning(fresh_settings: None) -> None:
    assert OrcaContext.pandas_read_backend == "pandas"
    assert _assign("pandas_read_backend", "pandas") == []
    first = _assign("pandas_read_backend", "SPARK")
    assert len(first) == 1 and "pandas_read_backend='spark' has no effect" in first[0]
    assert OrcaContext.pandas_read_backend == "spark"
    assert _assign("pandas_read_backend", "spark") == []  # once
    assert _assign("pandas_read_backend", "pandas") == [] and OrcaContext.pandas_read_backend == "pandas"
    with pytest.raises(ValueError, match="pandas_read_backend must be 'pandas' or 'spark', got 'dask'"):
        OrcaContext.pandas_read_backend = "dask"


@pytest.mark.timeout(60)
def test_serialize_data_creator_is_accepted_with_one_warning(fresh_settings: None) -> None:
    assert OrcaContext.serialize_data_creator is False
    assert _assign("serialize_data_creator", False) == []
    first = _assign("serialize_data_creator", True)
    assert len(first) == 1 and "data creators run concurrently" in first[0]
    assert OrcaContext.serialize_data_creator is True
    assert _assign("serialize_data_creator", True) == []  # once
    with pytest.raises(ValueError, match="serialize_data_creator must be True or False, got 'yes'"):
        OrcaContext.serialize_data_creator = "yes"


# ----------------------------------------------------------------------------- own driver

DRIVER = """
import json, os, sys, time, warnings
from pyspark import SparkContext
from pyspark.sql import SparkSession
from orca.core import OrcaContext, init_orca_context, stop_orca_context
from orca.core.testing.clusters import context_processes as ours, pid_alive


def left(running):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(pid_alive(int(p)) for p in running):
        time.sleep(0.2)
    return sorted(n for p, n in running.items() if pid_alive(int(p)))

report = {}
# 1. sc.stop(), as the reference's tests end a context: all of Orca stops, nothing is left
sc = init_orca_context(cores=2, memory="1g", jvm_class_cache=False)
report["sc_type"] = isinstance(sc, SparkContext)
sc.ray_runtime()
running = ours(sc)
report["running"] = sorted(set(running.values()))
sc.stop()
report["left_after_sc_stop"] = left(running)
report["active_after_sc_stop"] = OrcaContext.active() is not None
report["gateway_after_sc_stop"] = SparkContext._gateway is not None
# 2. a new context starts after it
sc2 = init_orca_context(cores=2, memory="1g", jvm_class_cache=False)
report["new_is_old"] = sc2 is sc
report["new_sum"] = sc2.parallelize(range(5), 2).sum()
# 3. SparkSession(sc).stop(): the context stops, the JVM it still needs ends at the next stop
running = ours(sc2)
SparkSession(sc2).stop()
report["active_after_session_stop"] = OrcaContext.active() is not None
stop_orca_context()
report["left_after_session_stop"] = left(running)
# 4. runtime="ray": the OrcaContext itself, its object store as asked
ctx = init_orca_context(runtime="ray", cores=1, object_store_memory="1g")
import ray
report["ray_type"] = type(ctx).__name__
report["ray_same"] = init_orca_context(runtime="ray") is ctx and OrcaContext.active() is ctx
report["object_store"] = ray.cluster_resources().get("object_store_memory")
running = ours(ctx)
stop_orca_context()
report["left_after_ray"] = left(running)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """One driver: sc.stop(); a new context; SparkSession(sc).stop(); a Ray with a 1g object store."""
    return dict(run_python(DRIVER, timeout_s=420))


@pytest.mark.timeout(480)
def test_sc_stop_stops_the_whole_context_and_leaves_nothing(report: dict[str, Any]) -> None:
    assert report["sc_type"] is True
    assert {"java", "raylet", "gcs_server"} <= set(report["running"])
    assert report["left_after_sc_stop"] == []
    assert report["active_after_sc_stop"] is False
    assert report["gateway_after_sc_stop"] is False


@pytest.mark.timeout(480)
def test_a_new_context_starts_after_sc_stop(report: dict[str, Any]) -> None:
    assert report["new_is_old"] is False
    assert report["new_sum"] == 10


@pytest.mark.timeout(480)
def test_spark_session_stop_stops_the_context_and_the_next_stop_ends_its_jvm(report: dict[str, Any]) -> None:
    assert report["active_after_session_stop"] is False
    assert report["left_after_session_stop"] == []


@pytest.mark.timeout(480)
def test_ray_runtime_returns_the_orca_context_with_the_object_store_asked(report: dict[str, Any]) -> None:
    assert report["ray_type"] == "OrcaContext"
    assert report["ray_same"] is True
    assert abs(report["object_store"] - (1 << 30)) < (1 << 20)  # Ray reports bytes
    assert report["left_after_ray"] == []
