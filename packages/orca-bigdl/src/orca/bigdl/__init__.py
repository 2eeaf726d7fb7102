"""Orca for BigDL (dllib 2.4): ``from orca.bigdl import Estimator``; ``Estimator.from_bigdl(model=...)``.

BigDL's jars go on every Spark session Orca starts (the package declares them through the
``orca.spark_jars`` entry point): the import order does not matter.
"""

from orca.bigdl._engine import _warn_if_started_without_jars, bigdl_jars
from orca.bigdl.estimator import Estimator
from orca.core.plugin import register_spark_jars

__version__ = "0.1.0"

register_spark_jars("orca.bigdl", bigdl_jars())
_warn_if_started_without_jars()

__all__ = ["Estimator", "__version__", "bigdl_jars"]
