"""Bad input is refused on the driver with a message that names the problem and the fix;
failures inside workers come back as one OrcaWorkerError; nothing is left running."""

import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import LinearNet, sgd
from torch import nn

from orca.core.engine import NotFittedError, OrcaWorkerError
from orca.torch import Estimator

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def frame(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    pdf = pd.DataFrame({"x": list(x), "y": x.sum(1), "cls": (x[:, 0] > 0).astype(float),
                        "name": ["a"] * 40})
    return spark.createDataFrame(pdf)


def linear(backend="ray", **kw):
    return Estimator.from_torch(model=LinearNet(), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                                workers_per_node=2, **kw)


def no_work_left(backend, orca_context):
    """No Spark job running and, on Ray, every CPU free again (the actors are gone). Workers an
    earlier test's clean ``shutdown()`` left warm for the next Estimator are ended first: an error
    never parks workers (only ``Estimator.shutdown`` does)."""
    sc = orca_context.spark_session().sparkContext
    assert sc.statusTracker().getActiveJobsIds() == []
    if backend == "ray" and orca_context.has_ray:
        import ray

        from orca.core import release_warm_workers

        release_warm_workers()

        deadline = time.monotonic() + 20
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == 2


@pytest.mark.parametrize("model", [42, nn.Linear, "model.pt"])
def test_model_that_is_neither_module_nor_creator_is_rejected(model):
    with pytest.raises(TypeError, match="nn.Module or a creator"):
        Estimator.from_torch(model=model, optimizer=sgd(0.1), loss=nn.MSELoss())


@pytest.mark.parametrize("model", [LinearNet(), lambda config: LinearNet()])
def test_an_optimizer_class_is_refused_on_the_driver_with_the_fix(model):
    """torch.optim.SGD itself (not an instance): refused at from_torch, not a worker's
    "'<' not supported between instances of 'dict' and 'float'" at the first fit."""
    with pytest.raises(TypeError, match=r"the class torch\.optim\.sgd\.SGD.*SGD\(model\.parameters\(\), lr=\.\.\.\)"):
        Estimator.from_torch(model=model, optimizer=torch.optim.SGD, loss=nn.MSELoss())


def test_optimizer_of_another_model_is_rejected():
    other = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="not the model's"):
        Estimator.from_torch(model=LinearNet(), optimizer=torch.optim.SGD(other.parameters(), lr=0.1),
                             loss=nn.MSELoss())


def test_batch_size_smaller_than_the_workers_is_rejected(orca_context, frame, backend):
    est = linear(backend)
    with pytest.raises(ValueError, match="smaller than the 2 workers"):
        est.fit(frame, batch_size=1, feature_cols=["x"], label_cols=["y"])
    no_work_left(backend, orca_context)


@pytest.mark.parametrize("cols,match", [(dict(feature_cols=["x"], label_cols=["nope"]), "label column 'nope'"),
                                        (dict(feature_cols=["x"]), "label_cols"),
                                        (dict(label_cols=["y"]), "feature_cols")])
def test_missing_or_unknown_columns_are_named(orca_context, frame, cols, match):
    with pytest.raises(ValueError, match=match):
        linear("spark").fit(frame, batch_size=8, **cols)


def test_string_label_column_is_refused_with_the_fix(frame):
    with pytest.raises(TypeError, match="StringIndexer"):
        linear("spark").fit(frame, batch_size=8, feature_cols=["x"], label_cols=["name"])


def test_unsupported_data_is_refused():
    with pytest.raises(TypeError, match="not supported"):
        linear("spark").fit([1, 2, 3], batch_size=8)
    with pytest.raises(ValueError, match="'y'"):
        linear("spark").fit({"z": np.zeros((4, 4))}, batch_size=2)


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="different numbers of rows"):
        linear("spark").fit({"x": np.zeros((8, 4), np.float32), "y": np.zeros(7, np.float32)}, batch_size=4)


def test_label_dtype_the_loss_cannot_take_fails_with_a_cast_hint(orca_context, frame, backend):
    est = Estimator.from_torch(model=nn.Linear(4, 2), optimizer=sgd(0.1), loss=nn.CrossEntropyLoss(),
                               backend=backend, workers_per_node=2)
    with pytest.raises(OrcaWorkerError, match="Cast the label") as info:
        est.fit(frame, batch_size=8, feature_cols=["x"], label_cols=["cls"])
    assert "Traceback" in info.value.worker_traceback
    est.shutdown()
    no_work_left(backend, orca_context)


def test_input_shape_mismatch_fails_with_the_shapes(orca_context, backend):
    est = Estimator.from_torch(model=nn.Linear(3, 1), optimizer=sgd(0.1), loss=nn.MSELoss(), backend=backend,
                               workers_per_node=2)
    data = {"x": np.zeros((16, 4), np.float32), "y": np.zeros((16, 1), np.float32)}
    with pytest.raises(OrcaWorkerError, match=r"input shape\(s\) \[\(\d+, 4\)\]"):
        est.fit(data, batch_size=8)
    est.shutdown()
    no_work_left(backend, orca_context)


def test_predict_without_any_model_raises_not_fitted():
    est = Estimator.from_torch(model=None, loss=nn.MSELoss())
    with pytest.raises(NotFittedError, match="no model"):
        est.predict(np.zeros((4, 4), np.float32))


def test_fit_without_optimizer_says_so(orca_context):
    est = Estimator.from_torch(model=LinearNet(), loss=nn.MSELoss(), backend="spark", workers_per_node=2)
    with pytest.raises(OrcaWorkerError, match="optimizer"):
        est.fit({"x": np.zeros((8, 4), np.float32), "y": np.zeros((8, 1), np.float32)}, batch_size=4)


def test_ray_workers_start_while_the_data_moves_and_a_data_failure_ends_them(orca_context, frame, monkeypatch):
    """On a cold start the ray backend launches its actors, moves the DataFrame into Ray meanwhile,
    and only then waits for them. A row that fails to compute on the way ends the actors that
    were only launched: the error reaches the driver and every CPU is free again."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, FloatType

    from orca.core.engine.ray_backend import RayWorkerGroup

    staged_while_starting = []
    slices = RayWorkerGroup.slices

    def spy(group, source, need_labels):
        if source is not None:
            staged_while_starting.append(group._starting is not None)
        return slices(group, source, need_labels)

    monkeypatch.setattr(RayWorkerGroup, "slices", spy)
    est = linear("ray")
    est.fit(frame, batch_size=8, feature_cols=["x"], label_cols=["y"])
    est.fit(frame, batch_size=8, feature_cols=["x"], label_cols=["y"])
    assert staged_while_starting == [True, False]  # the first fit overlapped, the second found them up
    est.shutdown()

    def bad_row(x, y):
        if y > 1.0:
            raise ZeroDivisionError("row cannot be computed")
        return [float(v) for v in x]

    broken = frame.select(F.udf(bad_row, ArrayType(FloatType()))("x", "y").alias("x"), "y")
    est = linear("ray")
    with pytest.raises(Exception, match="row cannot be computed"):
        est.fit(broken, batch_size=8, feature_cols=["x"], label_cols=["y"])
    assert not est._group.started
    no_work_left("ray", orca_context)

