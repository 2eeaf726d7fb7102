"""``MainCallback``: the reference's swappable training step (a custom forward, loss or backward).

A fit, an evaluate or a predict given a :class:`MainCallback` runs each step through its hooks
instead of the runner's own: ``on_train_forward(runner)`` sets ``runner.output`` and ``runner.loss``
from ``runner.batch`` (the batch's input tensors, then its label tensors; a ``map<string, ...>``
label column is one ``{key: tensor}``), ``on_iter_backward(runner)`` calls
``runner.optimizer.zero_grad()``, ``runner.loss.backward()`` and ``runner.optimizer.step()``,
``on_val_forward(runner)`` computes a validation batch's output and loss, ``on_lr_adjust(runner)``
steps the scheduler after each epoch, and ``on_pred_forward(runner)`` sets a prediction batch's
``runner.output`` from its feature tensors. The step stays data-parallel: ``runner.optimizer``
averages the gradient over all workers before it applies it (a step the hook did not apply is
applied after it, so every worker applies the same gradient), and ``runner.loss`` is weighted by
the batch's share of the global batch before the backward.
"""

from __future__ import annotations

from typing import Any

from orca.torch._callbacks import Callback


class MainCallback(Callback):
    """The training step's hooks (subclass it and override what your model needs; at most one per call).

    Example:
        >>> class TwoLosses(MainCallback):
        ...     def on_train_forward(self, runner):
        ...         *features, target = runner.batch
        ...         runner.output = runner.model(*features)
        ...         runner.loss = runner.criterion(runner.output, target) + 0.01 * runner.output.abs().mean()
    """

    def bind(self, runner: Any, rank: int, world_size: int) -> None:
        super().bind(runner, rank, world_size)
        runner.main_callback = self

    def close(self) -> None:
        """Stop customising the runner's steps (the call ended)."""
        runner = getattr(self, "runner", None)
        if runner is not None and getattr(runner, "main_callback", None) is self:
            runner.main_callback = None

    def on_iter_forward(self, runner: Any) -> None:
        """The default forward of a training or validation batch: ``runner.output``, ``runner.loss``
        and ``runner.target`` from ``runner.batch`` (features, then one target)."""
        *features, target = runner.batch
        runner.output = runner.model(*features)
        runner.loss = runner.criterion(runner.output, target)
        runner.target = target

    def on_iter_backward(self, runner: Any) -> None:
        """The default backward: zero the gradients, back-propagate ``runner.loss``, apply the step."""
        runner.optimizer.zero_grad()
        runner.loss.backward()
        runner.optimizer.step()

    def on_lr_adjust(self, runner: Any) -> None:
        """After each epoch: step the scheduler, if there is one."""
        if runner.scheduler is not None:
            runner.scheduler.step()

    def on_train_forward(self, runner: Any) -> None:
        """A training batch's forward (default: :meth:`on_iter_forward`)."""
        self.on_iter_forward(runner)

    def on_val_forward(self, runner: Any) -> None:
        """A validation batch's forward (default: :meth:`on_iter_forward`)."""
        self.on_iter_forward(runner)

    def on_pred_forward(self, runner: Any) -> None:
        """A prediction batch's forward, run by ``predict(callbacks=[this])`` in every worker (under
        ``torch.no_grad()``, the model in eval mode): set ``runner.output`` from ``runner.batch`` (the
        batch's feature tensors). The output may be a tensor or numpy array, a dict of them, or a
        tuple/list of those, each with one row per input row; each top-level output becomes one
        output column (a dict a struct column keyed by its keys, see ``Estimator.predict``).
        Default: the model's forward, ``runner.output = runner.model(*runner.batch)``.

        Example:
            >>> class DictOutput(MainCallback):
            ...     def on_pred_forward(self, runner):
            ...         runner.output = {k: v.numpy() for k, v in runner.model(*runner.batch).items()}
        """
        runner.output = runner.model(*runner.batch)
