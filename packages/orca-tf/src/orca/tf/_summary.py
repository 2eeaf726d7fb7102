"""The reference's TensorBoard calls: ``set_tensorboard``, ``get_train_summary``,
``get_validation_summary``.

The summaries are written on the driver, live, from each epoch's merged statistics (the ones
``fit``'s History gets, exact over all workers), as they arrive during the fit (a
``BaseEstimator.fit_listeners`` listener). The step of a point is the training iteration at
the end of its epoch (steps summed over the fits since ``set_tensorboard``):

- ``log_dir/app_name/train``: ``Loss``, ``Throughput`` (rows per second) and each metric;
- ``log_dir/app_name/validation``: ``Loss`` and each metric of the validation data.

The ``get_*_summary`` calls read the event files back (what TensorBoard shows).
"""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np

#: epoch stats that are bookkeeping, not summaries
_SKIP = {"epoch", "batch_count", "num_samples", "train_loss", "loss", "epoch_time_s", "stopped_early", "restarts"}


class Summaries:
    """Writes each epoch's stats as TF summaries (a listener of ``fit``'s progress events)."""

    def __init__(self, log_dir: str, app_name: str) -> None:
        self.root = os.path.join(os.path.abspath(log_dir), app_name)
        self.iteration = 0
        self._writers: dict[str, Any] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("event") != "epoch":
            return
        self.iteration += int(event.get("batch_count") or 0)
        train: dict[str, float] = {}
        val: dict[str, float] = {}
        if "loss" in event:
            train["Loss"] = float(event["loss"])
        if event.get("epoch_time_s") and event.get("num_samples"):
            train["Throughput"] = float(event["num_samples"]) / float(event["epoch_time_s"])
        for key, value in event.items():
            if key == "event" or key in _SKIP or not isinstance(value, (int, float)):
                continue
            if key == "val_loss":
                val["Loss"] = float(value)
            elif key.startswith("val_"):
                val[key[4:]] = float(value)
            else:
                train[key] = float(value)
        self._write("train", train)
        self._write("validation", val)

    def _write(self, kind: str, values: dict[str, float]) -> None:
        if not values:
            return
        import tensorflow as tf

        writer = self._writers.get(kind)
        if writer is None:
            writer = self._writers[kind] = tf.summary.create_file_writer(os.path.join(self.root, kind))
        with writer.as_default(step=self.iteration):
            for tag, value in values.items():
                tf.summary.scalar(tag, value)
        writer.flush()

    def read(self, kind: str, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of ``tag`` in the ``kind`` event files, by iteration."""
        import tensorflow as tf

        rows = []
        for path in sorted(glob.glob(os.path.join(self.root, kind, "events.out.tfevents.*"))):
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.tag == tag:
                        number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                        rows.append((float(event.step), number, float(event.wall_time)))
        rows.sort(key=lambda r: (r[0], r[2]))
        return np.array(rows, dtype=np.float64).reshape(-1, 3)


class TensorBoardMixin:
    """``set_tensorboard`` / ``get_train_summary`` / ``get_validation_summary`` for an Estimator
    (a ``BaseEstimator``: it has ``fit_listeners``)."""

    fit_listeners: list[Any]
    _summaries: Summaries | None = None

    def set_tensorboard(self, log_dir: str, app_name: str) -> None:
        """Write TensorBoard summaries of the next fits to ``log_dir/app_name/{train,validation}``.

        Each epoch's merged loss, metrics and throughput are written on the driver as the epoch
        ends (see :mod:`orca.tf._summary`); a new call replaces the previous destination.
        """
        if not isinstance(log_dir, str) or not isinstance(app_name, str) or not app_name:
            raise TypeError("set_tensorboard(log_dir, app_name) takes two strings, e.g. "
                            "set_tensorboard('/tmp/logs', 'lenet').")
        if self._summaries is not None and self._summaries in self.fit_listeners:
            self.fit_listeners.remove(self._summaries)
        self._summaries = Summaries(log_dir, app_name)
        self.fit_listeners.append(self._summaries)

    def get_train_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of a training summary (``"Loss"``,
        ``"Throughput"`` or a metric name) written since :meth:`set_tensorboard`."""
        return self._summary("train", tag)

    def get_validation_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of a validation summary (``"Loss"`` or a
        metric name) written since :meth:`set_tensorboard`."""
        return self._summary("validation", tag)

    def _summary(self, kind: str, tag: str) -> np.ndarray:
        if self._summaries is None:
            raise ValueError(f"no summaries: call set_tensorboard(log_dir, app_name) before fit to record {tag!r}.")
        return self._summaries.read(kind, tag)
