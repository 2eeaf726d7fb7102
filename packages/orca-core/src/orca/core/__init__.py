"""Orca core: the context, XShards and the shared engine every framework package uses.

>>> from orca.core import init_orca_context, stop_orca_context, OrcaContext, XShards  # doctest: +SKIP
"""

from orca.core._ray_context import OrcaRayContext
from orca.core.context import (
    OrcaContext,
    OrcaSettings,
    RayRuntime,
    init_orca_context,
    release_warm_workers,
    stop_orca_context,
)
from orca.core.data import XShards

__version__ = "0.1.0"

__all__ = [
    "OrcaContext",
    "OrcaRayContext",
    "OrcaSettings",
    "RayRuntime",
    "XShards",
    "init_orca_context",
    "release_warm_workers",
    "stop_orca_context",
    "__version__",
]
