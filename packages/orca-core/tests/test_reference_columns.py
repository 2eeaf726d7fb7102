"""DataFrame column types the reference's tests feed the Estimators (BigDL 2.x,
python/orca/test/bigdl/orca/learn/ray/tf/test_tf2estimator_ray_backend.py::test_dataframe_decimal_input)."""

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)


def test_a_decimal_column_reaches_the_model_as_float64(spark):
    from pyspark.sql import functions as F

    from orca.core.data._arrow import collect_arrow
    from orca.core.engine.convert import spark_select, table_to_part

    df = spark.createDataFrame([(30.2222, 1, [1.25, 2.5]), (-2.456, 0, [0.5, 0.75])], ["feature", "label", "pair"])
    df = df.withColumn("feature", F.col("feature").cast("decimal(38,2)"))
    df = df.withColumn("pair", F.col("pair").cast("array<decimal(10,2)>"))
    part = table_to_part(collect_arrow(spark_select(df, ["feature", "pair", "label"])), ["feature", "pair"], ["label"])
    feature, pair = part["x"]
    assert feature.dtype == np.float64 and pair.dtype == np.float64
    np.testing.assert_array_equal(feature, [30.22, -2.46])
    np.testing.assert_array_equal(pair, [[1.25, 2.5], [0.5, 0.75]])
    np.testing.assert_array_equal(part["y"][0], [1, 0])
