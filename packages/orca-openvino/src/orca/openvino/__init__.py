"""Orca for OpenVINO models: not built yet.

This distribution (``orca-openvino``) reserves the ``orca.openvino`` namespace. The planned public API is
``Estimator.from_openvino(...)`` in the reference Orca shape; until it lands, importing any of it raises an
``ImportError`` that says so, rather than handing out a half-working stand-in.

>>> from orca.openvino import Estimator  # doctest: +SKIP
Traceback (most recent call last):
ImportError: orca.openvino.Estimator is not implemented yet; ...
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__: list[str] = []

# Names this package will export once built; asking for one now is a clear ImportError.
_PLANNED = frozenset({"Estimator"})
_STATUS = "track issue #6 for progress"


def __getattr__(name: str) -> object:
    """Fail loudly for the planned-but-missing public names (PEP 562).

    Raises:
        ImportError: ``name`` is part of the planned API that does not exist yet.
        AttributeError: any other missing name.
    """
    if name in _PLANNED:
        raise ImportError(
            f"orca.openvino.{name} is not implemented yet; {_STATUS}. "
            "Today Orca ships orca.core (init_orca_context, XShards) and orca.torch "
            "(from orca.torch import Estimator)."
        )
    raise AttributeError(f"module 'orca.openvino' has no attribute {name!r}")
