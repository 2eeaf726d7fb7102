"""Spark Connect sessions: telling one apart from a classic session, and attaching to a server.

A Spark Connect session (``SparkSession.builder.remote("sc://host:15002")``, pyspark 3.5+)
has DataFrames but no ``SparkContext``, no RDDs and no JVM in this process; its jobs run on
the server's executors. Nothing here imports pyspark's Connect client before it is asked for
(it needs ``grpcio``, ``grpcio-status``, ``googleapis-common-protos`` and ``zstandard``: the
``connect`` extra of orca-core, or ``pip install "pyspark[connect]"``).
"""

from __future__ import annotations

from typing import Any

#: the cluster mode of a context that works through a Spark Connect server
CONNECT_MODE = "spark-connect"


def is_connect(obj: Any) -> bool:
    """True for a Spark Connect ``SparkSession`` or ``DataFrame`` (the classes of
    ``pyspark.sql.connect``), False for classic ones and anything else."""
    return type(obj).__module__.startswith("pyspark.sql.connect.")


def check_remote(remote: Any) -> None:
    """Refuse a ``remote=`` that is not a Spark Connect URL.

    Raises:
        ValueError: ``remote`` is given but not a string starting with ``sc://``.
    """
    if remote is not None and not (isinstance(remote, str) and remote.startswith("sc://")):
        raise ValueError(f"remote={remote!r} is not a Spark Connect URL; give remote='sc://host:15002' (add "
                         "';token=...' for a server that asks for one), or leave it out to use the active "
                         "Spark Connect session (or $SPARK_REMOTE).")


def connect_session(remote: str | None, conf: dict[str, Any]) -> tuple[Any, bool]:
    """A Spark Connect session: a new one to ``remote`` (``sc://...``), else the active one, else
    one to ``$SPARK_REMOTE``; ``conf`` is set on it as runtime configuration.

    Returns:
        ``(session, created)``: ``created`` is True when the session was made here (the context
        closes it when it stops; a session found active stays the user's).

    Raises:
        ValueError: no ``remote``, no active Connect session and no ``$SPARK_REMOTE``; or an
            active session that is a classic one.
        ImportError: pyspark's Connect client cannot be imported (the message names the extra).
    """
    import os

    check_remote(remote)
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError as exc:
        raise ImportError(f"cluster_mode='spark-connect' needs pyspark's Connect client ({exc}); install it with "
                          "pip install 'orca-estimator-core[connect]' (or 'pyspark[connect]').") from exc
    from pyspark.sql import SparkSession

    # (through pyspark.sql's builder: it also switches pyspark.sql.functions to Connect's columns)
    created = False
    if remote is not None:
        session = SparkSession.builder.remote(remote).create()
        created = True
    else:
        session = ConnectSession.getActiveSession()
        if session is None:
            url = os.environ.get("SPARK_REMOTE")
            if not url:
                raise ValueError("cluster_mode='spark-connect' needs remote='sc://host:15002', an active Spark "
                                 "Connect session, or $SPARK_REMOTE; none was found.")
            check_remote(url)
            session = SparkSession.builder.remote(url).create()
            created = True
    for key, value in conf.items():
        session.conf.set(str(key), str(value))
    return session, created


def connect_client_host(driver_host: str | None, remote: str | None) -> str:
    """The address the server's executors reach this client at (Orca's call listener binds it).

    ``driver_host=`` when given; 127.0.0.1 when the server is on this machine (``remote`` names
    a loopback host), so the listener stays on loopback; else this host's own address.
    """
    import socket
    from urllib.parse import urlparse

    if driver_host:
        return str(driver_host)
    host = urlparse(remote.replace("sc://", "http://", 1)).hostname if remote else None
    if host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())
