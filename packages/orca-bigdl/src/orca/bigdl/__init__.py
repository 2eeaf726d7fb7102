"""Orca for BigDL models: not built yet.

This distribution (``orca-bigdl``) reserves the ``orca.bigdl`` namespace. The planned public API is
``Estimator.from_bigdl(...)`` in the reference Orca shape; until it lands, importing any of it raises an
``ImportError`` that says so, rather than handing out a half-working stand-in.

>>> from orca.bigdl import Estimator  # doctest: +SKIP
Traceback (most recent call last):
ImportError: orca.bigdl.Estimator is not implemented yet; ...
"""

from __future__ import annotations

from orca.core._planned import planned_getattr

__version__ = "0.1.0"
__all__: list[str] = []

# Names this package will export once built; asking for one now is a clear ImportError (PEP 562).
__getattr__ = planned_getattr("orca.bigdl", {"Estimator"}, "no issue tracks it yet")
