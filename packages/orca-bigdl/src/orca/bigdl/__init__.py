"""Orca for BigDL (dllib 2.4): ``from orca.bigdl import Estimator``; ``Estimator.from_bigdl(model=...)``.

Importing this package puts BigDL's jars on every Spark session Orca starts afterwards: import
it before ``init_orca_context()``.
"""

from orca.bigdl._engine import _warn_if_started_without_jars, bigdl_jars
from orca.bigdl.estimator import Estimator
from orca.core.context import register_spark_jars

__version__ = "0.1.0"

register_spark_jars("orca.bigdl", bigdl_jars())
_warn_if_started_without_jars()

__all__ = ["Estimator", "__version__"]
