"""One-time warnings: what Orca accepts from the reference's API but cannot honour (a setting with
no effect here, an argument it ignores) is said once per process, as a ``UserWarning``, wherever in
orca-core or a framework package it is accepted. Framework packages reach it through
:mod:`orca.core.plugin` (``warn_once``)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
#: the keys warned about so far in this process
_warned: set[str] = set()


def warn_once(key: str, message: str, stacklevel: int = 3) -> bool:
    """Warn with ``message`` (a ``UserWarning``) the first time ``key`` is seen in this process.

    Args:
        key: what the warning is about (e.g. ``"torch.fit(checkpoint_trigger)"``); later calls with
            the same key say nothing.
        message: what the user reads: what has no effect, why, and what to do instead.
        stacklevel: as :func:`warnings.warn`'s, counted from the caller of ``warn_once`` (the
            default, 3, points at the caller's caller: the user's line).

    Returns:
        True when this call warned.
    """
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
    return True


@contextmanager
def warnings_reset(*keys: str) -> Iterator[None]:
    """For tests: within the block, ``keys`` (every key when none is given) warn again, once; after
    it, exactly the keys warned before the block count as warned."""
    with _lock:
        before = set(_warned)
        _warned.difference_update(keys or before)
    try:
        yield
    finally:
        with _lock:
            _warned.clear()
            _warned.update(before)
