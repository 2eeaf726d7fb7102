"""BigDL's engine inside Orca's Spark session: its jars, its one-time start, its logs.

BigDL (dllib 2.4, Spark 3 build) trains in the JVM: its jars must be on the class path of the
Spark session before it starts. orca-bigdl declares them through the ``orca.spark_jars`` entry
point (and registers them on import, :func:`orca.core.context.register_spark_jars`), so every
session ``init_orca_context`` starts has them, whatever the import order. :func:`ensure_engine` then starts BigDL's engine once per session and
keeps Spark's log level where Orca set it.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("orca.bigdl")

_started_for: int | None = None  # id of the SparkContext the engine was started for


def bigdl_jars() -> list[str]:
    """The dllib jar and bigdl-core's native-library jar shipped in the ``bigdl`` wheels."""
    import bigdl

    base = os.path.dirname(bigdl.__file__)
    jars = sorted(glob.glob(os.path.join(base, "share", "dllib", "lib", "*.jar")))
    jars += sorted(glob.glob(os.path.join(base, "share", "core", "lib", "*.jar")))
    if len(jars) < 2:
        raise ImportError(f"BigDL's jars were not found under {base}/share; install bigdl-dllib-spark3==2.4.0 and "
                          "bigdl-core==2.4.0.dev0 (pip install --no-deps ...).")
    return jars


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Send what BigDL's Python side prints (``creating: createLinear`` ...) to the debug log."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    if buf.getvalue().strip():
        log.debug("%s", buf.getvalue().rstrip())


_NO_JARS = ("this Spark session has no BigDL jars: Orca did not start it (spark-submit, or a session that was already "
            "running). Let init_orca_context() start Spark (it adds them), or start Spark with spark.jars (spark-submit "
            "--jars) set to the paths that orca.bigdl.bigdl_jars() returns.")


def _has_jars(sc: Any) -> bool:
    """Whether the driver's JVM can load BigDL's classes (py4j answers a missing class with a package)."""
    engine = sc._jvm.com.intel.analytics.bigdl.dllib.utils.Engine
    return type(engine).__name__ == "JavaClass"


def _warn_if_started_without_jars() -> None:
    """At import: an Orca Spark session already running without BigDL's jars cannot run BigDL."""
    import warnings

    from orca.core.plugin import OrcaContext

    ctx = OrcaContext.active()
    if ctx is not None and ctx.has_spark and not _has_jars(ctx.spark_session().sparkContext):
        warnings.warn(_NO_JARS, RuntimeWarning, stacklevel=3)


def ensure_engine() -> Any:
    """The SparkContext of the Orca context, with BigDL's engine started on it (once).

    Raises:
        RuntimeError: the running Spark session lacks BigDL's jars (it started before
            ``orca.bigdl`` was imported).
    """
    global _started_for
    from orca.core.plugin import OrcaContext

    sc = OrcaContext.get_spark_context()
    if _started_for == id(sc):
        return sc
    if not _has_jars(sc):
        raise RuntimeError(_NO_JARS)
    from bigdl.dllib.utils.common import init_engine

    level = _log_level(sc)
    # BigDL logs every iteration at INFO, and its engine warns about Spark 2 settings (NIO block
    # transfer, ...) that Spark 3.5 no longer has: keep its loggers at WARN and the engine's at ERROR
    _set_level(sc, "com.intel.analytics.bigdl", "WARN")
    _set_level(sc, "com.intel.analytics.bigdl.dllib.utils.Engine$", "ERROR")
    # BigDL's log filter would write a bigdl.log into the working directory and redirect Spark's logs
    sc._jvm.java.lang.System.setProperty("bigdl.utils.LoggerFilter.disable", "true")
    with quiet():
        init_engine()
    sc.setLogLevel(level)
    _started_for = id(sc)
    return sc


def _log_level(sc: Any) -> str:
    try:
        root = sc._jvm.org.apache.logging.log4j.LogManager.getRootLogger()
        return str(root.getLevel().toString())
    except Exception:  # noqa: BLE001 - any log4j trouble: fall back to Orca's default
        return "WARN"


def _set_level(sc: Any, logger: str, level: str) -> None:
    try:
        jvm = sc._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            logger, jvm.org.apache.logging.log4j.Level.toLevel(level))
    except Exception:  # noqa: BLE001 - a log level is not worth failing a fit for
        log.debug("could not set the log level of %s", logger, exc_info=True)
