"""The PyTorch Estimator's callbacks: Orca's worker-side callbacks with the reference's names too.

:class:`Callback` is an orca Callback (Keras' ``on_*`` hooks, run in every worker with the epoch's
stats merged over all workers) that also offers what a callback written for the reference
(bigdl-orca 2.4, ``bigdl.orca.learn.pytorch.callbacks``) reads: ``self.model`` (the worker's
``nn.Module``) and the ``before_*``/``after_*`` hooks called with a runner (``runner.model``,
``runner.optimizer``, ``runner.epochs``, ``runner.global_step``, ``runner.epoch_stats``,
``runner.rank``...). :class:`ModelCheckpoint` takes the reference's ``save_weights_only``,
``by_epoch`` and ``interval``; :class:`TensorBoardCallback` writes the reference's per-epoch or
per-batch scalars.
"""

from __future__ import annotations

import os
import re
from typing import Any

from orca.core.plugin import Callback as _OrcaCallback
from orca.core.plugin import ModelCheckpoint as _OrcaModelCheckpoint
from orca.core.plugin import write_checkpoint


class RunnerView:
    """What the reference's hooks receive as ``runner``: the worker's runner (its attributes are
    readable through this view: ``model``, ``optimizer``, ``scheduler``, ``config``, ``rank``...)
    with the reference's counters: ``epochs`` (epochs completed), ``global_step`` (steps taken in
    this fit), ``batch_idx``, ``metrics_stats`` (the last step's ``train_loss``) and
    ``epoch_stats`` (the last epoch's merged stats)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.epochs = int(getattr(runner, "epoch", 0))
        self.global_step = 0
        self.batch_idx = 0
        self.metrics_stats: dict[str, Any] = {}
        self.epoch_stats: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    @property
    def world_size(self) -> int:
        """Workers in the group."""
        return int(self.runner.world)

    @property
    def criterion(self) -> Any:
        """The loss (the reference's name for it)."""
        return self.runner.loss_fn

    def save_checkpoint(self, filepath: str, save_weights_only: bool = False) -> str:
        """Write this worker's state to ``filepath`` (rank 0 only, as the reference): Orca's
        checkpoint format; ``save_weights_only``: the model's weights and the epoch only."""
        if self.runner.rank == 0:
            save_state(self.runner, filepath, self.epochs, save_weights_only)
        return filepath


def save_state(runner: Any, path: str, epoch: int, weights_only: bool, meta: dict[str, Any] | None = None) -> None:
    """Write ``runner``'s state (only its model's weights with ``weights_only``) and ``epoch`` to
    ``path`` as an Orca checkpoint (``Estimator.load_checkpoint`` reads it)."""
    parent = os.path.dirname(path)
    if parent and "://" not in path:
        os.makedirs(parent, exist_ok=True)
    state = runner.get_state()
    if weights_only:
        state = {"model": state["model"]}
    write_checkpoint(path, epoch, state, meta=meta)


class Callback(_OrcaCallback):
    """Base class of the PyTorch Estimator's callbacks: override Orca's hooks (``on_train_begin``,
    ``on_epoch_begin``, ``on_batch_end``, ``on_epoch_end(epoch, logs)``, ``on_train_end(logs)``) or
    the reference's (``before_run(runner)``, ``before_epoch``, ``after_iter``, ``after_epoch``,
    ``after_run``, and their ``_train_`` forms). They run inside every worker; ``logs`` and
    ``runner.epoch_stats`` are the epoch's stats merged over all workers.

    Attributes:
        model: the worker's ``nn.Module`` (the model being trained).
    """

    _view: RunnerView | None = None

    @property
    def model(self) -> Any:
        """The worker's ``nn.Module`` (the reference's ``self.model``)."""
        runner: Any = self.runner  # a TorchRunner
        return runner.model

    def _runner_view(self) -> RunnerView:
        if self._view is None or self._view.runner is not self.runner:
            self._view = RunnerView(self.runner)
        return self._view

    # ---------------------------------------------------------------- Orca's hooks call the reference's
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._view = RunnerView(self.runner)
        self.before_run(self._view)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        view = self._runner_view()
        view.epochs = epoch
        self.before_train_epoch(view)

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        view = self._runner_view()
        view.batch_idx = step
        view.global_step += 1
        view.metrics_stats = {"train_loss": (logs or {}).get("loss")}
        self.after_train_iter(view)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        view = self._runner_view()
        view.epochs = epoch + 1
        view.epoch_stats = dict(logs or {})
        self.after_train_epoch(view)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.after_run(self._runner_view())

    # ---------------------------------------------------------------- the reference's hooks
    def before_run(self, runner: Any) -> None:
        """Before the first epoch of a fit."""

    def after_run(self, runner: Any) -> None:
        """After the last epoch of a fit."""

    def before_epoch(self, runner: Any) -> None:
        """Before each training epoch (unless ``before_train_epoch`` is overridden)."""

    def after_epoch(self, runner: Any) -> None:
        """After each training epoch, its validation included (unless ``after_train_epoch`` is overridden)."""

    def after_iter(self, runner: Any) -> None:
        """After each training step (unless ``after_train_iter`` is overridden)."""

    def before_train_epoch(self, runner: Any) -> None:
        """Before each training epoch."""
        self.before_epoch(runner)

    def after_train_epoch(self, runner: Any) -> None:
        """After each training epoch, with ``runner.epoch_stats``."""
        self.after_epoch(runner)

    def after_train_iter(self, runner: Any) -> None:
        """After each training step, with ``runner.metrics_stats``."""
        self.after_iter(runner)

    def every_n_iter(self, runner: Any, n: int) -> bool:
        """True on every ``n``-th step of the fit."""
        return n > 0 and runner.global_step % n == 0

    def every_n_epoch(self, runner: Any, n: int) -> bool:
        """True after every ``n``-th epoch."""
        return n > 0 and runner.epochs % n == 0


_KEYS = re.compile(r"\{(epoch|iter)([:}])")


class ModelCheckpoint(_OrcaModelCheckpoint, Callback):
    """Save a checkpoint on rank 0 after every epoch (or every ``interval`` epochs or iterations).

    A ``filepath`` whose file name has no extension is named as the reference named it: each
    ``{epoch}``/``{iter}`` becomes ``epoch=<n>``/``iter=<n>`` and ``.ckpt`` is appended
    (``"dir/test-{epoch}"`` -> ``dir/test-epoch=1.ckpt``); one with an extension is filled in as
    given (``"dir/model-{epoch}.ckpt"`` -> ``dir/model-1.ckpt``). ``Estimator.latest_checkpoint(dir)``
    finds the newest, ``Estimator.load_checkpoint(path)`` reads it.

    Args:
        filepath: the checkpoint path with ``{epoch}`` and/or ``{iter}`` (local or fsspec URL).
        save_weights_only: write the model's weights (and the epoch) only, not the optimizer's state.
        by_epoch: save after epochs (``True``) or after iterations (``False``, every ``interval`` steps).
        interval: epochs (``by_epoch``) or steps between checkpoints; ``-1``: every epoch.
        save_every_n_iters: also save every this many steps (Orca's spelling of ``by_epoch=False``).

    Raises:
        ValueError: ``by_epoch=False`` without a positive ``interval``.
    """

    def __init__(self, filepath: str, save_weights_only: bool = False, by_epoch: bool = True, interval: int = -1,
                 save_every_n_iters: int | None = None) -> None:
        if not by_epoch:
            if not isinstance(interval, int) or interval <= 0:
                raise ValueError(f"ModelCheckpoint(by_epoch=False) saves every `interval` steps: pass interval > 0, "
                                 f"got {interval!r}.")
            save_every_n_iters = interval
        super().__init__(filepath, save_every_n_iters=save_every_n_iters)
        self.save_weights_only = bool(save_weights_only)
        self.by_epoch = by_epoch
        self.interval = interval
        name = os.path.basename(filepath)
        self.reference_naming = not os.path.splitext(name)[1]

    def path_for(self, epoch: int, iteration: int) -> str:
        """The file a checkpoint after ``epoch`` (and ``iteration``) goes to."""
        if not self.reference_naming:
            return self.filepath.format(epoch=epoch, iter=iteration)
        head, name = os.path.split(self.filepath)
        name = _KEYS.sub(lambda m: f"{m.group(1)}={{{m.group(1)}{m.group(2)}", name)
        return os.path.join(head, name.format(epoch=epoch, iter=iteration) + ".ckpt")

    def _save(self, epoch: int, iteration: int) -> None:
        if self.rank != 0:
            return
        save_state(self.runner, self.path_for(epoch, iteration), epoch, self.save_weights_only,
                   meta=self.checkpoint_meta or None)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._steps = 0
        super().on_train_begin(logs)

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        self._steps = getattr(self, "_steps", 0) + 1
        if not self.reference_naming:  # Orca's {iter}: the step within its epoch
            super().on_batch_end(step, logs)
        elif self.save_every_n_iters and self._steps % self.save_every_n_iters == 0:  # the reference's: in the fit
            self._save(self._epoch, self._steps)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self.by_epoch:
            return
        if self.interval > 1 and (epoch + 1) % self.interval:
            return
        super().on_epoch_end(epoch, logs)


class TensorBoardCallback(Callback):
    """Write the fit's losses and metrics as TensorBoard scalars from rank 0 (as the reference's).

    ``freq="epoch"``: each epoch's merged stats (``train_loss``, ``val_loss``, ``val_<metric>``...)
    at step = epoch; ``"batch"`` or an int ``n``: rank 0's ``train_loss`` after every (``n``-th)
    step, at step = the step's number in the fit. Needs the ``tensorboard`` package.

    Args:
        log_dir: the folder TensorBoard reads (on rank 0's machine).
        freq: ``"epoch"``, ``"batch"`` or a number of steps.
        **kwargs: passed to ``torch.utils.tensorboard.SummaryWriter``.

    Raises:
        ValueError: ``freq`` is none of these, or ``log_dir`` is missing.
    """

    #: stats that are bookkeeping, not scalars
    unlog_items = ("epoch", "batch_count", "num_samples")
    _writer: Any = None  # rank 0's SummaryWriter, made in the worker (never pickled)

    def __init__(self, log_dir: str | None = None, freq: str | int = "epoch", **kwargs: Any) -> None:
        if not log_dir:
            raise ValueError("TensorBoardCallback needs log_dir, the folder TensorBoard reads.")
        if freq not in ("epoch", "batch") and not (isinstance(freq, int) and freq > 0):
            raise ValueError(f"TensorBoardCallback(freq=) takes 'epoch', 'batch' or a positive int, got {freq!r}.")
        self.log_dir, self.freq, self.kwargs = log_dir, freq, kwargs

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_writer", "_view")}

    def _write(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=self.log_dir, **self.kwargs)
        return self._writer

    def after_train_iter(self, runner: Any) -> None:
        if self.freq == "epoch" or runner.rank != 0:
            return
        if self.freq == "batch" or runner.global_step % int(self.freq) == 0:
            loss = runner.metrics_stats.get("train_loss")
            if loss is not None:
                self._write().add_scalar("train_loss", float(loss), runner.global_step)

    def after_train_epoch(self, runner: Any) -> None:
        if self.freq != "epoch" or runner.rank != 0:
            return
        writer = self._write()
        for name, value in runner.epoch_stats.items():
            if name not in self.unlog_items and isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_scalar(name, float(value), runner.epochs)

    def after_run(self, runner: Any) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
