"""Orca for OpenVINO models: not built yet.

This distribution (``orca-openvino``) reserves the ``orca.openvino`` namespace. The planned public API is
``Estimator.from_openvino(...)`` in the reference Orca shape; until it lands, importing any of it raises an
``ImportError`` that says so, rather than handing out a half-working stand-in.

>>> from orca.openvino import Estimator  # doctest: +SKIP
Traceback (most recent call last):
ImportError: orca.openvino.Estimator is not implemented yet; ...
"""

from __future__ import annotations

from orca.core._planned import planned_getattr

__version__ = "0.1.0"
__all__: list[str] = []

# Names this package will export once built; asking for one now is a clear ImportError (PEP 562).
__getattr__ = planned_getattr("orca.openvino", {"Estimator"}, "track issue #6 for progress")
