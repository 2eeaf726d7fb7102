"""Backends as data: a framework declares what it offers, the engine checks names once.

A backend pairs a launcher (who starts the workers: Ray actors or Spark barrier tasks) with
the framework's runner (how the replicas stay in step). A framework's Estimator lists its
backends as a class attribute::

    class Estimator(BaseEstimator):
        backends = declare(
            Backend("bigdl", "spark", BigDLTorchRunner, "Spark tasks, orca.core.sync"),
            Backend("ray", "ray", TorchRunner, "Ray actors, torch.distributed (gloo)"),
        )

``BaseEstimator`` validates the user's ``backend=`` against that list (the error names the
choices), checks that a backend's optional dependencies are installed (the error names the
command that installs them) and starts its launcher.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: launcher name -> "module:WorkerGroup class"
LAUNCHERS = {
    "ray": "orca.core.engine.ray_backend:RayWorkerGroup",
    "spark": "orca.core.engine.spark_backend:SparkWorkerGroup",
}


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Backend:
    """One backend of a framework.

    Attributes:
        name: what users pass as ``backend=``.
        launcher: ``"ray"`` (long-lived Ray actors) or ``"spark"`` (Spark barrier tasks per call).
        runner: the Runner class, or ``"module:Class"`` for one imported only when used (a
            backend whose framework extension may be missing).
        description: one line for docs and errors.
        requires: modules the backend needs besides the framework (checked before use).
        install: the command that installs them, quoted in the error when one is missing.
        planned: non-empty for a backend users know (from the reference) that is not built yet:
            why, or where it is tracked. Asking for it raises a ValueError saying so.
    """

    name: str
    launcher: str
    runner: Any
    description: str = ""
    requires: tuple[str, ...] = ()
    install: str = ""
    planned: str = ""

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"backend {self.name!r}: unknown launcher {self.launcher!r}; use one of "
                             f"{sorted(LAUNCHERS)}.")

    def check_available(self) -> None:
        """Raise ImportError naming the install command when a required module is missing."""
        missing = [m for m in self.requires if not _installed(m)]
        if missing:
            hint = f" Install it with: {self.install}" if self.install else ""
            raise ImportError(f"backend={self.name!r} needs {', '.join(missing)}, which is not installed in this "
                              f"environment.{hint}")

    def runner_cls(self) -> Any:
        """The Runner class (imported now when declared by path)."""
        return _load(self.runner) if isinstance(self.runner, str) else self.runner

    def group_cls(self) -> Any:
        """The launcher's WorkerGroup class."""
        return _load(LAUNCHERS[self.launcher])


def _installed(module: str) -> bool:
    """True if ``module`` (dotted: ``horovod.torch``) can be found; its parents are imported to look."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def declare(*backends: Backend) -> dict[str, Backend]:
    """The ``backends`` class attribute of an Estimator, by name (the first is listed first)."""
    return {b.name: b for b in backends}


def resolve_backend(backends: Mapping[str, Backend], name: Any, owner: str) -> Backend:
    """The backend called ``name``, ready to use.

    Raises:
        ValueError: ``name`` is not one of ``backends`` (the message lists them).
        ImportError: the backend's optional dependencies are missing (the message says how to install).
    """
    ready = [n for n, b in backends.items() if not b.planned]
    choices = ", ".join(repr(n) for n in ready[:-1]) + (" or " if len(ready) > 1 else "") + repr(ready[-1])
    if not isinstance(name, str) or name not in backends:
        raise ValueError(f"backend={name!r} is not supported by {owner}; use {choices}.")
    backend = backends[name]
    if backend.planned:
        raise ValueError(f"backend={name!r} is not available yet in {owner} ({backend.planned}); use {choices}.")
    backend.check_available()
    return backend
