"""orca.bigdl trains, evaluates and predicts with BigDL's own engine on a real local Spark:
known numbers, every input type, metrics, save/load."""

import numpy as np
import pandas as pd
import pytest
from conftest import TRUE_W, linear, plain_predict

from orca.core.data import XShards

pytestmark = pytest.mark.timeout(300)


def _est(model=None, lr=0.1, **kw):
    from bigdl.dllib.nn.criterion import MSECriterion
    from bigdl.dllib.optim.optimizer import SGD

    from orca.bigdl import Estimator

    return Estimator.from_bigdl(model=model or linear(), loss=MSECriterion(), optimizer=SGD(learningrate=lr), **kw)


@pytest.fixture(scope="module")
def df(spark, regression):
    x, y = regression
    return spark.createDataFrame(pd.DataFrame({"id": np.arange(len(x)), "x": list(x), "y": y})).repartition(2)


@pytest.mark.parametrize("sizes", [[16, 16], [5, 27], [0, 32, 0], [32], [0, 9, 0, 23]],
                         ids=lambda s: "-".join(map(str, s)))
def test_one_global_batch_sgd_step_equals_the_single_process_step(spark, regression, sizes):
    """32 rows, batch 32, SGD from zero weights: w = lr * 2 * mean(y * x) (MSE averaged over the batch),
    however the rows are laid out in partitions (even, uneven, empty ones, one) and the batch is
    split over BigDL's cores. BigDL's parameter sync sends gradients as FP16 (its
    AllReduceParameter compresses them), so the step agrees to FP16's ~3 significant digits."""
    from orca.core.testing.conformance import frame_with_layout

    x, y = regression[0][:32], regression[1][:32]
    frame = frame_with_layout(spark, x, y, sizes)
    est = _est(linear(zero=True), lr=0.1)
    est.fit(frame, epochs=1, batch_size=32, feature_cols=["x"], label_cols=["y"])
    w, b = est.get_model().get_weights()
    np.testing.assert_allclose(w.reshape(-1), 0.1 * 2 * (y[:, None] * x).mean(0), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(b, [0.1 * 2 * y.mean()], rtol=1e-2, atol=1e-3)


def test_fit_learns_and_reports_a_history_evaluate_and_predict_agree(df, regression):
    x, y = regression
    est = _est()
    hist = est.fit(df, epochs=8, batch_size=32, feature_cols=["x"], label_cols=["y"], validation_data=df)
    assert len(hist) == 8 and hist[-1]["num_samples"] == 256 and hist[-1]["epoch"] == 8
    losses = hist.history["train_loss"]
    assert losses[-1] < losses[0] * 0.01
    w, b = est.get_model().get_weights()
    np.testing.assert_allclose(w.reshape(-1), TRUE_W, atol=0.05)
    assert hist.history["val_loss"][-1] < 0.01
    stats = est.evaluate(df, batch_size=32, feature_cols=["x"], label_cols=["y"])
    pred = plain_predict(est.get_model(), x).reshape(-1)
    assert stats["num_samples"] == 256
    assert stats["val_loss"] == pytest.approx(float(np.mean((pred - y) ** 2)), rel=1e-3, abs=1e-6)
    out = est.predict(df, feature_cols=["x"]).toPandas().sort_values("id")
    assert list(out.columns) == ["id", "x", "y", "prediction"]
    np.testing.assert_allclose(np.stack(out["prediction"].to_numpy()).reshape(-1),
                               plain_predict(est.get_model(), np.stack(out["x"].to_numpy())).reshape(-1), atol=1e-5)
    np.testing.assert_allclose(est.predict(x[:10]).reshape(-1), pred[:10], atol=1e-5)
    # a second fit continues from the trained weights
    more = est.fit(df, epochs=1, batch_size=32, feature_cols=["x"], label_cols=["y"])
    assert more[-1]["epoch"] == 9 and more[-1]["train_loss"] < losses[0] * 0.01


def test_numpy_and_xshards_inputs_and_scalar_feature_columns(spark, regression):
    x, y = regression
    est = _est()
    est.fit((x, y), epochs=4, batch_size=32)
    shards = XShards.partition({"x": x, "y": y}, num_shards=2)
    est.fit(shards, epochs=4, batch_size=32)
    out = est.predict(XShards.partition({"x": x[:20]}, num_shards=2)).collect()
    got = np.concatenate([s["prediction"] for s in out]).reshape(-1)
    want = plain_predict(est.get_model(), np.concatenate([s["x"] for s in out])).reshape(-1)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # four numeric columns feed the model as one row of four features
    cols = pd.DataFrame({f"f{i}": x[:, i] for i in range(4)}).assign(y=y)
    frame = spark.createDataFrame(cols)
    stats = est.evaluate(frame, batch_size=32, feature_cols=["f0", "f1", "f2", "f3"], label_cols=["y"])
    assert stats["val_loss"] < 0.05


def test_classification_accuracy_from_bigdl_matches_the_predictions(spark):
    from bigdl.dllib.nn.criterion import ClassNLLCriterion
    from bigdl.dllib.nn.layer import Linear, LogSoftMax, Sequential
    from bigdl.dllib.optim.optimizer import Adam

    from orca.bigdl import Estimator

    rng = np.random.default_rng(1)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    label = (x @ TRUE_W > 0).astype(np.float32) + 1  # BigDL's class labels start at 1
    frame = spark.createDataFrame(pd.DataFrame({"x": list(x), "label": label})).repartition(2)
    model = Sequential().add(Linear(4, 2)).add(LogSoftMax())
    est = Estimator.from_bigdl(model=model, loss=ClassNLLCriterion(), optimizer=Adam(learningrate=0.05),
                               metrics=["accuracy"])
    hist = est.fit(frame, epochs=10, batch_size=32, feature_cols=["x"], label_cols=["label"], validation_data=frame)
    assert hist.history["val_accuracy"][-1] > 0.9
    stats = est.evaluate(frame, batch_size=32, feature_cols=["x"], label_cols=["label"])
    out = est.predict(frame, feature_cols=["x"]).toPandas()
    acc = float((np.stack(out["prediction"].to_numpy()).argmax(1) + 1 == out["label"].to_numpy()).mean())
    assert stats["val_accuracy"] == pytest.approx(acc, abs=1e-6)


def test_save_and_load_keep_predictions(regression, tmp_path):
    from bigdl.dllib.nn.layer import Model

    x, y = regression
    est = _est()
    est.fit((x, y), epochs=3, batch_size=32)
    before = est.predict(x[:16])
    path = est.save(str(tmp_path / "model.bigdl"))
    plain = Model.loadModel(path)  # BigDL's own format
    np.testing.assert_allclose(plain_predict(plain, x[:16]), before, atol=1e-5)
    fresh = _est()
    fresh.load(path)
    np.testing.assert_allclose(fresh.predict(x[:16]), before, atol=1e-6)
    with pytest.raises(FileNotFoundError):
        fresh.load(str(tmp_path / "missing.bigdl"))


def test_tensorboard_summaries_are_kept_and_read_back_with_tensorboards_reader(df, tmp_path):
    """set_tensorboard keeps BigDL's own summaries in log_dir/app_name: TensorBoard's reader finds
    one Loss point per iteration (256 rows / 32 = 8 a epoch) and a validation Loss per epoch, the
    same values get_train_summary / get_validation_summary return, whose mean per epoch is the
    History's train_loss."""
    import glob

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    est = _est()
    with pytest.raises(ValueError, match="set_tensorboard"):
        est.get_train_summary("Loss")
    est.set_tensorboard(str(tmp_path), "lin")
    hist = est.fit(df, epochs=2, batch_size=32, feature_cols=["x"], label_cols=["y"], validation_data=df)
    train, val = est.get_train_summary("Loss"), est.get_validation_summary("Loss")
    assert train.shape == (16, 3) and val.shape == (2, 3), (train.shape, val.shape)
    np.testing.assert_allclose([train[:8, 1].mean(), train[8:, 1].mean()], hist.history["train_loss"], rtol=1e-6)
    for kind, expected in (("train", train), ("validation", val)):
        (folder,) = {p.rsplit("/", 1)[0] for p in glob.glob(f"{tmp_path}/lin/{kind}/*tfevents*")}
        events = EventAccumulator(folder)
        events.Reload()
        points = events.Scalars("Loss")
        assert [p.step for p in points] == expected[:, 0].astype(int).tolist()
        np.testing.assert_allclose([p.value for p in points], expected[:, 1], rtol=1e-6)


def test_an_mlflow_run_holds_every_epoch_and_the_bigdl_model(df, regression, tmp_path):
    """set_mlflow against a real sqlite tracking store: one run with the worker count and the optim
    method's hyper-parameters, the History's train_loss at every epoch, and BigDL's model file as the ``model`` artifact, which ``load`` reads back to the
    same predictions."""
    from orca.core.testing.tracking import mlflow_store

    x, _ = regression
    uri, client = mlflow_store(tmp_path)
    est = _est()
    logger = est.set_mlflow(tracking_uri=uri, experiment_name="orca")
    hist = est.fit(df, epochs=2, batch_size=32, feature_cols=["x"], label_cols=["y"])
    (run_id,) = logger.run_ids
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["backend"] == "bigdl"
    assert run.data.params["num_workers"] == str(est.num_workers)  # and the optim method's hyper-parameters:
    assert run.data.params["optimizer"] == "SGD" and float(run.data.params["optimizer.learningRate"]) == 0.1
    points = client.get_metric_history(run_id, "train_loss")
    assert [p.step for p in points] == [1, 2]
    np.testing.assert_allclose([p.value for p in points], hist.history["train_loss"], rtol=1e-12)
    local = client.download_artifacts(run_id, "model/model.bigdl", str(tmp_path / "dl"))
    fresh = _est()
    fresh.load(local)
    np.testing.assert_allclose(fresh.predict(x[:10]), est.predict(x[:10]), atol=1e-6)
