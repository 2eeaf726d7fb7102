"""Callbacks run inside the workers, on every rank, with the epoch's merged stats.

Because every rank sees the same merged stats, a callback that decides something (stop
early) decides it the same way everywhere; one that writes files writes on rank 0 only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from orca.core.engine.runner import Runner


class Callback:
    """Base class: override the hooks you need. ``self.runner``/``self.rank`` are set first."""

    runner: Runner
    rank: int = 0
    world_size: int = 1
    #: what the fit's checkpoints carry besides the state (set by the engine as a fit begins): the
    #: MLflow run the fit logs to, so that a fit resumed from one continues that run
    checkpoint_meta: dict[str, Any] = {}  # noqa: RUF012 - replaced per instance, never mutated

    def bind(self, runner: Runner, rank: int, world_size: int) -> None:
        """Attach to the runner of this worker (called by the engine)."""
        self.runner, self.rank, self.world_size = runner, rank, world_size

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """Before the first epoch."""

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Before each epoch."""

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        """After each training step (``logs`` has the local ``loss``)."""

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """After each epoch, with the merged stats of every worker."""

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """After the last epoch."""


class ModelCheckpoint(Callback):
    """Save a checkpoint after every epoch (or every ``n`` iterations), on rank 0.

    Args:
        filepath: target path; ``{epoch}`` and ``{iter}`` are filled in
            (e.g. ``"/ckpt/model-{epoch}.ckpt"``). Local paths and fsspec URLs work.
        save_every_n_iters: also save every this many steps (``None``: per epoch only).
    """

    def __init__(self, filepath: str, save_every_n_iters: int | None = None) -> None:
        self.filepath = filepath
        self.save_every_n_iters = save_every_n_iters
        self._epoch = 0

    def _save(self, epoch: int, iteration: int) -> None:
        if self.rank != 0:
            return
        path = self.filepath.format(epoch=epoch, iter=iteration)
        parent = os.path.dirname(path)
        if parent and "://" not in path:
            os.makedirs(parent, exist_ok=True)
        self.runner.save_checkpoint(path, epoch, meta=self.checkpoint_meta or None)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        if self.save_every_n_iters and (step + 1) % self.save_every_n_iters == 0:
            self._save(self._epoch, step + 1)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self.save_every_n_iters or "{iter}" not in self.filepath:
            self._save(epoch + 1, 0)


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has not improved for ``patience`` epochs.

    Args:
        monitor: a stats key such as ``"val_loss"``.
        patience: epochs without improvement to tolerate.
        mode: ``"min"`` or ``"max"``.
        min_delta: smallest change that counts as an improvement.
    """

    def __init__(self, monitor: str = "val_loss", patience: int = 0, mode: str = "min", min_delta: float = 0.0):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.monitor, self.patience, self.mode, self.min_delta = monitor, patience, mode, min_delta
        self.best: float | None = None
        self.wait = 0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise KeyError(f"EarlyStopping: {self.monitor!r} is not in the stats {sorted(logs or {})}.")
        better = self.best is None or (
            value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        )
        if better:
            self.best, self.wait = value, 0
        else:
            self.wait += 1
            if self.wait > self.patience:
                self.runner.stop_training = True


_CKPT_NUM = re.compile(r"(\d+)")


class CheckpointNotFoundError(FileNotFoundError, RuntimeError):
    """No checkpoint where one was looked for: a ``FileNotFoundError``, and the ``RuntimeError`` the
    reference raised (so code catching either keeps working)."""


def latest_checkpoint(directory: str) -> str:
    """Return the newest checkpoint file in ``directory`` (the highest number in its name).

    Raises:
        CheckpointNotFoundError: the directory does not exist or holds no checkpoint (a
            ``FileNotFoundError`` and a ``RuntimeError``).
    """
    import fsspec

    fs, _, (root,) = fsspec.get_fs_token_paths(directory)
    if not fs.exists(root):
        raise CheckpointNotFoundError(f"checkpoint directory {directory!r} does not exist.")
    entries = [p for p in fs.ls(root, detail=False) if fs.isfile(p)]
    scored = []
    for path in entries:
        nums = _CKPT_NUM.findall(os.path.basename(path))
        if nums:
            scored.append((tuple(int(n) for n in nums), fs.modified(path) if hasattr(fs, "modified") else 0, path))
    if not scored:
        raise CheckpointNotFoundError(f"no checkpoint (a file with a number in its name) in {directory!r}.")
    best = max(scored, key=lambda t: (t[0], t[1]))[2]
    protocol = fs.protocol[0] if isinstance(fs.protocol, (list, tuple)) else fs.protocol
    return best if protocol in ("file", "local") or "://" not in directory else f"{protocol}://{best}"


class Trigger:
    """When ``fit`` writes a checkpoint into the Estimator's ``model_dir`` (``fit(checkpoint_trigger=)``,
    the reference's ``bigdl.orca.learn.trigger``): :class:`EveryEpoch` or :class:`SeveralIteration`."""

    #: save every this many steps (``None``: after every epoch)
    interval: int | None = None


class EveryEpoch(Trigger):
    """A checkpoint after every epoch."""

    def __repr__(self) -> str:
        return "EveryEpoch()"


class SeveralIteration(Trigger):
    """A checkpoint every ``interval`` training steps (counted over the fit).

    Raises:
        ValueError: ``interval`` is not a positive int.
    """

    def __init__(self, interval: int) -> None:
        if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
            raise ValueError(f"SeveralIteration(interval) takes a positive number of steps, got {interval!r}.")
        self.interval = interval

    def __repr__(self) -> str:
        return f"SeveralIteration({self.interval})"


def callbacks_blob(callbacks: Sequence[Callback]) -> bytes | None:
    """``callbacks`` as cloudpickle's bytes for Spark tasks and Ray actors (``None`` for none): Spark's
    own copy of cloudpickle does not copy by value what was registered with
    ``cloudpickle.register_pickle_by_value``."""
    if not callbacks:
        return None
    import cloudpickle

    return cloudpickle.dumps(list(callbacks))


def load_callbacks(blob: bytes | None) -> list[Callback]:
    """The callbacks of :func:`callbacks_blob` (fresh objects: each task binds its own)."""
    if blob is None:
        return []
    import cloudpickle

    return cloudpickle.loads(blob)
