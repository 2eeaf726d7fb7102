"""Ray-on-Spark: a Ray cluster inside the Spark application of an Orca context.

What starts where:

- the Ray **head** runs on the driver (``ray.init`` with 0 CPUs: no Orca worker runs on the
  driver), bound to ``spark.driver.host``, with a temporary directory of its own;
- one Ray **worker node** per Spark executor, with the executor's cores and memory: a short
  Spark job starts a keeper process (:mod:`orca.core._ray_node`) on every executor, which
  runs the node and ends it when the head, the executor or the node goes.

Every Ray process of the context shares one random auth token (see :mod:`orca.core._ray_auth`).
``ray.util.spark.setup_ray_cluster`` is not used: it keeps a Spark task slot per node busy
for the cluster's life (the slot Orca needs to move DataFrame partitions into Ray), rewrites
loopback addresses, and in Ray 2.60 leaves token auth to the caller.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from typing import Any

from orca.core._ray_node import (
    CONTEXT_LABEL,
    EXECUTOR_LABEL,
    TEMP_PREFIX,
    cleanup_in_task,
    start_keeper_in_task,
)

log = logging.getLogger("orca")

_MIN_OBJECT_STORE = 80 * 1024 * 1024  # Ray refuses less than 75 MiB


def parse_bytes(value: str | int) -> int:
    """``"2g"``, ``"512m"``, ``"1024k"`` or a number of MiB, in bytes."""
    if isinstance(value, int):
        return value * 1024 * 1024
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", str(value).lower())
    if not match:
        raise ValueError(f"memory={value!r} is not a size; use e.g. '2g' or '512m'.")
    scale = {"": 1024**2, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[match.group(2)]
    return int(float(match.group(1)) * scale)


def executor_gpus(conf: Any) -> int:
    """GPUs each executor's Ray node offers: the executors' ``spark.executor.resource.gpu.amount``
    (0 without it). CPUs and GPUs of a node come from the same executor settings, together."""
    raw = conf.get("spark.executor.resource.gpu.amount", "0") or "0"
    try:
        gpus = float(raw)
    except ValueError:
        raise ValueError(f"spark.executor.resource.gpu.amount={raw!r} is not a number of GPUs") from None
    if gpus < 0 or gpus != int(gpus):
        raise ValueError(f"spark.executor.resource.gpu.amount={raw!r}: a Ray node on an executor offers whole "
                         "GPUs; set a whole number (0 for none).")
    return int(gpus)


def node_resources(memory: str | int, object_store_memory: int | None) -> tuple[int, int]:
    """``(memory, object store)`` bytes of a Ray worker node on an executor with ``memory``."""
    total = parse_bytes(memory)
    store = int(object_store_memory) if object_store_memory else max(_MIN_OBJECT_STORE, int(total * 0.3))
    return max(total - store, 64 * 1024 * 1024), store


def keep_ray_on_loopback() -> None:
    """Keep every Ray server this process starts on 127.0.0.1 instead of the host's public
    interface (Ray reads the variable at import; an imported Ray gets the constant set)."""
    import sys

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]


def executor_count(sc: Any) -> int:
    """Executors registered with the driver now (the driver itself not counted; in local mode the
    driver is the one executor)."""
    if str(sc.master).startswith("local"):
        return 1
    try:
        return max(0, int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)
    except Exception:  # noqa: BLE001 - a gateway without this call: trust the configuration
        return 0


class RayOnSpark:
    """The Ray cluster of one context on its Spark executors.

    Args:
        context_id: a short id naming this context's Ray processes and directories.
        spark: the context's SparkSession.
        cores: CPUs each executor's Ray node offers.
        memory: executor memory (``"2g"``).
        num_nodes: executors to wait for.
        object_store_memory: bytes of each node's object store (default 30% of ``memory``).
        timeout_s: how long to wait for executors and Ray nodes.
        log_to_driver: forward worker output to the driver.
    """

    def __init__(self, context_id: str, spark: Any, cores: int, memory: str | int, num_nodes: int,
                 object_store_memory: int | None, timeout_s: float, log_to_driver: bool) -> None:
        self.context_id = context_id
        self.spark = spark
        self.cores = cores
        self.memory = memory
        self.num_nodes = num_nodes
        self.object_store_memory = object_store_memory
        self.timeout_s = timeout_s
        self.log_to_driver = log_to_driver
        self.head_temp_dir: str | None = None
        self._config: dict[str, Any] = {}
        self._auth: dict[str, str] = {}
        #: executor key -> Ray node id, of the nodes this context started
        self.nodes: dict[str, str] = {}

    @property
    def driver_host(self) -> str:
        return str(self.spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1"))

    def start(self, auth: dict[str, str]) -> str:
        """Start the head here and a node on every executor; return the GCS address.

        Raises:
            RuntimeError: no executor registered, or the nodes did not join in time (the
                message names the choices: fix the executors, ``ray_on_driver=True``, or
                ``address=`` of a running Ray cluster).
        """
        host = self.driver_host
        executors = self._wait_for_executors(self.spark.sparkContext)
        self.start_head(host)
        return self.start_nodes(auth, executors)

    def start_head(self, host: str) -> str:
        """Start the head on this driver, bound to ``host`` (``spark.driver.host``); return the GCS
        address. Needs no Spark: ``init_orca_context(init_ray_on_spark=True)`` runs it while the
        JVM starts. The caller has set Ray's environment (auth) already."""
        import ray

        if host in ("127.0.0.1", "localhost"):
            keep_ray_on_loopback()
        self.head_temp_dir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{self.context_id}-h")
        ray.init(
            num_cpus=0,
            num_gpus=0,
            include_dashboard=False,
            _node_ip_address=host,
            _temp_dir=self.head_temp_dir,
            object_store_memory=self.object_store_memory,
            log_to_driver=self.log_to_driver,
            configure_logging=False,
        )
        return str(ray.get_runtime_context().gcs_address)

    def start_nodes(self, auth: dict[str, str], executors: int | None = None) -> str:
        """With the head up (:meth:`start_head`) and Spark running: a Ray worker node on every
        executor; return the GCS address. See :meth:`start` for the errors."""
        import ray

        sc = self.spark.sparkContext
        if executors is None:
            executors = self._wait_for_executors(sc)
        gcs = str(ray.get_runtime_context().gcs_address)
        loopback = self.driver_host in ("127.0.0.1", "localhost")
        memory, store = node_resources(self.memory, self.object_store_memory)
        self._config = {"gcs": gcs, "context": self.context_id, "num_cpus": self.cores, "memory": memory,
                        "num_gpus": executor_gpus(sc.getConf()), "object_store_memory": store, "loopback": loopback}
        self._auth = dict(auth)
        self.nodes = self._wait_for_nodes(self._start_keepers(executors))
        log.info("Ray-on-Spark: head on the driver (%s), %d worker nodes on the executors", gcs, len(self.nodes))
        return gcs

    def _start_keepers(self, executors: int) -> set[str]:
        """Run the keeper of every executor that has none; return the keys of all executors reached."""
        sc = self.spark.sparkContext
        config, auth = self._config, self._auth
        # One task per task slot reaches every executor; the keeper's lock file makes the
        # extra tasks on an executor no-ops. The tasks return at once: no slot stays busy.
        slots = max(executors * self.cores, sc.defaultParallelism, 1)
        sc.setJobDescription(f"orca: start Ray worker nodes on {executors} executors")
        try:
            started = sc.parallelize(range(slots), slots).map(
                lambda _: start_keeper_in_task(config, auth)).collect()
        finally:
            sc.setJobDescription(None)
        return {r["key"] for r in started}

    def _alive(self) -> dict[str, str]:
        """Executor key -> node id of this context's Ray worker nodes alive now."""
        import ray

        return {n["Labels"][EXECUTOR_LABEL]: n["NodeID"] for n in ray.nodes()
                if n.get("Alive") and n.get("Labels", {}).get(CONTEXT_LABEL) == self.context_id
                and EXECUTOR_LABEL in n.get("Labels", {})}

    def heal(self, wait_s: float = 60.0) -> int:
        """Give executors that Spark started in place of lost ones a Ray worker node.

        When an executor is lost its keeper ends its Ray node (and the actors on it); Spark
        (standalone, YARN, k8s) starts a new executor while the application wants more cores.
        Called before new actors start: if a node of this context is gone, wait up to
        ``wait_s`` for the replacement executor and start a node there. Does nothing (no Spark
        job) while every node is alive. Returns the number of nodes added.
        """
        alive = self._alive()
        if set(self.nodes) <= set(alive):
            return 0
        lost = sorted(set(self.nodes) - set(alive))
        want = len(self.nodes)
        log.warning("Ray-on-Spark: the Ray nodes of executors %s are gone; waiting up to %.0fs for Spark to "
                    "replace them.", lost, wait_s)
        sc = self.spark.sparkContext
        deadline = time.monotonic() + wait_s
        added: set[str] = set()
        while time.monotonic() < deadline:
            if executor_count(sc) >= want:
                # a dead executor may still be counted for a moment: new keys say a new one was reached
                added = self._start_keepers(executor_count(sc)) - set(alive)
                if added:
                    break
            time.sleep(1.0)
        nodes_deadline = time.monotonic() + self.timeout_s
        while added - set(self._alive()) and time.monotonic() < nodes_deadline:
            time.sleep(0.5)
        self.nodes = self._alive()
        if len(self.nodes) < want:
            log.warning("Ray-on-Spark: %d of %d Ray worker nodes alive after waiting for replacement executors.",
                        len(self.nodes), want)
        return len(set(self.nodes) - set(alive))

    def _wait_for_executors(self, sc: Any) -> int:
        deadline = time.monotonic() + self.timeout_s
        count = executor_count(sc)
        while count < self.num_nodes and time.monotonic() < deadline:
            time.sleep(0.5)
            count = executor_count(sc)
        if count == 0:
            raise RuntimeError(
                f"Ray-on-Spark: no Spark executor registered within {self.timeout_s:.0f}s, so there is nowhere "
                "to run Ray worker nodes. Check the cluster (master URL, free cores), or run Ray another "
                "way: ray_on_driver=True (an embedded Ray on the driver alone) or address='host:port' "
                "(an existing Ray cluster)."
            )
        if count < self.num_nodes:
            log.warning("Ray-on-Spark: %d of %d executors registered within %.0fs; starting Ray on those.",
                        count, self.num_nodes, self.timeout_s)
        return count

    def _wait_for_nodes(self, keys: set[str]) -> dict[str, str]:

        deadline = time.monotonic() + self.timeout_s
        while True:
            found = self._alive()
            if keys <= set(found) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not found:
            raise RuntimeError(
                f"Ray-on-Spark: no Ray worker node joined the head within {self.timeout_s:.0f}s (executors "
                f"{sorted(keys)}). Each keeper logs to {tempfile.gettempdir()}/{TEMP_PREFIX}{self.context_id}-*/"
                "node.log on its executor. Or run Ray another way: ray_on_driver=True (an embedded Ray on "
                "the driver alone) or address='host:port' (an existing Ray cluster)."
            )
        if set(found) < keys:
            log.warning("Ray-on-Spark: Ray nodes of executors %s did not join within %.0fs.",
                        sorted(keys - set(found)), self.timeout_s)
        return found

    def stop(self) -> None:
        """Shut the head down (the keepers then end their nodes) and make sure they did."""
        import ray

        try:
            ray.shutdown()
        finally:
            try:
                self._clean_executors()
            finally:
                if self.head_temp_dir:
                    shutil.rmtree(self.head_temp_dir, ignore_errors=True)
                    self.head_temp_dir = None

    def _clean_executors(self) -> None:
        """A last Spark job: on every executor, wait for this context's keepers to end and kill any
        that did not (a Spark that is already gone skips this: its executors took the keepers)."""
        try:
            sc = self.spark.sparkContext
            if sc._jsc is None:
                return
            slots = max(len(self.nodes) * self.cores, sc.defaultParallelism, 1)
            context = self.context_id
            killed = sum(sc.parallelize(range(slots), slots).map(lambda _: cleanup_in_task(context)).collect())
            if killed:
                log.warning("Ray-on-Spark: killed %d Ray processes that outlived the head.", killed)
        except Exception:  # noqa: BLE001 - stopping goes on; the keepers watch the head themselves
            log.debug("Ray-on-Spark executor cleanup failed", exc_info=True)
