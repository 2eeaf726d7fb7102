"""A MainCallback's custom prediction step (``on_pred_forward``), dict and tuple-with-dict outputs,
and a ``map<string, array<float>>`` label column training a model whose loss takes a dict of targets:
the reference's test_dict_outputs_model, test_dict_multi_outputs_model and
test_complicated_outputs_model_predict (BigDL 2.x, test_pytorch_basic.py), with their numbers checked."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from orca.core.data import XShards
from orca.core.engine.convert import table_to_part
from orca.core.engine.errors import OrcaWorkerError
from orca.torch import Estimator
from orca.torch.callbacks import MainCallback

pytestmark = pytest.mark.timeout(240)

ROWS = 24


class KeyedNet(nn.Module):
    """A dict-output model (the reference's DictNet / MultiDictNet) whose numbers are exact in float32
    whatever the batch: dyadic weights on small integer features."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[0.5, -0.25, 1.0, 0.0], [0.125, 0.5, -1.0, 2.0],
                                               [1.0, 1.0, 0.25, -0.5]]))
            self.fc.bias.copy_(torch.tensor([0.5, -1.0, 0.25]))

    def forward(self, x):
        out = self.fc(x)
        return {"y": out[:, :1], "z": out[:, 1:]}


class DictMCB(MainCallback):
    """The reference's: the model's dict, as numpy arrays."""

    def on_pred_forward(self, runner):
        output = runner.model(*runner.batch)
        runner.output = {k: v.detach().numpy() for k, v in output.items()}


class ComplicatedMCB(MainCallback):
    """The reference's shape of output: a tuple of an array and a dict (of an array and a tensor)."""

    def on_pred_forward(self, runner):
        out = runner.model(*runner.batch)
        runner.output = (out["y"][:, 0].numpy(), {"double": (2 * out["z"]).numpy(), "first": out["z"][:, 0]})


class NoOutput(MainCallback):
    def on_pred_forward(self, runner):
        runner.model(*runner.batch)


class SumsTheRows(MainCallback):
    def on_pred_forward(self, runner):
        runner.output = runner.model(*runner.batch)["z"].sum(0)  # (2,) whatever the batch


def hook_on_driver(hook, x):
    """What ``hook`` gives for ``x`` run on the driver against the plain model."""
    view = SimpleNamespace(model=KeyedNet().eval(), batch=[torch.from_numpy(x)], output=None)
    with torch.no_grad():
        hook.on_pred_forward(view)
    return view.output


def as_numpy(value):
    return value.numpy() if isinstance(value, torch.Tensor) else value


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    x = rng.integers(-4, 5, size=(ROWS, 4)).astype(np.float32)
    targets = rng.normal(size=(ROWS, 3)).astype(np.float32)
    return {"x": x, "y": targets[:, :1], "z": targets[:, 1:]}


@pytest.fixture(scope="module")
def df(spark, data):
    from pyspark.sql.types import ArrayType, FloatType, MapType, StringType, StructField, StructType

    schema = StructType([StructField("f", ArrayType(FloatType())),
                         StructField("label", MapType(StringType(), ArrayType(FloatType()))),
                         StructField("scalars", MapType(StringType(), FloatType()))])
    rows = [(data["x"][i].tolist(), {"z": data["z"][i].tolist(), "y": data["y"][i].tolist()},  # (keys unsorted)
             {"y": float(data["y"][i, 0])}) for i in range(ROWS)]
    return spark.createDataFrame(rows, schema).repartition(3)


def keyed_estimator(backend="spark", loss=None, lr=0.0):
    return Estimator.from_torch(model=lambda config: KeyedNet(), loss=loss,
                                optimizer=lambda m, c: torch.optim.SGD(m.parameters(), lr=lr),
                                backend=backend, workers_per_node=2, use_tqdm=False)


def test_dict_outputs_become_a_struct_column_with_or_without_the_hook(df):
    est = keyed_estimator()
    try:
        hooked = est.predict(df, batch_size=4, feature_cols=["f"], callbacks=[DictMCB()])
        plain = est.predict(df, batch_size=4, feature_cols=["f"])  # the model's own dict output
        rows, plain_rows = hooked.collect(), plain.collect()
    finally:
        est.shutdown()
    # a (n, 1) value is a number per row, as a top-level (n, 1) output is
    assert hooked.schema["prediction"].dataType.simpleString() == "struct<y:float,z:array<float>>"
    assert plain.schema["prediction"].dataType == hooked.schema["prediction"].dataType
    x = np.array([r.f for r in rows], np.float32)
    want = hook_on_driver(DictMCB(), x)
    np.testing.assert_array_equal(np.array([r.prediction.y for r in rows], np.float32), want["y"][:, 0])
    np.testing.assert_array_equal(np.array([r.prediction["z"] for r in rows], np.float32), want["z"])
    assert sorted(map(repr, (r.asDict(recursive=True) for r in plain_rows))) == \
        sorted(map(repr, (r.asDict(recursive=True) for r in rows)))
    assert len(rows) == ROWS


def test_tuple_with_a_dict_gives_a_column_per_output(df):
    est = keyed_estimator()
    try:
        named = est.predict(df, batch_size=4, feature_cols=["f"], callbacks=[ComplicatedMCB()],
                            output_cols=["scalar", "dict"])
        unnamed = est.predict(df, batch_size=4, feature_cols=["f"], callbacks=[ComplicatedMCB()])
        rows, unnamed_cols = named.collect(), unnamed.columns
    finally:
        est.shutdown()
    types = {f.name: f.dataType.simpleString() for f in named.schema.fields}
    assert types["scalar"] == "float" and types["dict"] == "struct<double:array<float>,first:float>"
    assert unnamed_cols[-2:] == ["prediction_0", "prediction_1"]
    x = np.array([r.f for r in rows], np.float32)
    score, parts = hook_on_driver(ComplicatedMCB(), x)
    np.testing.assert_array_equal(np.array([r.scalar for r in rows], np.float32), score)
    np.testing.assert_array_equal(np.array([r.dict.double for r in rows], np.float32), parts["double"])
    np.testing.assert_array_equal(np.array([r.dict.first for r in rows], np.float32), as_numpy(parts["first"]))


def test_hook_runs_in_the_spark_tasks_for_arrays_and_spark_xshards(orca_context, data):
    x = data["x"]
    est = keyed_estimator()
    try:
        score, parts = est.predict(x, batch_size=4, callbacks=[ComplicatedMCB()])
        shards = est.predict(XShards.partition({"x": x}, num_shards=3), batch_size=4, callbacks=[DictMCB()])
        predicted = [s["prediction"] for s in shards.collect()]
    finally:
        est.shutdown()
    want_score, want_parts = hook_on_driver(ComplicatedMCB(), x)
    np.testing.assert_array_equal(score, want_score)
    assert set(parts) == {"double", "first"}
    np.testing.assert_array_equal(parts["double"], want_parts["double"])
    np.testing.assert_array_equal(parts["first"], as_numpy(want_parts["first"]))
    assert len(predicted) == 3 and all(set(p) == {"y", "z"} for p in predicted)
    want = hook_on_driver(DictMCB(), x)
    for key in ("y", "z"):
        np.testing.assert_array_equal(np.concatenate([p[key] for p in predicted]), want[key])


def test_hook_runs_in_the_ray_actors(orca_context, data):
    est = keyed_estimator("ray")
    try:
        got = est.predict(data["x"], batch_size=4, callbacks=[DictMCB()])
    finally:
        est.shutdown()
    want = hook_on_driver(DictMCB(), data["x"])
    assert set(got) == {"y", "z"}
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["z"], want["z"])


def test_a_hook_without_output_or_with_other_rows_fails_on_the_driver_naming_it(df, data):
    est = keyed_estimator()
    try:
        with pytest.raises(ValueError, match=r"NoOutput\.on_pred_forward set no runner\.output"):
            est.predict(df, feature_cols=["f"], callbacks=[NoOutput()])
        with pytest.raises(ValueError, match=r"SumsTheRows\.on_pred_forward gave Tensor \(2,\) for a batch of 1 rows"):
            est.predict(df, feature_cols=["f"], callbacks=[SumsTheRows()])  # the one-row probe on the driver
        with pytest.raises(OrcaWorkerError,
                           match=r"SumsTheRows\.on_pred_forward gave Tensor \(2,\) for a batch of \d+ rows"):
            est.predict(data["x"], batch_size=8, callbacks=[SumsTheRows()])
        with pytest.raises(ValueError, match="at most one MainCallback"):
            est.predict(data["x"], callbacks=[DictMCB(), DictMCB()])
    finally:
        est.shutdown()


def keyed_loss(out, target):
    """The reference's multi_dict_loss_fn, checked: the targets come as {key: (batch, width)}."""
    assert isinstance(target, dict) and set(target) == {"y", "z"}
    assert target["y"].shape == out["y"].shape and target["z"].shape == out["z"].shape
    return F.mse_loss(out["y"], target["y"]) + F.mse_loss(out["z"], target["z"])


def test_map_label_column_trains_as_the_same_loss_in_one_process(df, data):
    est = keyed_estimator(loss=lambda config: keyed_loss, lr=0.01)
    try:
        # the global batch is every row: each epoch is one step of the whole data's mean gradient
        est.fit(df, epochs=3, batch_size=ROWS, feature_cols=["f"], label_cols=["label"], validation_data=df,
                shuffle=False)
        got = est.get_model().state_dict()
        result = est.evaluate(df, batch_size=8, feature_cols=["f"], label_cols=["label"])
    finally:
        est.shutdown()
    ref = KeyedNet()
    opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    x = torch.from_numpy(data["x"])
    target = {"y": torch.from_numpy(data["y"]), "z": torch.from_numpy(data["z"])}
    for _ in range(3):
        opt.zero_grad()
        keyed_loss(ref(x), target).backward()
        opt.step()
    for name, want in ref.state_dict().items():
        np.testing.assert_allclose(got[name].numpy(), want.numpy(), atol=1e-6, err_msg=name)
    with torch.no_grad():
        assert result["val_loss"] == pytest.approx(float(keyed_loss(ref(x), target)), rel=1e-5)
    assert result["num_samples"] == ROWS


def test_map_of_numbers_label_column_evaluates(df, data):
    def loss(out, target):
        assert set(target) == {"y"} and target["y"].shape == (len(out["y"]),)
        return F.mse_loss(out["y"][:, 0], target["y"])

    est = keyed_estimator(loss=lambda config: loss)
    try:
        result = est.evaluate(df, batch_size=8, feature_cols=["f"], label_cols=["scalars"])
    finally:
        est.shutdown()
    with torch.no_grad():
        want = F.mse_loss(KeyedNet()(torch.from_numpy(data["x"]))["y"], torch.from_numpy(data["y"]))
    assert result["val_loss"] == pytest.approx(float(want), rel=1e-5)


def test_map_label_rows_with_other_keys_are_refused_naming_the_column_and_keys(spark):
    from pyspark.sql.types import ArrayType, FloatType, MapType, StringType, StructField, StructType

    schema = StructType([StructField("f", ArrayType(FloatType())),
                         StructField("label", MapType(StringType(), ArrayType(FloatType())))])
    rows = [([1.0] * 4, {"y": [1.0], "z": [0.0, 1.0]})] * 5 + [([1.0] * 4, {"y": [1.0]})]
    bad = spark.createDataFrame(rows, schema)
    est = keyed_estimator(loss=lambda config: keyed_loss)
    try:
        with pytest.raises(ValueError, match=r"label column 'label' holds maps with different keys "
                                             r"\(\['y'\] in some rows, \['y', 'z'\] in others\)"):
            est.fit(bad, epochs=1, batch_size=4, feature_cols=["f"], label_cols=["label"])
    finally:
        est.shutdown()


def test_arrow_map_column_becomes_one_keyed_array_per_batch():
    typ = pa.map_(pa.string(), pa.list_(pa.float32()))
    col = pa.array([[("b", [1.0, 2.0]), ("a", [3.0])], [("a", [4.0]), ("b", [5.0, 6.0])]], type=typ)
    part = table_to_part(pa.table({"f": [1.0, 2.0], "label": col}), ["f"], ["label"])
    (label,) = part["y"]
    assert label.dtype.names == ("a", "b")  # sorted: every batch of the column gets the same layout
    np.testing.assert_array_equal(label["a"], [[3.0], [4.0]])
    np.testing.assert_array_equal(label["b"], [[1.0, 2.0], [5.0, 6.0]])
    ragged = pa.array([[("a", [1.0])], [("b", [2.0])]], type=typ)
    with pytest.raises(ValueError, match=r"column 'label': every row's map must have the same keys, but row 0 "
                                         r"has \['a'\] and row 1 has \['b'\]"):
        table_to_part(pa.table({"f": [1.0, 2.0], "label": ragged}), ["f"], ["label"])
    nan = pa.array([[("a", [float("nan")])]], type=typ)
    with pytest.raises(ValueError, match=r"label column 'label'\['a'\] holds 1 NaN/Inf"):
        table_to_part(pa.table({"f": [1.0], "label": nan}), ["f"], ["label"])
