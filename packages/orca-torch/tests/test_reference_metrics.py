"""The reference's PyTorch metric classes (``bigdl.orca.learn.pytorch.pytorch_metrics``) in
``orca.torch.metrics``: called as the reference called them (``m(preds, targets)``, then
``m.compute()``), each equal to scikit-learn / scipy on fixed data, accumulating and merging exactly
(a worker's state travels through Orca's codec), and as Estimator metrics on real local Spark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from conftest import predict_plain
from scipy.special import gammaln, rel_entr
from scipy.stats import poisson
from sklearn import metrics as skm
from torch import nn

from orca.core.codec import decode, encode
from orca.torch import Estimator
from orca.torch.metrics import (
    AUROC,
    MAE,
    MSE,
    ROC,
    Accuracy,
    BinaryAccuracy,
    BinaryCrossEntropy,
    CategoricalAccuracy,
    CategoricalCrossEntropy,
    F1Score,
    KLDivergence,
    Poisson,
    Precision,
    PrecisionRecallCurve,
    Recall,
    SparseCategoricalAccuracy,
    SparseCategoricalCrossEntropy,
    Top5Accuracy,
    TorchMetric,
)

N = 37  # split 13 + 24 below


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


_rng = np.random.default_rng(3)
PROB = _rng.uniform(0.02, 0.98, size=N).astype(np.float32)  # one binary score per sample
Y01 = _rng.integers(0, 2, size=N)
SCORES = _rng.normal(size=(N, 8)).astype(np.float32)  # 8-class logits
PROBS = _softmax(_rng.normal(size=(N, 5)))  # 5-class probabilities (float64: rows sum to 1)
IDS8 = _rng.integers(0, 8, size=N)
IDS5 = np.r_[np.arange(5), _rng.integers(0, 5, size=N - 5)]  # every class present (sklearn's AUC needs it)
ONEHOT5 = np.eye(5, dtype=np.int64)[IDS5]
ML_PROB = _rng.uniform(0.02, 0.98, size=(N, 3))  # multi-label scores and 0/1 targets
ML_Y = _rng.integers(0, 2, size=(N, 3))
REG_P = _rng.normal(size=(N, 3)).astype(np.float32)
REG_T = _rng.normal(size=(N, 3)).astype(np.float32)
RATE = _rng.uniform(0.5, 3.0, size=(N, 2))
COUNTS = _rng.poisson(RATE).astype(np.float64)
DIST_P, DIST_T = _softmax(_rng.normal(size=(N, 4))), _softmax(_rng.normal(size=(N, 4)))
LABEL_PRED = _rng.integers(0, 5, size=N)  # integer class predictions


def _pr_from_full_recall(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, ...]:
    """scikit-learn's curve (every threshold) from the highest threshold that reaches full recall on,
    the reference's (torchmetrics') cut."""
    precision, recall, thresholds = skm.precision_recall_curve(y, p)
    first = int(np.flatnonzero(recall == 1.0)[-1])
    return precision[first:], recall[first:], thresholds[first:]


def _roc_reference(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, ...]:
    """scikit-learn's ROC at every threshold; the first threshold is the highest score + 1, not inf."""
    fpr, tpr, thresholds = skm.roc_curve(y, p, drop_intermediate=False)
    return fpr, tpr, np.r_[p.max() + 1.0, thresholds[1:]]


@dataclass
class Case:
    id: str
    metric: Any  # a no-argument factory
    pred: np.ndarray
    target: np.ndarray
    expected: Any  # a float or a tuple of arrays


CASES = [
    # accuracies
    Case("accuracy_scores_vs_ids", Accuracy, SCORES, IDS8, skm.accuracy_score(IDS8, SCORES.argmax(1))),
    Case("accuracy_scores_vs_id_column", Accuracy, SCORES, IDS8[:, None], skm.accuracy_score(IDS8, SCORES.argmax(1))),
    Case("accuracy_binary_scores", Accuracy, PROB, Y01, skm.accuracy_score(Y01, PROB >= 0.5)),
    Case("accuracy_score_column_vs_labels", Accuracy, PROB[:, None], Y01, skm.accuracy_score(Y01, PROB >= 0.5)),
    Case("accuracy_integer_predictions", Accuracy, LABEL_PRED, IDS5, skm.accuracy_score(IDS5, LABEL_PRED)),
    Case("accuracy_multilabel_per_element", Accuracy, ML_PROB, ML_Y, np.mean((ML_PROB >= 0.5) == ML_Y)),
    Case("binary_accuracy", BinaryAccuracy, PROB, Y01, skm.accuracy_score(Y01, PROB > 0.5)),
    Case("binary_accuracy_threshold", lambda: BinaryAccuracy(threshold=0.3), PROB, Y01,
         skm.accuracy_score(Y01, PROB > 0.3)),
    Case("binary_accuracy_multilabel", BinaryAccuracy, ML_PROB, ML_Y, np.mean((ML_PROB > 0.5) == ML_Y)),
    Case("top5_accuracy", Top5Accuracy, SCORES, IDS8, skm.top_k_accuracy_score(IDS8, SCORES, k=5, labels=range(8))),
    Case("categorical_accuracy", CategoricalAccuracy, PROBS, ONEHOT5, skm.accuracy_score(IDS5, PROBS.argmax(1))),
    Case("sparse_categorical_accuracy", SparseCategoricalAccuracy, PROBS, IDS5[:, None],
         skm.accuracy_score(IDS5, PROBS.argmax(1))),
    Case("sparse_categorical_accuracy_flat", SparseCategoricalAccuracy, PROBS, IDS5,
         skm.accuracy_score(IDS5, PROBS.argmax(1))),
    # errors
    Case("mse", MSE, REG_P, REG_T, skm.mean_squared_error(REG_T, REG_P)),
    Case("mae", MAE, REG_P, REG_T, skm.mean_absolute_error(REG_T, REG_P)),
    # cross-entropies, divergence, Poisson
    Case("binary_cross_entropy", BinaryCrossEntropy, PROB, Y01, skm.log_loss(Y01, PROB.astype(np.float64))),
    Case("binary_cross_entropy_per_element", BinaryCrossEntropy, ML_PROB, ML_Y,
         skm.log_loss(ML_Y.ravel(), ML_PROB.ravel())),
    Case("categorical_cross_entropy", CategoricalCrossEntropy, PROBS, ONEHOT5, skm.log_loss(IDS5, PROBS)),
    Case("sparse_categorical_cross_entropy", SparseCategoricalCrossEntropy, PROBS, IDS5, skm.log_loss(IDS5, PROBS)),
    Case("sparse_categorical_cross_entropy_id_column", SparseCategoricalCrossEntropy, PROBS, IDS5[:, None],
         skm.log_loss(IDS5, PROBS)),
    Case("kl_divergence", KLDivergence, DIST_P, DIST_T, rel_entr(DIST_T, DIST_P).sum(1).mean()),
    # the Poisson negative log-likelihood less log(t!): p - t log p
    Case("poisson", Poisson, RATE, COUNTS, np.mean(-poisson.logpmf(COUNTS, RATE) - gammaln(COUNTS + 1))),
    # ranking
    Case("auroc_binary", AUROC, PROB, Y01, skm.roc_auc_score(Y01, PROB)),
    Case("auroc_one_vs_rest", AUROC, PROBS, IDS5, skm.roc_auc_score(IDS5, PROBS, multi_class="ovr")),
    Case("auroc_multilabel", AUROC, ML_PROB, ML_Y, skm.roc_auc_score(ML_Y, ML_PROB)),
    Case("roc", ROC, PROB, Y01, _roc_reference(Y01, PROB.astype(np.float64))),
    Case("precision_recall_curve", PrecisionRecallCurve, PROB, Y01, _pr_from_full_recall(Y01, PROB)),
    # precision, recall, F1
    Case("precision_binary", Precision, PROB, Y01, skm.precision_score(Y01, PROB >= 0.5)),
    Case("recall_binary", Recall, PROB, Y01, skm.recall_score(Y01, PROB >= 0.5)),
    Case("f1_binary", F1Score, PROB, Y01, skm.f1_score(Y01, PROB >= 0.5)),
    Case("f1_threshold", lambda: F1Score(threshold=0.7), PROB, Y01, skm.f1_score(Y01, PROB >= 0.7)),
    Case("precision_multilabel", Precision, ML_PROB, ML_Y,
         skm.precision_score(ML_Y, ML_PROB >= 0.5, average="micro")),
    Case("recall_multilabel", Recall, ML_PROB, ML_Y, skm.recall_score(ML_Y, ML_PROB >= 0.5, average="micro")),
    Case("f1_class_scores", F1Score, SCORES, IDS8, skm.f1_score(IDS8, SCORES.argmax(1), average="micro")),
    Case("precision_class_ids", Precision, LABEL_PRED, IDS5,
         skm.precision_score(IDS5, LABEL_PRED, average="micro")),
]


def _assert_value(got: Any, expected: Any) -> None:
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            g = g.numpy() if isinstance(g, torch.Tensor) else np.asarray(g)
            assert g.shape == np.shape(e)
            np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)
        return
    got = float(got)
    assert abs(got - float(expected)) <= 1e-6, (got, float(expected))


def _call(metric: TorchMetric, pred: np.ndarray, target: np.ndarray) -> None:
    metric(torch.from_numpy(np.ascontiguousarray(pred)), torch.from_numpy(np.ascontiguousarray(target)))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_compute_equals_sklearn_and_accumulates_and_merges_exactly(case):
    whole = case.metric()
    _call(whole, case.pred, case.target)
    out = whole.compute()
    _assert_value(out, case.expected)
    if not isinstance(case.expected, tuple):  # the reference's result: a 0-d tensor
        assert isinstance(out, torch.Tensor) and out.dim() == 0 and out.dtype == torch.float64

    # two calls accumulate to the one call over the concatenation
    acc = case.metric()
    _call(acc, case.pred[:13], case.target[:13])
    _call(acc, case.pred[13:], case.target[13:])
    _assert_value(acc.compute(), case.expected)

    # two workers' states, sent through Orca's codec and merged, give the same value
    first, second = case.metric(), case.metric()
    _call(first, case.pred[:13], case.target[:13])
    _call(second, case.pred[13:], case.target[13:])
    merged = case.metric()
    for part in (first, second):
        merged.merge(decode(encode(part.state)))
    _assert_value(merged.compute(), case.expected)

    # reset starts afresh
    acc.reset()
    _call(acc, case.pred, case.target)
    _assert_value(acc.compute(), case.expected)


def test_the_reference_documented_values():
    t = torch.tensor
    acc = Accuracy()
    acc(t([0, 2, 3, 4]), t([1, 2, 3, 4]))
    assert acc.compute() == 0.75
    acc(t([0, 2, 3, 4]), t([1, 1, 2, 4]))
    assert acc.compute() == 0.5

    bac = BinaryAccuracy()
    bac(t([0.98, 1, 0, 0.6]), t([1, 1, 0, 0]))
    assert bac.compute() == 0.75
    bac(t([0.98, 1, 0, 0.6]), t([1, 1, 0, 0]), threshold=0.7)  # a call's threshold, as the reference's
    assert bac.compute() == 0.875

    sca = SparseCategoricalAccuracy()
    sca(t([[0.1, 0.9, 0.8], [0.05, 0.95, 0]]), t([[2], [1]]))
    assert sca.compute() == 0.5
    sca(t([[0.1, 0.9, 0.8], [0.05, 0.95, 0]]), t([2, 0]))
    assert sca.compute() == 0.25

    top5 = Top5Accuracy()
    scores = t([[0.1, 0.9, 0.8, 0.4, 0.5, 0.2], [0.05, 0.95, 0, 0.4, 0.5, 0.2]])
    top5(scores, t([2, 2]))
    assert top5.compute() == 0.5
    top5(scores, t([[2], [1]]))
    assert top5.compute() == 0.75

    mae = MAE()
    mae(t([[1, -2], [1, 1]]), t([[0, 1], [0, 1]]))
    assert mae.compute() == 1.25
    mse = MSE()
    mse(t([[1, -2], [1, 1]]), t([[1, 1], [1, 1]]))
    assert mse.compute() == 2.25

    bce = BinaryCrossEntropy()
    bce(t([[0.6, 0.4], [0.4, 0.6]]), t([[0, 1], [0, 0]]))
    assert abs(bce.compute() - 0.81492424) < 1e-6
    cce = CategoricalCrossEntropy()  # a probability of 0 where the target is 0 adds nothing
    cce(t([[0.05, 0.95, 0], [0.1, 0.8, 0.1]]), t([[0, 1, 0], [0, 0, 1]]))
    assert abs(cce.compute() - 1.1769392) < 1e-6
    kld = KLDivergence()
    kld(t([[0.6, 0.4], [0.4, 0.6]]), t([[0, 1], [0, 0]]))
    assert abs(kld.compute() - 0.45814) < 1e-5
    poi = Poisson()
    poi(t([[1, 1], [0, 0]]), t([[0, 1], [0, 0]]))
    assert abs(poi.compute() - 0.49999997) < 1e-6

    roc = ROC()
    roc(t([0.3, 0.6, 0.7, 0.8]), t([0, 1, 1, 1.0]))
    fpr, tpr, thresholds = roc.compute()
    assert fpr.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    np.testing.assert_allclose(tpr.numpy(), [0, 1 / 3, 2 / 3, 1, 1])
    np.testing.assert_allclose(thresholds.numpy(), [1.8, 0.8, 0.7, 0.6, 0.3], atol=1e-6)

    f1 = F1Score()  # integer class predictions: micro average over the classes
    f1(t([0, 2, 1, 0, 0, 1]), t([0, 1, 2, 0, 1, 2]))
    assert abs(f1.compute() - 1 / 3) < 1e-9
    for cls in (Precision, Recall):
        m = cls()
        m(t([0, 0.2, 1.0, 0.8, 0.6, 0.5]), t([0, 1, 1, 0, 1, 1]))
        assert m.compute() == 0.75

    curve = PrecisionRecallCurve()
    curve(t([0, 0.2, 1.0, 0.8, 0.6, 0.5]), t([0, 1, 1, 0, 1, 1]))
    precision, recall, thresholds = curve.compute()
    np.testing.assert_allclose(precision.numpy(), [0.8, 0.75, 2 / 3, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(recall.numpy(), [1.0, 0.75, 0.5, 0.25, 0.25, 0.0])
    np.testing.assert_allclose(thresholds.numpy(), [0.2, 0.5, 0.6, 0.8, 1.0], atol=1e-6)


def test_mismatched_shapes_are_refused_and_undefined_values_are_nan():
    with pytest.raises(ValueError, match="shape"):
        Accuracy()(torch.zeros(4, 3), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="same shape"):
        Poisson()(torch.zeros(4, 3), torch.zeros(4, 2))  # 12 elements against 8
    auc = AUROC()
    assert torch.isnan(auc.compute())  # nothing seen
    auc(torch.tensor([0.2, 0.7]), torch.tensor([1, 1]))  # one kind of target only
    assert torch.isnan(auc.compute())
    assert Precision().compute() == 0.0  # no positive prediction


class _Binary(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


@pytest.fixture(scope="module")
def binary_data():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(101, 4)).astype(np.float32)  # odd size: uneven shares
    y = ((x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.8, size=101)) > 0).astype(np.float32)
    return x, y


@pytest.mark.timeout(300)
def test_estimator_metrics_on_spark_equal_sklearn(orca_context, binary_data):
    x, y = binary_data
    data = {"x": x, "y": y[:, None]}
    torch.manual_seed(0)
    est = Estimator.from_torch(model=_Binary(), loss=nn.BCELoss(), metrics=[AUROC(), F1Score(threshold=0.5)],
                               optimizer=lambda m, c: torch.optim.SGD(m.parameters(), lr=0.2), backend="spark",
                               workers_per_node=2, use_tqdm=False)
    try:
        history = est.fit(data, epochs=2, batch_size=16, validation_data=data)
        result = est.evaluate(data, batch_size=16)
        model = est.get_model()
    finally:
        est.shutdown()
    probs = predict_plain(model, x)[:, 0]
    auc, f1 = skm.roc_auc_score(y, probs), skm.f1_score(y, probs >= 0.5)
    assert 0.6 < auc < 1.0 and 0.0 < f1 < 1.0  # a real classifier, not a degenerate one
    assert result["num_samples"] == 101
    assert result["val_auroc"] == pytest.approx(auc, abs=1e-6)
    assert result["val_f1_score"] == pytest.approx(f1, abs=1e-6)
    # the reference's keys: the class name, a 0-d tensor
    assert isinstance(result["AUROC"], torch.Tensor) and result["AUROC"].item() == pytest.approx(auc, abs=1e-6)
    assert result["F1Score"].item() == pytest.approx(f1, abs=1e-6)
    # the last epoch's validation ran on the same weights and data; the reference's val_ + name.lower() too
    last = history[-1]
    assert last["val_auroc"] == pytest.approx(auc, abs=1e-6)
    assert last["val_f1score"] == last["val_f1_score"] == pytest.approx(f1, abs=1e-6)


@pytest.mark.timeout(300)
def test_estimator_curve_metric_on_spark(orca_context, binary_data):
    x, y = binary_data
    model = _Binary()
    est = Estimator.from_torch(model=model, loss=nn.BCELoss(), metrics=[PrecisionRecallCurve()], backend="spark",
                               workers_per_node=2, use_tqdm=False)
    try:
        result = est.evaluate({"x": x, "y": y[:, None]}, batch_size=16)
    finally:
        est.shutdown()
    probs = predict_plain(model, x)[:, 0].astype(np.float64)
    expected = _pr_from_full_recall(y, probs)
    for got, want in zip(result["val_precision_recall_curve"], expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    _assert_value(result["PrecisionRecallCurve"], expected)
