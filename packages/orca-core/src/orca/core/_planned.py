"""For framework packages that are reserved but not built yet: a PEP 562 ``__getattr__``
that answers their planned public names with a clear ImportError instead of a stand-in."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def planned_getattr(module: str, planned: Iterable[str], status: str) -> Callable[[str], object]:
    """Return a module-level ``__getattr__`` for ``module``.

    Args:
        module: the module's dotted name, e.g. ``"orca.tf"``.
        planned: public names the module will export once built.
        status: where progress is tracked, e.g. ``"track issue #5 for progress"``.

    Example:
        >>> __getattr__ = planned_getattr("orca.tf", {"Estimator"}, "track issue #5")
    """
    names = frozenset(planned)

    def __getattr__(name: str) -> object:
        if name in names:
            raise ImportError(
                f"{module}.{name} is not implemented yet; {status}. Today Orca ships orca.core "
                "(init_orca_context, XShards) and orca.torch (from orca.torch import Estimator)."
            )
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
