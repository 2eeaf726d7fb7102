"""TensorBoard summaries of ``fit``, for every framework: the reference's ``set_tensorboard``,
``get_train_summary`` and ``get_validation_summary``.

The summaries are written on the driver, live, from each epoch's merged statistics (those
``fit``'s History gets, exact over all workers) as rank 0 reports them during the fit (a
``BaseEstimator.fit_listeners`` listener). The step of a point is the training iteration at
the end of its epoch (summed over the fits since ``set_tensorboard``):

- ``log_dir/app_name/train``: ``Loss``, ``Throughput`` (rows per second) and each metric;
- ``log_dir/app_name/validation``: ``Loss`` and each metric on the validation data.

``est.set_tensorboard(log_dir)`` turns it on (``app_name`` defaults to ``"orca"``). There is one
point per epoch and no per-step option: the driver gets merged statistics once per epoch; during
the epoch rank 0 reports only its own batch loss (every few steps, for the progress bar), which is
not merged over the workers.

Event files are written and read with the ``tensorboard`` package (``pip install
"orca-core[tensorboard]"``); no ML framework is needed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

#: epoch stats that are bookkeeping, not summaries
_SKIP = {"epoch", "batch_count", "num_samples", "train_loss", "loss", "epoch_time_s", "stopped_early", "restarts"}
_INSTALL = 'TensorBoard summaries need the tensorboard package: pip install "orca-core[tensorboard]".'


def _tensorboard() -> Any:
    try:
        from tensorboard.summary.writer import event_file_writer
    except ImportError:
        raise ImportError(_INSTALL) from None
    return event_file_writer


class Summaries:
    """Writes each epoch's merged stats as TensorBoard scalars (a ``fit`` listener; see the module doc).

    Args:
        log_dir: the folder TensorBoard reads.
        app_name: the subfolder of this Estimator's summaries.

    Raises:
        ImportError: tensorboard is not installed (the message says how to install it).
    """

    def __init__(self, log_dir: str, app_name: str = "orca") -> None:
        _tensorboard()  # refuse now, not in the middle of a fit
        self.root = os.path.join(os.path.abspath(log_dir), app_name)
        self.iteration = 0
        self._writers: dict[str, Any] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        """Write an ``epoch`` event's stats (other events are ignored)."""
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
            if key == "event" or key in _SKIP or isinstance(value, bool) or not isinstance(value, (int, float)):
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
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        writer = self._writers.get(kind)
        if writer is None:
            path = os.path.join(self.root, kind)
            os.makedirs(path, exist_ok=True)
            writer = self._writers[kind] = _tensorboard().EventFileWriter(path)
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()])
        writer.add_event(Event(wall_time=time.time(), step=self.iteration, summary=summary))
        writer.flush()

    def close(self) -> None:
        """Flush and close the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def read(self, kind: str, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of ``tag`` in the ``kind`` event files (read
        with TensorBoard's own reader), by iteration."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        path = os.path.join(self.root, kind)
        if not os.path.isdir(path):
            return np.zeros((0, 3))
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        if tag not in acc.Tags().get("scalars", []):
            return np.zeros((0, 3))
        rows = sorted((float(s.step), float(s.value), float(s.wall_time)) for s in acc.Scalars(tag))
        return np.array(rows, dtype=np.float64).reshape(-1, 3)
