"""Framework-neutral metrics as mergeable accumulators over numpy arrays.

Every worker updates its own accumulator per batch; the accumulators of all workers are
merged (not averaged), so a metric is computed exactly over the global data set, never as a
mean of per-worker means. Framework runners hand predictions and targets over as numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class Metric:
    """A metric that accumulates over batches and merges across workers.

    Subclasses implement :meth:`update` and :meth:`result`; ``state`` is a dict of numbers or
    arrays that :meth:`merge` combines (summing by default).
    """

    name: str = "metric"

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        """Clear the accumulated state."""
        self.state = {"total": 0.0, "count": 0.0}

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        """Accumulate one batch of predictions and targets."""
        raise NotImplementedError

    def merge(self, other_state: dict[str, Any]) -> None:
        """Fold in another worker's state."""
        for key, value in other_state.items():
            self.state[key] = self.state.get(key, 0.0) + value

    def result(self) -> float:
        """Return the metric over everything accumulated (NaN when nothing was seen)."""
        count = self.state["count"]
        return float(self.state["total"] / count) if count else float("nan")


def _class_pred(pred: np.ndarray) -> np.ndarray:
    if pred.ndim > 1 and pred.shape[-1] > 1:
        return pred.argmax(axis=-1)
    return (pred.reshape(pred.shape[0], -1)[:, 0] > 0.5).astype(np.int64)


class Accuracy(Metric):
    """Share of samples whose arg-max prediction (or ``> 0.5`` for one output) equals the target."""

    name = "accuracy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        labels = target.reshape(target.shape[0], -1)
        if labels.shape[1] > 1:  # one-hot targets
            labels = labels.argmax(axis=1)
        else:
            labels = labels[:, 0]
        self.state["total"] += float((_class_pred(pred) == labels.astype(np.int64)).sum())
        self.state["count"] += float(target.shape[0])


class Top5Accuracy(Metric):
    """Share of samples whose target is among the five highest-scored classes."""

    name = "top5_accuracy"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        k = min(5, pred.shape[-1])
        top = np.argpartition(-pred, k - 1, axis=-1)[..., :k]
        labels = target.reshape(target.shape[0], -1)[:, 0].astype(np.int64)
        self.state["total"] += float((top == labels[:, None]).any(axis=1).sum())
        self.state["count"] += float(target.shape[0])


class BinaryAccuracy(Metric):
    """Share of samples where ``pred > threshold`` equals the 0/1 target (element-wise)."""

    name = "binary_accuracy"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold
        super().__init__()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        p = (pred.reshape(target.shape[0], -1) > self.threshold).astype(np.int64)
        t = target.reshape(target.shape[0], -1).astype(np.int64)
        hits = p == t  # a (n, 1) target against (n, k) scores compares every column
        self.state["total"] += float(hits.sum())
        self.state["count"] += float(hits.size)


class MSE(Metric):
    """Mean squared error over all elements."""

    name = "mse"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        diff = pred.reshape(target.shape[0], -1) - target.reshape(target.shape[0], -1)
        self.state["total"] += float(np.square(diff, dtype=np.float64).sum())
        self.state["count"] += float(diff.size)


class MAE(Metric):
    """Mean absolute error over all elements."""

    name = "mae"

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        diff = pred.reshape(target.shape[0], -1) - target.reshape(target.shape[0], -1)
        self.state["total"] += float(np.abs(diff).astype(np.float64).sum())
        self.state["count"] += float(diff.size)


class AUC(Metric):
    """Area under the ROC curve of a binary score, exact over the gathered scores.

    Keeps every (score, label) pair, so its state grows with the data set; fine for
    validation sets, which is where AUC is used.
    """

    name = "auc"

    def reset(self) -> None:
        self.state = {"scores": np.zeros(0, np.float64), "labels": np.zeros(0, np.int8)}

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        scores = pred.reshape(pred.shape[0], -1)
        scores = scores[:, -1] if scores.shape[1] > 1 else scores[:, 0]
        self.state["scores"] = np.concatenate([self.state["scores"], scores.astype(np.float64)])
        labels = target.reshape(target.shape[0], -1)[:, 0].astype(np.int8)
        self.state["labels"] = np.concatenate([self.state["labels"], labels])

    def merge(self, other_state: dict[str, Any]) -> None:
        for key in ("scores", "labels"):
            self.state[key] = np.concatenate([self.state[key], other_state[key]])

    def result(self) -> float:
        scores, labels = self.state["scores"], self.state["labels"]
        pos = int(labels.sum())
        neg = len(labels) - pos
        if pos == 0 or neg == 0:
            return float("nan")
        order = np.argsort(scores, kind="mergesort")
        ranks = np.empty(len(scores), np.float64)
        sorted_scores = scores[order]
        # average ranks over ties (Mann-Whitney U)
        _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
        avg = first + (counts - 1) / 2.0 + 1.0
        ranks[order] = np.repeat(avg, counts)
        return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


class FunctionMetric(Metric):
    """Any ``f(pred, target) -> float`` averaged per sample (weighted by batch size)."""

    def __init__(self, fn: Callable[[np.ndarray, np.ndarray], Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = str(name or getattr(fn, "__name__", "metric"))
        super().__init__()

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:
        n = float(target.shape[0])
        value = self.fn(pred, target)
        self.state["total"] += float(np.asarray(value, dtype=np.float64)) * n
        self.state["count"] += n


class Mean(Metric):
    """A running mean of a value weighted by a sample count (used for losses)."""

    def __init__(self, name: str = "loss") -> None:
        self.name = name
        super().__init__()

    def update_value(self, value: float, n: float) -> None:
        """Add ``value`` that stands for ``n`` samples."""
        self.state["total"] += float(value) * n
        self.state["count"] += float(n)

    def update(self, pred: np.ndarray, target: np.ndarray) -> None:  # pragma: no cover
        raise TypeError("Mean takes update_value(value, n)")


_BY_NAME: dict[str, Callable[[], Metric]] = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "top5accuracy": Top5Accuracy,
    "top5_accuracy": Top5Accuracy,
    "binaryaccuracy": BinaryAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "mse": MSE,
    "meansquarederror": MSE,
    "mae": MAE,
    "meanabsoluteerror": MAE,
    "auc": AUC,
}


def make_metrics(spec: Any) -> list[Metric]:
    """Turn what the user passed as ``metrics`` into fresh :class:`Metric` objects.

    Args:
        spec: ``None``; a metric name (``"accuracy"``, ``"top5accuracy"``, ``"mse"``, ``"mae"``,
            ``"auc"``, ``"binary_accuracy"``); a :class:`Metric` subclass or instance; a function
            ``f(pred, target)``; or a list/dict of these (a dict's keys name the metrics).

    Returns:
        A list of freshly reset metrics with unique names.

    Raises:
        TypeError: an entry of an unsupported type.
        ValueError: an unknown metric name or a duplicate name.
    """
    if spec is None:
        return []
    items: Sequence[tuple[str | None, Any]]
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, (list, tuple)):
        items = [(None, s) for s in spec]
    else:
        items = [(None, spec)]
    out: list[Metric] = []
    for name, item in items:
        metric: Metric
        if isinstance(item, str):
            key = item.lower().replace("-", "_")
            factory = _BY_NAME.get(key) or _BY_NAME.get(key.replace("_", ""))
            if factory is None:
                raise ValueError(
                    f"metrics: unknown metric name {item!r}; use one of "
                    f"{sorted(set(_BY_NAME))}, a Metric, or a function f(pred, target)."
                )
            metric = factory()
        elif isinstance(item, type) and issubclass(item, Metric):
            metric = item()
        elif isinstance(item, Metric):
            metric = type(item).__new__(type(item))
            metric.__dict__.update(item.__dict__)
            metric.reset()
        elif callable(item):
            metric = FunctionMetric(item)
        else:
            raise TypeError(
                f"metrics: {item!r} of type {type(item).__name__} is not supported; pass a metric "
                "name, an orca.core.engine.metrics.Metric, or a function f(pred, target)."
            )
        if name:
            metric.name = name
        out.append(metric)
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"metrics: duplicate metric names {names}; give a dict to name them.")
    return out


def merge_states(metrics: list[Metric], states: list[dict[str, dict[str, Any]]]) -> dict[str, float]:
    """Merge per-worker metric states (``{name: state}``) into final values."""
    out: dict[str, float] = {}
    for metric in metrics:
        metric.reset()
        for state in states:
            if metric.name in state:
                metric.merge(state[metric.name])
        out[metric.name] = metric.result()
    return out
