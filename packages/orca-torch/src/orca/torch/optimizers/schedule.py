"""The reference's learning-rate schedules (``bigdl.orca.learn.optimizers.schedule``), stepped per
iteration as BigDL stepped them: each maps ``(base learning rate, iteration)`` to the step's rate
(the iteration counts from 0 over the optimizer's life, restored with its state)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["Default", "Exponential", "MultiStep", "Poly", "Scheduler", "Step", "Warmup"]


class Scheduler:
    """A learning-rate schedule: ``rate(base, iteration)``."""

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        """The learning rate of step ``iteration`` (``decay``: the optimizer's ``learningrate_decay``)."""
        raise NotImplementedError


class Default(Scheduler):
    """BigDL's default: ``base / (1 + iteration * learningrate_decay)``."""

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        return base / (1 + iteration * decay)


class Step(Scheduler):
    """``base * gamma ** (iteration // step_size)``."""

    def __init__(self, step_size: int, gamma: float) -> None:
        self.step_size, self.gamma = step_size, gamma

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        return base * self.gamma ** (iteration // self.step_size)


class MultiStep(Scheduler):
    """``base * gamma ** (the number of step_sizes passed)``."""

    def __init__(self, step_sizes: Sequence[int], gamma: float) -> None:
        self.step_sizes, self.gamma = list(step_sizes), gamma

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        return base * self.gamma ** sum(1 for s in self.step_sizes if iteration >= s)


class Exponential(Scheduler):
    """``base * decay_rate ** (iteration / decay_step)`` (floored with ``stair_case``)."""

    def __init__(self, decay_step: int, decay_rate: float, stair_case: bool = False) -> None:
        self.decay_step, self.decay_rate, self.stair_case = decay_step, decay_rate, stair_case

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        p = iteration / self.decay_step
        return base * self.decay_rate ** (math.floor(p) if self.stair_case else p)


class Poly(Scheduler):
    """``base * (1 - iteration / max_iteration) ** power`` (0 after ``max_iteration``)."""

    def __init__(self, power: float, max_iteration: int) -> None:
        self.power, self.max_iteration = power, max_iteration

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        return 0.0 if iteration > self.max_iteration else base * (1 - iteration / self.max_iteration) ** self.power


class Warmup(Scheduler):
    """``base + delta * iteration``."""

    def __init__(self, delta: float) -> None:
        self.delta = delta

    def rate(self, base: float, iteration: int, decay: float = 0.0) -> float:
        return base + self.delta * iteration
