"""Metrics of the PyTorch Estimator: Orca's mergeable metrics, called as the reference's PyTorch
metrics were; a metric function called on torch tensors; and the names the reference (bigdl-orca
2.4) gave each metric's result.

Every metric class here is two things at once:

- the reference's ``bigdl.orca.learn.pytorch.pytorch_metrics`` class: ``m = Accuracy();
  m(preds, targets)`` accumulates one batch of tensors, ``m.compute()`` returns the metric over every
  batch so far (a 0-d float64 tensor; ``ROC`` and ``PrecisionRecallCurve`` a tuple of tensors);
- an Orca :class:`Metric` for ``Estimator.from_torch(metrics=[...])``: each worker accumulates its
  batches into ``state`` (numbers and numpy arrays) and the states of all workers are merged exactly
  (sums, or the gathered scores of the curve metrics), never averaged.

Both go through the same ``update``, so a metric gives the same value called by hand or by the
Estimator. Where the reference's rule gave no usable value, Orca's is taken (each class says where):
a ``(n, 1)`` target against ``(n, k)`` scores is a column of class ids (the reference broadcast it);
``(n, 1)`` scores against ``(n,)`` targets are one score per sample (the reference arg-maxed the
single column, always class 0); shapes that differ only by a trailing column of one are accepted
(the reference refused or broadcast them); ``BinaryAccuracy`` counts per element (the reference
divided the hits of an ``(n, k)`` batch by ``n``, above 1 for ``k > 1``); ``KLDivergence`` takes a
zero target's term as 0 (the reference's was NaN where the prediction was 0 too).

The reference keyed ``evaluate``'s results by the metric's class name (``"Accuracy"``, as a 0-d
tensor) and ``fit``'s validation results by ``"val_" + name.lower()`` (``"val_top5accuracy"``);
Orca keys both by its metric names (``"val_accuracy"``, ``"val_top5_accuracy"``). The torch
Estimator's results carry both sets of keys (:func:`reference_keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import torch
from orca.core.plugin import AUC, Metric, make_metrics
from orca.core.plugin import MAE as _MAE
from orca.core.plugin import MSE as _MSE
from orca.core.plugin import Accuracy as _Accuracy
from orca.core.plugin import BinaryAccuracy as _BinaryAccuracy
from orca.core.plugin import Top5Accuracy as _Top5Accuracy

__all__ = ["AUC", "AUROC", "MAE", "MSE", "ROC", "Accuracy", "BinaryAccuracy", "BinaryCrossEntropy",
           "CategoricalAccuracy", "CategoricalCrossEntropy", "F1Score", "KLDivergence", "Metric", "Poisson",
           "Precision", "PrecisionRecallCurve", "Recall", "SparseCategoricalAccuracy",
           "SparseCategoricalCrossEntropy", "TensorFunctionMetric", "Top5Accuracy", "TorchMetric", "process_stats",
           "reference_keys", "torch_metrics"]

#: what the reference's cross-entropy, divergence and Poisson metrics kept predictions away from 0 by
_EPS = 1e-7


def _as_numpy(x: Any) -> np.ndarray:
    """A tensor (detached, on the CPU; half precision widened) or array-like as a numpy array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _as_tensor(value: Any) -> Any:
    """A result as the reference returned it: numbers as 0-d float64 tensors, arrays as tensors,
    tuples and lists of them alike."""
    if isinstance(value, (tuple, list)):
        return type(value)(_as_tensor(v) for v in value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(float(value), dtype=torch.float64)


def _is_float(a: np.ndarray) -> bool:
    return bool(np.issubdtype(a.dtype, np.floating))


def _align(pred: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(pred, target, arg_maxed)`` brought to one shape, as the reference's accuracy did: scores
    with one more dimension than the target are arg-maxed over the last (class ids); so are ``(n, k)``
    scores against an ``(n, 1)`` column of class ids; a trailing dimension of one is dropped.

    Raises:
        ValueError: shapes that no rule brings together.
    """
    p, t = pred, target
    if p.ndim == t.ndim and p.ndim > 1 and t.shape[-1] == 1 and p.shape[-1] > 1:
        t = t[..., 0]  # (n, k) scores against a column of class ids
    arg_maxed = False
    if p.ndim == t.ndim + 1:
        if p.shape[-1] == 1:  # one score per sample
            p = p[..., 0]
        else:
            p, arg_maxed = p.argmax(axis=-1), True
    elif t.ndim == p.ndim + 1 and t.shape[-1] == 1:
        t = t[..., 0]
    if p.shape != t.shape:
        raise ValueError(f"predictions of shape {tuple(pred.shape)} do not match targets of shape "
                         f"{tuple(target.shape)}: give the same shape, or class scores with one more dimension.")
    return p, t, arg_maxed


def _same_shape(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``pred`` in ``target``'s shape (the reference required equal shapes; Orca also takes the same
    elements per sample in another shape, such as ``(n, 1)`` against ``(n,)``)."""
    if pred.shape == target.shape:
        return pred
    if pred.size == target.size and pred.ndim and target.ndim and pred.shape[0] == target.shape[0]:
        return pred.reshape(target.shape)
    raise ValueError(f"predictions of shape {tuple(pred.shape)} and targets of shape {tuple(target.shape)} "
                     "must have the same shape.")


def _clamp01(pred: np.ndarray) -> np.ndarray:
    """Probabilities as float64, 0 and below raised to ``_EPS``, 1 and above lowered to ``1 - _EPS``."""
    p = pred.astype(np.float64)
    return np.where(p <= 0, _EPS, np.where(p >= 1, 1 - _EPS, p))


class TorchMetric(Metric):
    """An Orca :class:`Metric` that is also called as the reference's PyTorch metrics were.

    ``metric(preds, targets)`` accumulates one batch (torch tensors, numpy arrays or lists);
    ``metric.compute()`` returns the metric over everything accumulated (a 0-d float64 tensor, NaN
    before any batch); ``metric.reset()`` starts afresh. In ``Estimator.from_torch(metrics=[...])``
    the same ``update`` runs on every worker and the workers' states are merged exactly.

    Examples:
        >>> acc = Accuracy()
        >>> acc(torch.tensor([0, 2, 3, 4]), torch.tensor([1, 2, 3, 4]))
        >>> float(acc.compute())
        0.75
    """

    def __call__(self, preds: Any, targets: Any) -> None:
        self.update(_as_numpy(preds), _as_numpy(targets))

    def compute(self) -> Any:
        """The metric over every batch accumulated so far, as a tensor (see the class)."""
        return _as_tensor(self.result())


# ------------------------------------------------------------------ accuracies
class Accuracy(TorchMetric, _Accuracy):
    """How often predictions equal the targets, over every element.

    Scores with one more dimension than the targets (``(n, k)`` against ``(n,)`` or ``(n, 1)``) are
    arg-maxed into class ids; floating predictions of the targets' shape are thresholded at
    ``>= 0.5``; integer predictions are compared as they are.
    """

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        p, t, _ = _align(pred, target)
        if _is_float(p):
            p = (p >= 0.5).astype(np.int64)
        self.state["total"] += float((p == t).sum())
        self.state["count"] += float(t.size)


class BinaryAccuracy(TorchMetric, _BinaryAccuracy):
    """How often ``pred > threshold`` equals the 0/1 target, per element.

    Args:
        threshold: the default threshold; a call's ``threshold`` argument (the reference's) overrides
            it for that batch.
    """

    def __call__(self, preds: Any, targets: Any, threshold: float | None = None) -> None:
        self._update(_as_numpy(preds), _as_numpy(targets), self.threshold if threshold is None else threshold)

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        self._update(pred, target, self.threshold)

    def _update(self, pred: np.ndarray, target: np.ndarray, threshold: float) -> None:
        n = target.shape[0] if target.ndim else 1
        hits = (pred.reshape(n, -1) > threshold) == target.reshape(n, -1).astype(np.int64)
        self.state["total"] += float(hits.sum())
        self.state["count"] += float(hits.size)


class Top5Accuracy(TorchMetric, _Top5Accuracy):
    """How often the class-id target (``(n,)`` or ``(n, 1)``) is among the five highest scores
    (all of them with fewer than five classes)."""


class CategoricalAccuracy(TorchMetric):
    """How often the arg-max of the scores equals the arg-max of the one-hot target."""

    name = "categorical_accuracy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        hits = pred.argmax(axis=-1) == target.argmax(axis=-1)
        self.state["total"] += float(hits.sum())
        self.state["count"] += float(target.shape[0])


class SparseCategoricalAccuracy(TorchMetric):
    """How often the arg-max of the scores equals the class-id target (``(n,)`` or ``(n, 1)``)."""

    name = "sparse_categorical_accuracy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        t = target[..., 0] if target.ndim == pred.ndim and target.shape[-1] == 1 else target
        hits = pred.argmax(axis=-1) == t
        self.state["total"] += float(hits.sum())
        self.state["count"] += float(target.shape[0])


# ------------------------------------------------------------------ errors and divergences
class MSE(TorchMetric, _MSE):
    """Mean squared error over every element."""


class MAE(TorchMetric, _MAE):
    """Mean absolute error over every element."""


class BinaryCrossEntropy(TorchMetric):
    """Binary cross-entropy of probabilities against 0/1 targets, averaged over every element
    (probabilities kept within ``[1e-7, 1 - 1e-7]`` at 0 and 1, as the reference)."""

    name = "binary_cross_entropy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        t = target.astype(np.float64)
        p = _clamp01(_same_shape(pred, target))
        self.state["total"] += float((-(t * np.log(p)) - (1 - t) * np.log(1 - p)).sum())
        self.state["count"] += float(t.size)


class CategoricalCrossEntropy(TorchMetric):
    """Cross-entropy of class probabilities against one-hot targets, averaged over the samples."""

    name = "categorical_cross_entropy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        t = target.astype(np.float64)
        p = _clamp01(_same_shape(pred, target))
        self.state["total"] += float(-(np.log(p) * t).sum())
        self.state["count"] += float(target.shape[0])


class SparseCategoricalCrossEntropy(TorchMetric):
    """Cross-entropy of class probabilities (classes on the last dimension) against class-id
    targets, averaged over the samples (the first dimension)."""

    name = "sparse_categorical_cross_entropy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        p = _clamp01(pred).reshape(-1, pred.shape[-1])
        ids = target.reshape(-1).astype(np.int64)
        if ids.size != p.shape[0]:
            raise ValueError(f"targets of shape {tuple(target.shape)} do not give one class id for each of the "
                             f"{p.shape[0]} score rows of predictions of shape {tuple(pred.shape)}.")
        self.state["total"] += float(-np.log(p[np.arange(ids.size), ids]).sum())
        self.state["count"] += float(target.shape[0])


class KLDivergence(TorchMetric):
    """Kullback-Leibler divergence ``sum(t * log(t / p + 1e-7))`` of the targets from the predictions,
    averaged over the samples (a zero target's term is 0)."""

    name = "kl_divergence"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        t = target.astype(np.float64)
        p = _same_shape(pred, target).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(t != 0, t * np.log(t / p + _EPS), 0.0)
        self.state["total"] += float(terms.sum())
        self.state["count"] += float(target.shape[0])


class Poisson(TorchMetric):
    """Poisson loss ``p - t * log(p + 1e-7)``, averaged over every element."""

    name = "poisson"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        t = target.astype(np.float64)
        p = _same_shape(pred, target).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.state["total"] += float((p - t * np.log(p + _EPS)).sum())
        self.state["count"] += float(t.size)


# ------------------------------------------------------------------ precision, recall, F1
class _StatScores(TorchMetric):
    """True positives, false positives and false negatives, summed over batches and workers.

    Floating predictions of the targets' shape are thresholded (``>= threshold``) and count for the
    positive class only (binary, or per element of multi-label targets); scores with one more
    dimension are arg-maxed, and they or integer predictions above 1 are class ids counted over
    every class (micro average: precision = recall = F1 = accuracy), as the reference's defaults.

    Args:
        threshold: where a floating prediction turns positive.
    """

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold
        super().__init__()

    def reset(self) -> None:
        self.state = {"tp": 0.0, "fp": 0.0, "fn": 0.0}

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        p, t, multiclass = _align(pred, target)
        if _is_float(p) and not multiclass:
            p = (p >= self.threshold).astype(np.int64)
        t = t.astype(np.int64)
        if not multiclass and p.size:
            multiclass = max(int(p.max()), int(t.max())) > 1
        if multiclass:
            wrong = float((p != t).sum())
            self.state["tp"] += float((p == t).sum())
            self.state["fp"] += wrong
            self.state["fn"] += wrong
            return
        pos, true = p == 1, t == 1
        self.state["tp"] += float((pos & true).sum())
        self.state["fp"] += float((pos & ~true).sum())
        self.state["fn"] += float((~pos & true).sum())

    @staticmethod
    def _ratio(num: float, den: float) -> float:
        return num / den if den else 0.0


class Precision(_StatScores):
    """Precision ``tp / (tp + fp)`` (0 with no positive prediction); see :class:`_StatScores`."""

    name = "precision"

    def result(self) -> float:
        return self._ratio(self.state["tp"], self.state["tp"] + self.state["fp"])


class Recall(_StatScores):
    """Recall ``tp / (tp + fn)`` (0 with no positive target); see :class:`_StatScores`."""

    name = "recall"

    def result(self) -> float:
        return self._ratio(self.state["tp"], self.state["tp"] + self.state["fn"])


class F1Score(_StatScores):
    """F1 score ``2 tp / (2 tp + fp + fn)`` (0 with neither); see :class:`_StatScores`."""

    name = "f1_score"

    def result(self) -> float:
        tp = self.state["tp"]
        return self._ratio(2 * tp, 2 * tp + self.state["fp"] + self.state["fn"])


# ------------------------------------------------------------------ ranking curves
def _stack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of ``b`` below those of ``a`` (an empty side gives the other)."""
    if not a.size and not a.shape[0]:
        return b
    if not b.size and not b.shape[0]:
        return a
    return np.concatenate([a, b])


def _columns(scores: np.ndarray, targets: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(scores, is_positive)`` of each class: one score column against 0/1 targets (binary); or
    one column per class against class ids (one-vs-rest) or against 0/1 columns (multi-label)."""
    if scores.shape[1] == 1 or targets.shape[1] == scores.shape[1]:
        labels = targets.astype(np.int64) == 1
        return [(scores[:, c], labels[:, c]) for c in range(scores.shape[1])]
    ids = targets[:, 0].astype(np.int64)
    return [(scores[:, c], ids == c) for c in range(scores.shape[1])]


def _counts(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fps, tps, thresholds)``: false and true positives at each distinct score, highest first."""
    order = np.argsort(-scores, kind="mergesort")
    s, y = scores[order], positive[order].astype(np.float64)
    ends = np.r_[np.flatnonzero(np.diff(s)), s.size - 1] if s.size else np.zeros(0, np.int64)
    tps = np.cumsum(y)[ends]
    return ends + 1 - tps, tps, s[ends]


def _roc(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)`` at every distinct score, from (0, 0) at the highest score + 1
    (NaN rates where the data have no negative, or no positive, sample)."""
    fps, tps, thresholds = _counts(scores, positive)
    fps, tps = np.r_[0.0, fps], np.r_[0.0, tps]
    thresholds = np.r_[thresholds[0] + 1 if thresholds.size else 1.0, thresholds]
    fpr = fps / fps[-1] if fps[-1] > 0 else np.full(fps.shape, np.nan)
    tpr = tps / tps[-1] if tps[-1] > 0 else np.full(tps.shape, np.nan)
    return fpr, tpr, thresholds


def _pr_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(precision, recall, thresholds)`` with thresholds rising from the highest one that reaches
    full recall; the last point is (1, 0), with no threshold."""
    fps, tps, thresholds = _counts(scores, positive)
    if not tps.size:
        return np.ones(1), np.zeros(1), np.zeros(0)
    precision = tps / (tps + fps)
    recall = tps / tps[-1] if tps[-1] > 0 else np.ones(tps.shape)
    last = int(np.searchsorted(tps, tps[-1])) + 1  # the first point of full recall
    return np.r_[precision[:last][::-1], 1.0], np.r_[recall[:last][::-1], 0.0], thresholds[:last][::-1]


class _GatheredScores(TorchMetric):
    """Keeps every (scores, targets) row, so its state grows with the data set (as Orca's AUC):
    meant for validation sets. Scores ``(n,)`` or ``(n, 1)`` against 0/1 targets are binary; ``(n, k)``
    scores are one column per class, against class ids (one-vs-rest) or 0/1 columns (multi-label)."""

    def reset(self) -> None:
        self.state = {"scores": np.zeros((0, 0), np.float64), "targets": np.zeros((0, 0), np.float64)}

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        n = target.shape[0] if target.ndim else 1
        scores = pred.reshape(n, -1).astype(np.float64)
        targets = target.reshape(n, -1).astype(np.float64)
        if targets.shape[1] not in (1, scores.shape[1]):
            raise ValueError(f"targets of shape {tuple(target.shape)} are neither one label per sample nor one "
                             f"per column of predictions of shape {tuple(pred.shape)}.")
        self.merge({"scores": scores, "targets": targets})

    def merge(self, other_state: dict[str, Any]) -> None:
        for key in ("scores", "targets"):
            self.state[key] = _stack(self.state[key], np.asarray(other_state[key], np.float64))

    def _per_class(self, curve: Callable[[np.ndarray, np.ndarray], Any]) -> list[Any]:
        scores, targets = self.state["scores"], self.state["targets"]
        if not scores.size:
            return [curve(np.zeros(0), np.zeros(0, bool))]
        return [curve(s, y) for s, y in _columns(scores, targets)]


class AUROC(_GatheredScores):
    """Area under the ROC curve; the mean over the classes (macro) of one-vs-rest or multi-label
    scores, leaving out a class whose targets are all one kind (NaN where no class has both)."""

    name = "auroc"

    def result(self) -> float:
        def area(scores: np.ndarray, positive: np.ndarray) -> float:
            fpr, tpr, _ = _roc(scores, positive)
            if np.isnan(fpr[-1]) or np.isnan(tpr[-1]):
                return float("nan")
            return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))

        areas = [a for a in self._per_class(area) if not np.isnan(a)]
        return float(np.mean(areas)) if areas else float("nan")


class ROC(_GatheredScores):
    """The ROC curve ``(fpr, tpr, thresholds)`` at every distinct score (the first threshold is the
    highest score + 1, at (0, 0)); per class (tuples of lists) for multi-column scores.

    ``compute()`` returns float64 tensors; ``result()`` (the Estimator's value) numpy arrays.
    """

    name = "roc"

    def result(self) -> Any:
        curves = self._per_class(_roc)
        return curves[0] if len(curves) == 1 else tuple(list(c) for c in zip(*curves, strict=True))


class PrecisionRecallCurve(_GatheredScores):
    """The precision-recall curve ``(precision, recall, thresholds)``: thresholds rising from the
    highest that reaches full recall, a final (precision 1, recall 0) point without one; per class
    (tuples of lists) for multi-column scores.

    ``compute()`` returns float64 tensors; ``result()`` (the Estimator's value) numpy arrays.
    """

    name = "precision_recall_curve"

    def result(self) -> Any:
        curves = self._per_class(_pr_curve)
        return curves[0] if len(curves) == 1 else tuple(list(c) for c in zip(*curves, strict=True))


#: Orca's metric classes and the name the reference gave each (its ``Metric.get_name()``); a class
#: not listed takes the name of the closest listed class it derives from
_REFERENCE_NAMES: dict[type, str] = {
    _Accuracy: "Accuracy", _Top5Accuracy: "Top5Accuracy", _BinaryAccuracy: "BinaryAccuracy", _MSE: "MSE",
    _MAE: "MAE", AUC: "AUC",
    **{cls: cls.__name__ for cls in (
        CategoricalAccuracy, SparseCategoricalAccuracy, BinaryCrossEntropy, CategoricalCrossEntropy,
        SparseCategoricalCrossEntropy, KLDivergence, Poisson, AUROC, ROC, F1Score, Precision, Recall,
        PrecisionRecallCurve)},
}


def _reference_name(metric: Metric) -> str | None:
    return next((_REFERENCE_NAMES[c] for c in type(metric).__mro__ if c in _REFERENCE_NAMES), None)


class TensorFunctionMetric(Metric):
    """A metric function ``f(pred, target)`` called, as the reference called it, on torch tensors
    (the batch's first model output and its first label), averaged per sample over every worker.

    A function that fails on tensors but not on numpy arrays (what Orca handed metric functions
    before) gets numpy arrays from then on; when it fails on both, the tensors' error is raised.

    Args:
        fn: returns a number or a 0-d tensor for one batch.
        name: the metric's name (default: ``fn.__name__``).
    """

    def __init__(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = str(name or getattr(fn, "__name__", "metric"))
        #: None until a batch told whether ``fn`` takes tensors (False) or numpy arrays (True)
        self.takes_numpy: bool | None = None
        super().__init__()

    def _call(self, pred: np.ndarray, target: np.ndarray) -> Any:
        if self.takes_numpy:
            return self.fn(pred, target)
        try:
            value = self.fn(torch.from_numpy(np.ascontiguousarray(pred)), torch.from_numpy(np.ascontiguousarray(target)))
        except Exception as exc:
            if self.takes_numpy is False:  # it took tensors before: a real error of this batch
                raise
            try:
                value = self.fn(pred, target)
            except Exception:  # noqa: BLE001 - the tensors' error is the one to report
                raise exc from None
            self.takes_numpy = True
            return value
        self.takes_numpy = False
        return value

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        n = float(target.shape[0])
        self.state["total"] += float(self._call(pred, target)) * n
        self.state["count"] += n


def torch_metrics(spec: Any) -> Any:
    """``spec`` with every plain function (not a :class:`Metric`, its class or a name) wrapped in a
    :class:`TensorFunctionMetric`, and every reference-style metric (an object with
    ``get_pytorch_metric()``, e.g. a subclass of the reference's ``Metric``) replaced by the metric it
    returns, named by its ``get_name()``; in the same list, dict or single-item form."""

    def wrap(item: Any) -> Any:
        if callable(getattr(item, "get_pytorch_metric", None)) and not isinstance(item, type):
            # the reference's own Metric subclass: its PyTorch metric, under its get_name()
            metric = item.get_pytorch_metric()
            getter = getattr(item, "get_name", None)
            name = getter() if callable(getter) else None
            if name:
                metric.name = str(name)
                metric.reference_key = True  # evaluate's result also has it under this name, as the reference's
            return metric
        if isinstance(item, (str, Metric)) or (isinstance(item, type) and issubclass(item, Metric)):
            return item
        return TensorFunctionMetric(item) if callable(item) else item

    if spec is None:
        return None
    if isinstance(spec, dict):
        return {k: wrap(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return [wrap(v) for v in spec]
    return wrap(spec)


def reference_keys(spec: Any) -> dict[str, str]:
    """``{Orca's metric name: the reference's name}`` for the metrics of ``spec`` the reference named:
    its metric classes under their default names, and metric functions (named after the function)."""
    out: dict[str, str] = {}
    for metric in make_metrics(spec):
        ref = _reference_name(metric)
        default = getattr(type(metric), "name", None)
        if getattr(metric, "reference_key", False):
            out[metric.name] = metric.name
        elif ref is not None and metric.name == default:
            out[metric.name] = ref
        elif isinstance(metric, TensorFunctionMetric):
            out[metric.name] = metric.name
    return out


def add_reference_eval_keys(result: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    """``result`` (``evaluate``'s, Orca's ``val_<name>`` keys) with the reference's keys added: each
    metric under its reference name as a 0-d float64 tensor (a curve as a tuple of tensors), as the
    reference returned them."""
    for orca, ref in keys.items():
        value = result.get(f"val_{orca}")
        if value is not None and ref not in result:
            result[ref] = _as_tensor(value)
    return result


def add_reference_fit_keys(stats: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    """One epoch's ``stats`` with the reference's validation keys added (``val_`` + its name in
    lower case, e.g. ``val_top5accuracy`` beside Orca's ``val_top5_accuracy``)."""
    for orca, ref in keys.items():
        value = stats.get(f"val_{orca}")
        alias = f"val_{ref.lower()}"
        if value is not None and alias not in stats:
            stats[alias] = value
    return stats


def process_stats(worker_stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The reference's reduction of per-worker results (``evaluate(reduce_results=False)``'s list):
    ``num_samples`` summed; numbers and tensors averaged over the workers; dicts (``profile``)
    reduced alike; anything else taken from the first worker.

    Orca's own ``reduce_results=True`` result is exact over all rows instead (a mean of the
    workers' means equals it only when every worker had as many rows).
    """
    if not worker_stats:
        return {}
    out: dict[str, Any] = {}
    if "num_samples" in worker_stats[0]:
        out["num_samples"] = sum(s.get("num_samples", 0) for s in worker_stats)
    for key, value in worker_stats[0].items():
        if key in out:
            continue
        if isinstance(value, torch.Tensor):
            out[key] = torch.mean(torch.stack([torch.as_tensor(s[key]) for s in worker_stats]))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(np.nanmean([s.get(key, np.nan) for s in worker_stats]))
        elif isinstance(value, dict):
            out[key] = process_stats([s[key] for s in worker_stats])
        else:
            out[key] = value
    return out
