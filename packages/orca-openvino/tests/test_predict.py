"""predict equals the plain OpenVINO runtime on arrays, XShards and DataFrames, on both backends."""

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import F32, linear_model, reference, save_ir, two_in_two_out_model

from orca.core.data import XShards
from orca.openvino import Estimator

pytestmark = pytest.mark.timeout(300)
ATOL = 1e-5


@pytest.fixture(scope="module")
def xs():
    rng = np.random.default_rng(0)
    return rng.normal(size=(23, 4)).astype(np.float32)  # 23 rows: no batch size used here divides it


@pytest.fixture(scope="module")
def ab():
    rng = np.random.default_rng(1)
    return rng.normal(size=(19, 3)).astype(np.float32), rng.normal(size=(19, 2, 3)).astype(np.float32)


@pytest.fixture
def linear_est(backend, linear_ir, orca_context):
    est = Estimator.from_openvino(model_path=linear_ir, config=F32, backend=backend, workers_per_node=2)
    yield est
    est.shutdown()


def test_array_predictions_equal_the_plain_runtime(linear_est, xs):
    want = reference(linear_model(), xs)[0]
    got = linear_est.predict(xs, batch_size=4)
    assert got.shape == (23, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_batch_size_larger_than_the_data_and_not_dividing_it(linear_est, xs):
    want = reference(linear_model(), xs)[0]
    for bs in (5, 7, 64):
        np.testing.assert_allclose(linear_est.predict(xs, batch_size=bs), want, atol=ATOL, rtol=0)


def test_xshards_gain_a_prediction_key(linear_est, xs, backend):
    shards = XShards.partition({"x": xs}, num_shards=3)
    out = linear_est.predict(shards, batch_size=4).collect()
    assert len(out) == 3
    got = np.concatenate([s["prediction"] for s in out])
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in out]), xs)
    np.testing.assert_allclose(got, reference(linear_model(), xs)[0], atol=ATOL, rtol=0)


def test_dataframe_gains_a_prediction_column_and_keeps_its_columns(linear_est, xs, spark):
    df = spark.createDataFrame(pd.DataFrame({"id": np.arange(len(xs)), "x": list(xs)})).repartition(3)
    out = linear_est.predict(df, feature_cols=["x"], batch_size=3).toPandas().sort_values("id")
    assert list(out.columns) == ["id", "x", "prediction"]
    # the (n, 1) output: an ml DenseVector of one value a row, as the reference wrote it
    assert type(out["prediction"].iloc[0]).__name__ == "DenseVector"
    np.testing.assert_allclose(np.stack(out["prediction"].to_numpy()), reference(linear_model(), xs)[0], atol=ATOL, rtol=0)


def test_two_inputs_two_outputs_as_arrays_and_shards(backend, two_io_ir, ab, orca_context):
    a, b = ab
    want = reference(two_in_two_out_model(), [a, b])
    est = Estimator.from_openvino(model_path=two_io_ir, config=F32, backend=backend)
    try:
        got = est.predict([a, b], batch_size=4)
        assert isinstance(got, list) and len(got) == 2
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        # input_cols maps arrays given in another order to the model's inputs
        swapped = est.predict([b, a], batch_size=6, input_cols=["b", "a"])
        np.testing.assert_allclose(swapped[0], want[0], atol=ATOL, rtol=0)
        shards = est.predict(XShards.partition({"x": [a, b]}, num_shards=2), output_cols=["s", "p"]).collect()
        np.testing.assert_allclose(np.concatenate([s["s"] for s in shards]), want[0], atol=ATOL, rtol=0)
        np.testing.assert_allclose(np.concatenate([s["p"] for s in shards]), want[1], atol=ATOL, rtol=0)
    finally:
        est.shutdown()


def test_two_inputs_two_outputs_on_a_dataframe_with_output_cols(two_io_ir, ab, spark):
    a, b = ab
    want = reference(two_in_two_out_model(), [a, b])
    pdf = pd.DataFrame({"id": np.arange(len(a)), "b": [r.tolist() for r in b], "a": list(a)})
    df = spark.createDataFrame(pdf).repartition(2)
    est = Estimator.from_openvino(model_path=two_io_ir, config=F32)
    # feature columns named like the model inputs feed those inputs, in any order
    out = est.predict(df, feature_cols=["b", "a"], output_cols=["s", "p"], batch_size=5).toPandas().sort_values("id")
    np.testing.assert_allclose(np.stack(out["s"].to_numpy()), want[0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(np.stack(out["p"].to_numpy()), want[1], atol=ATOL, rtol=0)


def test_model_with_a_fixed_batch_pads_the_last_batch(backend, tmp_path, xs, orca_context):
    est = Estimator.from_openvino(model_path=save_ir(linear_model(batch=4), tmp_path), config=F32, backend=backend)
    try:
        np.testing.assert_allclose(est.predict(xs, batch_size=10), reference(linear_model(), xs)[0], atol=ATOL)
    finally:
        est.shutdown()


def test_ray_actors_compile_once_and_keep_the_model_across_calls(orca_context, linear_ir, xs):
    est = Estimator.from_openvino(model_path=linear_ir, backend="ray", workers_per_node=2,
                                  config={**F32, "num_requests": 3})
    try:
        est.predict(xs, batch_size=4)
        compiled = _actor_models(est)
        assert len(compiled) == 2 and all(n == 3 for _, _, n in compiled)  # 3 requests in flight per worker
        est.predict(xs, batch_size=8)
        assert _actor_models(est) == compiled
        est.predict(xs, batch_size=8, config={"num_requests": 2})  # new settings: compiled again
        assert all(n == 2 for _, _, n in _actor_models(est))
    finally:
        est.shutdown()


def _actor_models(est):
    import cloudpickle

    probe = cloudpickle.dumps(lambda r: (r.pid, id(r.compiled), len(r.queue)))
    return est._group.call(cloudpickle.loads(probe))


def test_a_spark_worker_compiles_once_for_all_its_partitions(linear_ir, xs, spark):
    est = Estimator.from_openvino(model_path=linear_ir, config=F32)
    shards = XShards.partition({"x": xs}, num_shards=6, backend="spark")

    def tag(shard):  # runs in the Python worker that predicted the shard (RDD stages pipeline)
        from orca.core.engine.spark_backend import _RUNNERS

        return dict(shard, runners=[(r.pid, id(r.compiled)) for r in _RUNNERS.values()])

    out = est.predict(shards, batch_size=4).transform_shard(tag).collect()
    seen = {pair for s in out for pair in s["runners"]}
    pids = {pid for pid, _ in seen}
    assert seen, "the probe found no cached runner: nothing was checked"
    assert len(seen) == len(pids) < len(out)  # one compiled model per worker, reused across partitions
    np.testing.assert_allclose(np.concatenate([s["prediction"] for s in out]), reference(linear_model(), xs)[0],
                               atol=ATOL, rtol=0)


def _compiled_per_worker(df):
    """(pid, id of the compiled model) of every runner kept by the Python workers that read ``df``."""

    def look(batches):
        import os

        import pyarrow as pa

        from orca.core.engine.spark_backend import _RUNNERS

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()] * len(_RUNNERS),
                                          "compiled": [id(r.compiled) for r in _RUNNERS.values()]})

    return {(r.pid, r.compiled) for r in df.mapInArrow(look, "pid long, compiled long").collect()}


def test_dataframe_predicted_again_reuses_each_workers_compiled_model(linear_ir, xs, spark):
    df = spark.createDataFrame(pd.DataFrame({"x": list(xs)})).repartition(2).cache()
    est = Estimator.from_openvino(model_path=linear_ir, config=F32)
    first = est.predict(df, feature_cols=["x"]).toPandas()
    compiled = _compiled_per_worker(df)
    assert compiled, "the probe found no cached runner: nothing was checked"
    second = est.predict(df, feature_cols=["x"], batch_size=7).toPandas()
    assert compiled <= _compiled_per_worker(df)  # the same compiled models are still there
    np.testing.assert_array_equal(np.sort(np.stack(first["prediction"]), axis=0), np.sort(np.stack(second["prediction"]), axis=0))
    est.load(save_ir(linear_model(batch=4), Path(tempfile.mkdtemp())))  # another model: compiled anew
    est.predict(df, feature_cols=["x"]).toPandas()
    after = _compiled_per_worker(df)
    assert after - compiled, "a new model must be compiled, not served from the cache"
    df.unpersist()


def test_flat_rows_are_reshaped_to_the_inputs_row_shape(two_io_ir, ab, spark):
    a, b = ab
    want = reference(two_in_two_out_model(), [a, b])
    pdf = pd.DataFrame({"id": np.arange(len(a)), "a": list(a), "b": list(b.reshape(len(b), 6))})
    est = Estimator.from_openvino(model_path=two_io_ir, config=F32)
    out = est.predict(spark.createDataFrame(pdf), feature_cols=["a", "b"], output_cols=["s", "p"]).toPandas()
    out = out.sort_values("id")
    np.testing.assert_allclose(np.stack(out["p"].to_numpy()), want[1], atol=ATOL, rtol=0)
    np.testing.assert_allclose(est.predict([a, b.reshape(len(b), 6)])[0], want[0], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match=r"input 'b' takes rows of shape \[2, 3\]"):
        est.predict([a, b.reshape(len(b), 6)[:, :5]])


def test_save_and_load_keep_predictions(tmp_path, linear_ir, xs, orca_context):
    est = Estimator.from_openvino(model_path=linear_ir, config=F32)
    before = est.predict(xs)
    path = est.save(str(tmp_path / "again.xml"))
    fresh = Estimator.from_openvino(model_path=two_in_two_out_model(), config=F32)
    fresh.load(path)
    np.testing.assert_array_equal(fresh.predict(xs), before)


def pooled_classifier():
    """A fixed-batch image model as the guide's: ``[4, 3, 224, 224]`` -> mean over the pixels -> ``[4, 10]``."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([4, 3, 224, 224], np.float32, name="x")
    pooled = ops.reduce_mean(x, ops.constant(np.array([2, 3], np.int64)), False)
    w = np.random.default_rng(2).normal(size=(3, 10)).astype(np.float32)
    return ov.Model([ops.matmul(pooled, ops.constant(w), False, False)], [x], "pooled")


def test_the_reference_sample_runs_as_written(orca_context, tmp_path):
    """The user guide's OpenVINO sample: a [20, 4, 3, 224, 224] array is 20 batches of 4 images for
    a model of batch 4; the result keeps the batches, [20, 4, 10], equal to the plain runtime on
    each batch, from an array and from an XShards."""
    model = pooled_classifier()
    model_path = save_ir(model, tmp_path)

    # --- as in the user guide
    est = Estimator.from_openvino(model_path=model_path)

    # ndarray
    input_data = np.random.random([20, 4, 3, 224, 224])
    result = est.predict(input_data)

    # xshards
    shards = XShards.partition({"x": input_data})
    result_shards = est.predict(shards)
    # ---

    try:
        collected = result_shards.collect()
    finally:
        est.shutdown()
    want = np.stack([reference(model, [batch.astype(np.float32)])[0] for batch in input_data])
    assert result.shape == (20, 4, 10)
    np.testing.assert_allclose(result, want, rtol=2e-2, atol=2e-2)  # the guide's call keeps OpenVINO's default precision
    assert all(s["x"].ndim == 5 for s in collected)  # each shard's batches as they were
    np.testing.assert_allclose(np.concatenate([s["prediction"] for s in collected]), result, rtol=2e-2, atol=2e-2)
