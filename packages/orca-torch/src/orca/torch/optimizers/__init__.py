"""The reference's optimizers (``bigdl.orca.learn.optimizers``) as ``from_torch(optimizer=...)``:
each is a creator ``f(model, config)`` of the ``torch.optim`` optimizer with the same
hyper-parameters, its learning rate following the BigDL schedule per step
(:mod:`orca.torch.optimizers.schedule`; ``learningrate_decay``: ``lr / (1 + step * decay)``).

Example:
    >>> from orca.torch.optimizers import SGD
    >>> from orca.torch.optimizers.schedule import Default
    >>> est = Estimator.from_torch(model=net, loss=loss, optimizer=SGD(learningrate_schedule=Default()))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
from orca.torch.optimizers.schedule import Default, Scheduler

__all__ = ["SGD", "Adadelta", "Adagrad", "Adam", "Adamax", "Optimizer", "RMSprop"]

#: the reference's "no dampening given": dampening = momentum (BigDL's SGD)
DOUBLEMAX = 1.7976931348623157e308


class _Scheduled:
    """A torch optimizer whose groups' ``lr`` follows a schedule per step (``base_lr`` and ``iteration``
    live in the param groups, so the optimizer's state dict carries them)."""

    def __init__(self, params: Any, schedule: Scheduler, decay: float, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)  # type: ignore[call-arg]
        self.schedule, self.decay = schedule, decay
        for group in self.param_groups:  # type: ignore[attr-defined]
            group.setdefault("base_lr", group["lr"])
            group.setdefault("iteration", 0)

    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:  # type: ignore[attr-defined]
            group["lr"] = self.schedule.rate(group["base_lr"], group["iteration"], self.decay)
            group["iteration"] += 1
        return super().step(closure)  # type: ignore[misc]


class _SGD(_Scheduled, torch.optim.SGD):
    pass


class _Adam(_Scheduled, torch.optim.Adam):
    pass


class _Adagrad(_Scheduled, torch.optim.Adagrad):
    pass


class _Adamax(_Scheduled, torch.optim.Adamax):
    pass


class _RMSprop(_Scheduled, torch.optim.RMSprop):
    pass


class _Adadelta(_Scheduled, torch.optim.Adadelta):
    pass


class Optimizer:
    """An optimizer as the reference described it: called as ``f(model, config)`` it builds the torch one."""

    torch_class: type = _SGD
    schedule: Scheduler
    decay: float = 0.0

    def torch_kwargs(self) -> dict[str, Any]:
        """The torch optimizer's keyword arguments."""
        raise NotImplementedError

    def __call__(self, model: torch.nn.Module, config: dict[str, Any] | None = None) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        return self.torch_class(params, self.schedule, self.decay, **self.torch_kwargs())  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.torch_kwargs()})"


class SGD(Optimizer):
    """BigDL's SGD as ``torch.optim.SGD``.

    Args:
        learningrate: the base learning rate.
        learningrate_decay: the Default schedule's decay (``lr / (1 + step * decay)``).
        weightdecay: L2 weight decay.
        momentum: momentum.
        dampening: dampening of the momentum (BigDL's default: equal to ``momentum``).
        nesterov: Nesterov momentum.
        learningrate_schedule: a :mod:`~orca.torch.optimizers.schedule` (default :class:`Default`).

    Raises:
        TypeError: ``learningrates``/``weightdecays`` (per-parameter arrays), which Orca does not take.
    """

    def __init__(self, learningrate: float = 1e-3, learningrate_decay: float = 0.0, weightdecay: float = 0.0,
                 momentum: float = 0.0, dampening: float = DOUBLEMAX, nesterov: bool = False,
                 learningrate_schedule: Scheduler | None = None, learningrates: Any = None,
                 weightdecays: Any = None) -> None:
        if learningrates is not None or weightdecays is not None:
            raise TypeError("SGD(learningrates=, weightdecays=): per-parameter rates are not supported; use torch "
                            "param groups: optimizer=lambda model, config: torch.optim.SGD([...groups...]).")
        self.lr, self.decay, self.weight_decay, self.momentum = learningrate, learningrate_decay, weightdecay, momentum
        self.dampening = momentum if dampening == DOUBLEMAX else dampening
        self.nesterov = nesterov
        self.schedule = learningrate_schedule or Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum, "dampening": self.dampening,
                "weight_decay": self.weight_decay, "nesterov": self.nesterov}


class Adam(Optimizer):
    """BigDL's Adam as ``torch.optim.Adam`` (``learningrate_decay``: ``lr / (1 + step * decay)``)."""

    torch_class = _Adam

    def __init__(self, learningrate: float = 1e-3, learningrate_decay: float = 0.0, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8) -> None:
        self.lr, self.decay, self.betas, self.eps = learningrate, learningrate_decay, (beta1, beta2), epsilon
        self.schedule = Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps}


class Adagrad(Optimizer):
    """BigDL's Adagrad as ``torch.optim.Adagrad``."""

    torch_class = _Adagrad

    def __init__(self, learningrate: float = 1e-3, learningrate_decay: float = 0.0, weightdecay: float = 0.0) -> None:
        self.lr, self.decay, self.weight_decay = learningrate, learningrate_decay, weightdecay
        self.schedule = Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": self.lr, "weight_decay": self.weight_decay}


class Adamax(Optimizer):
    """BigDL's Adamax as ``torch.optim.Adamax``."""

    torch_class = _Adamax

    def __init__(self, learningrate: float = 0.002, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-38) -> None:
        self.lr, self.betas, self.eps = learningrate, (beta1, beta2), epsilon
        self.schedule = Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps}


class RMSprop(Optimizer):
    """BigDL's RMSprop as ``torch.optim.RMSprop`` (``decayrate``: torch's ``alpha``)."""

    torch_class = _RMSprop

    def __init__(self, learningrate: float = 1e-2, learningrate_decay: float = 0.0, decayrate: float = 0.99,
                 epsilon: float = 1e-8) -> None:
        self.lr, self.decay, self.alpha, self.eps = learningrate, learningrate_decay, decayrate, epsilon
        self.schedule = Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps}


class Adadelta(Optimizer):
    """BigDL's Adadelta as ``torch.optim.Adadelta`` (``decayrate``: torch's ``rho``; BigDL's rate is 1)."""

    torch_class = _Adadelta

    def __init__(self, decayrate: float = 0.9, epsilon: float = 1e-10) -> None:
        self.rho, self.eps = decayrate, epsilon
        self.schedule = Default()

    def torch_kwargs(self) -> dict[str, Any]:
        return {"lr": 1.0, "rho": self.rho, "eps": self.eps}
