"""The running Orca context, as the layers below :mod:`orca.core.context` reach it.

``data`` and ``engine`` need the running context (its Spark session, its Ray, its settings),
but they sit below ``context`` in orca-core's layers (docs/architecture.md): ``context`` builds
on the engine (its liveness bounds), never the reverse. So the context fills this small
registry when it is imported (``import orca.core`` imports it first, so the registry is always
filled by the time anything asks), and the lower layers ask here: :func:`active`,
:func:`current`, :func:`start`. Likewise the Ray launcher, above ``data``, says here how to end
the warm workers it parks (:func:`on_release_warm`), so that ``data`` can free their CPUs before
its own Ray tasks (:func:`release_warm_workers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class ActiveContext(Protocol):
    """What the lower layers use of :class:`orca.core.context.OrcaContext` (it satisfies this)."""

    @property
    def context_id(self) -> str: ...

    @property
    def cluster_mode(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    @property
    def cores(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def address(self) -> str | None: ...

    @property
    def settings(self) -> Any: ...

    @property
    def extra(self) -> dict[str, Any]: ...

    @property
    def has_spark(self) -> bool: ...

    @property
    def has_ray(self) -> bool: ...

    def spark_session(self) -> Any: ...

    def ray_runtime(self) -> Any: ...

    def ray_runtime_now(self) -> Any: ...

    def ray_join_env(self) -> dict[str, str]: ...


_hooks: dict[str, Callable[..., Any]] = {}
_release_warm: list[Callable[[], int]] = []


def provide(*, active: Callable[[], ActiveContext | None], current: Callable[[], ActiveContext],
            start: Callable[..., ActiveContext]) -> None:
    """Called once by :mod:`orca.core.context`: how to find (or start) the running context.

    Args:
        active: the running context, or ``None`` (never starts one).
        current: the running context, starting a local one with defaults where none runs.
        start: ``init_orca_context`` (keyword arguments only).
    """
    _hooks.update(active=active, current=current, start=start)


def _hook(name: str) -> Callable[..., Any]:
    try:
        return _hooks[name]
    except KeyError:  # only while orca.core itself is being imported
        raise RuntimeError("orca.core.context is not imported yet: import orca.core first") from None


def active() -> ActiveContext | None:
    """The running context (what ``init_orca_context`` returned), or ``None``; never starts one."""
    ctx: ActiveContext | None = _hook("active")()
    return ctx


def current() -> ActiveContext:
    """The running context, starting a local one with defaults where none runs."""
    ctx: ActiveContext = _hook("current")()
    return ctx


def start(**kwargs: Any) -> ActiveContext:
    """Start a context: ``init_orca_context(**kwargs)``."""
    ctx: ActiveContext = _hook("start")(**kwargs)
    return ctx


def on_release_warm(release: Callable[[], int]) -> None:
    """Register ``release``, which ends the warm workers an upper layer parked and returns their count."""
    if release not in _release_warm:
        _release_warm.append(release)


def release_warm_workers() -> int:
    """End every parked warm worker (see :func:`orca.core.release_warm_workers`); return their count."""
    return sum(release() for release in list(_release_warm))
