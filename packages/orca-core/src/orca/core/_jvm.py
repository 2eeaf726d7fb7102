"""Ending what pyspark started: the SparkSession and the JVM behind its py4j gateway."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("orca")


def error_text(exc: BaseException) -> str:
    """A one-line description of ``exc``; for a JVM error, the Java exception's own text."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())
        except Exception:  # noqa: BLE001 - fall back to the Python side
            pass
    try:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    except Exception:  # noqa: BLE001 - describing an error must never raise a new one
        return type(exc).__name__


def gateway_process() -> Any:
    """The JVM process pyspark launched for this interpreter, or ``None``."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None


def stop_spark_and_jvm(session: Any) -> None:
    """Stop the SparkSession and the JVM pyspark launched, so no java process is left."""
    try:
        session.stop()
    finally:
        stop_jvm()


def stop_jvm() -> None:
    """Shut down pyspark's py4j gateway and end the JVM it launched (if it launched one)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM may already be down
        log.debug("gateway shutdown failed", exc_info=True)
    if proc is not None:
        # The gateway JVM exits when its stdin closes; terminate and kill are the fallbacks.
        try:
            proc.stdin.close()
        except Exception:  # noqa: BLE001 - a closed or broken pipe: the fallbacks below stop it
            pass
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - still running: escalate
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - still running: escalate
                proc.kill()
                proc.wait(timeout=10)
    SparkContext._gateway = None
    SparkContext._jvm = None
