"""Build the SparkConf entries for each cluster mode (pure functions, so they are testable)."""

from __future__ import annotations

import os
import sys
from typing import Any

from orca.core._connect import CONNECT_MODE, check_remote

SPARK_CLUSTER_MODES = ("local", "standalone", "yarn-client", "k8s-client", "spark-submit", CONNECT_MODE)
# The mode-specific keyword arguments build_spark_conf reads.
SPARK_OPTIONS = frozenset(
    {
        "app_name",
        "master",
        "driver_cores",
        "driver_memory",
        "container_image",
        "extra_python_lib",
        "penv_archive",
        "driver_host",
        "namespace",
        "remote",
    }
)


def _memory(value: str | int) -> str:
    """Normalise memory such as ``"2g"``, ``"512m"`` or a number of MiB."""
    if isinstance(value, int):
        return f"{value}m"
    text = str(value).strip().lower()
    if not text or not (text[:-1].isdigit() if text[-1] in "kmgt" else text.isdigit()):
        raise ValueError(f"memory={value!r} is not a size; use e.g. '2g' or '512m'.")
    return text


def build_spark_conf(
    cluster_mode: str,
    cores: int,
    memory: str | int,
    num_nodes: int,
    conf: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, str]:
    """Return the Spark configuration that ``init_orca_context`` uses for ``cluster_mode``.

    Args:
        cluster_mode: one of ``local``, ``standalone``, ``yarn-client``, ``k8s-client``,
            ``spark-submit``, ``spark-connect`` (``remote="sc://host:port"``).
        cores: cores of the local master, or per executor on a cluster.
        memory: driver memory in local mode, executor memory on a cluster.
        num_nodes: number of executors on a cluster.
        conf: extra Spark settings; they win over everything computed here.
        **kwargs: mode-specific settings: ``master`` (standalone ``spark://host:port``,
            k8s ``k8s://https://host:port``), ``driver_cores``, ``driver_memory``,
            ``container_image`` (k8s), ``extra_python_lib``, ``penv_archive`` (yarn, a
            conda-pack/venv-pack archive shipped as the executors' Python),
            ``driver_host`` (k8s/yarn client).

    Returns:
        A dict of Spark configuration keys to string values.

    Raises:
        ValueError: an unknown mode or a missing mode-specific setting.
    """
    if cluster_mode not in SPARK_CLUSTER_MODES:
        raise ValueError(
            f"cluster_mode={cluster_mode!r} is not supported; use one of {SPARK_CLUSTER_MODES}."
        )
    if cores < 1 or num_nodes < 1:
        raise ValueError(f"cores and num_nodes must be >= 1, got cores={cores}, num_nodes={num_nodes}.")
    mem = _memory(memory)
    out: dict[str, str] = {
        "spark.app.name": str(kwargs.get("app_name", "orca")),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        # Orca's barrier stages take one slot per worker; fail fast rather than wait forever.
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    }
    py = os.environ.get("PYSPARK_PYTHON", sys.executable)
    driver_memory = _memory(kwargs.get("driver_memory", mem if cluster_mode == "local" else "2g"))
    out["spark.driver.memory"] = driver_memory
    if cluster_mode == "local":
        out.update(
            {
                "spark.master": f"local[{cores}]",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": str(max(2, cores)),
                "spark.pyspark.python": py,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
    elif cluster_mode == "spark-submit":
        # spark-submit already created the configuration; attach only.
        out = {}
    elif cluster_mode == CONNECT_MODE:
        # the server's configuration is the server's; conf= is set on the session (runtime settings)
        check_remote(kwargs.get("remote"))
        out = {}
    else:
        out.update(
            {
                "spark.executor.cores": str(cores),
                "spark.executor.memory": mem,
                "spark.executor.instances": str(num_nodes),
                "spark.cores.max": str(cores * num_nodes),
                "spark.pyspark.python": py,
                "spark.executorEnv.PYSPARK_PYTHON": py,
                "spark.driver.cores": str(kwargs.get("driver_cores", 1)),
            }
        )
        if cluster_mode == "standalone":
            master = kwargs.get("master") or (conf or {}).get("spark.master")
            if not master or not str(master).startswith("spark://"):
                raise ValueError(
                    "cluster_mode='standalone' needs master='spark://host:port' "
                    f"(got {master!r})."
                )
            out["spark.master"] = str(master)
        elif cluster_mode == "yarn-client":
            out["spark.master"] = "yarn"
            out["spark.submit.deployMode"] = "client"
            archive = kwargs.get("penv_archive")
            if archive:
                out["spark.yarn.dist.archives"] = f"{archive}#orca_python_env"
                out["spark.pyspark.python"] = "orca_python_env/bin/python"
                out["spark.executorEnv.PYSPARK_PYTHON"] = "orca_python_env/bin/python"
        elif cluster_mode == "k8s-client":
            master = kwargs.get("master")
            image = kwargs.get("container_image")
            if not master or not str(master).startswith("k8s://"):
                raise ValueError(
                    f"cluster_mode='k8s-client' needs master='k8s://https://host:port' (got {master!r})."
                )
            if not image:
                raise ValueError("cluster_mode='k8s-client' needs container_image='<image with Orca>'.")
            out["spark.master"] = str(master)
            out["spark.submit.deployMode"] = "client"
            out["spark.kubernetes.container.image"] = str(image)
            out["spark.kubernetes.executor.deleteOnTermination"] = "true"
            if "namespace" in kwargs:
                out["spark.kubernetes.namespace"] = str(kwargs["namespace"])
        if kwargs.get("driver_host"):
            out["spark.driver.host"] = str(kwargs["driver_host"])
        extra = kwargs.get("extra_python_lib")
        if extra:
            out["spark.submit.pyFiles"] = str(extra)
    for key, value in (conf or {}).items():
        out[str(key)] = str(value)
    return out
