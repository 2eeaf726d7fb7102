"""Metrics of the PyTorch Estimator: Orca's mergeable metrics, a metric function called on torch
tensors, and the names the reference (bigdl-orca 2.4) gave each metric's result.

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
from orca.core.plugin import AUC, MAE, MSE, Accuracy, BinaryAccuracy, Metric, Top5Accuracy, make_metrics

__all__ = ["AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Metric", "TensorFunctionMetric", "Top5Accuracy",
           "process_stats", "reference_keys", "torch_metrics"]

#: Orca's metric classes and the name the reference gave each (its ``Metric.get_name()``)
_REFERENCE_NAMES: dict[type, str] = {Accuracy: "Accuracy", Top5Accuracy: "Top5Accuracy",
                                     BinaryAccuracy: "BinaryAccuracy", MSE: "MSE", MAE: "MAE", AUC: "AUC"}


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
    :class:`TensorFunctionMetric`, in the same list, dict or single-item form."""

    def wrap(item: Any) -> Any:
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
        ref = _REFERENCE_NAMES.get(type(metric))
        default = getattr(type(metric), "name", None)
        if ref is not None and metric.name == default:
            out[metric.name] = ref
        elif isinstance(metric, TensorFunctionMetric):
            out[metric.name] = metric.name
    return out


def add_reference_eval_keys(result: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    """``result`` (``evaluate``'s, Orca's ``val_<name>`` keys) with the reference's keys added: each
    metric under its reference name as a 0-d float64 tensor (the reference returned tensors)."""
    for orca, ref in keys.items():
        value = result.get(f"val_{orca}")
        if value is not None and ref not in result:
            result[ref] = torch.tensor(float(value), dtype=torch.float64)
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
