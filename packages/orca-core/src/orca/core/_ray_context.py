"""OrcaRayContext: the reference's view of the Ray cluster a context runs (``bigdl.orca.ray``).

Code written for bigdl-orca asks ``OrcaRayContext.get()`` for the shape of the Ray cluster
(``num_ray_nodes``, ``ray_node_cpu_cores``) and its addresses (``address_info``,
``redis_address``). In Orca the context owns Ray (:meth:`orca.core.OrcaContext.ray_runtime`,
configured by :func:`orca.core.init_orca_context`); this class reads those names from it, so a
context has one Ray, started and stopped in one place.

>>> from orca.core import OrcaRayContext  # doctest: +SKIP
>>> ray_ctx = OrcaRayContext.get()  # starts the context's Ray if it has not yet  # doctest: +SKIP
>>> global_batch = 32 * ray_ctx.num_ray_nodes  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar

from orca.core import context as context_module
from orca.core._warn import warn_once
from orca.core.context import OrcaContext, RayRuntime


class OrcaRayContext:
    """The Ray cluster of the running Orca context, under the reference's names.

    Get it with :meth:`get`; it is not constructed directly (the Ray it describes is configured by
    ``init_orca_context``: ``cores``, ``num_nodes``, ``init_ray_on_spark``, ``object_store_memory``).

    Attributes:
        runtime: the context's runtime, ``"spark"`` or ``"ray"``.
    """

    #: the object :meth:`get` returned last (the reference kept the active one on the class)
    _active_ray_context: ClassVar[OrcaRayContext | None] = None

    def __init__(self, *args: Any, _context: OrcaContext | None = None, **kwargs: Any) -> None:
        if _context is None:
            raise TypeError(
                "OrcaRayContext is not constructed in Orca: the Ray it describes is the Orca context's, "
                "configured by init_orca_context(cores=..., num_nodes=..., init_ray_on_spark=..., "
                "object_store_memory=...); read it with OrcaRayContext.get().")
        self._ctx = _context
        self.runtime: str = _context.runtime

    # ------------------------------------------------------------------ the reference's calls
    @classmethod
    def get(cls, initialize: bool = True) -> OrcaRayContext:
        """The Ray of the running Orca context.

        Args:
            initialize: start the context's Ray now if it has not started (as the reference's
                ``init()`` did). With ``True`` and no running context, a local one with defaults
                starts first, as :meth:`OrcaContext.get_ray_context` does.

        Returns:
            The same object for the same context on every call.

        Raises:
            RuntimeError: ``initialize=False`` and no Orca context is running.
        """
        if initialize:
            OrcaContext.current()
        ctx = context_module._current
        if ctx is None:
            raise RuntimeError("No active Orca context: call init_orca_context first.")
        with context_module._lock:
            found = cls._active_ray_context
            if found is None or found._ctx is not ctx:
                found = cls(_context=ctx)
                cls._active_ray_context = found
        if initialize:
            ctx.ray_runtime()
        return found

    def init(self, driver_cores: int = 0) -> dict[str, Any]:
        """Start (or attach to) the context's Ray if it has not yet.

        Args:
            driver_cores: the reference's CPUs for a Ray node on the Spark driver. Orca's driver
                node (the head of Ray-on-Spark) takes no tasks: a value other than 0 is accepted
                with a one-time warning and has no effect.

        Returns:
            :attr:`address_info`.
        """
        if driver_cores:
            warn_once(
                "OrcaRayContext.init(driver_cores)",
                f"OrcaRayContext.init(driver_cores={driver_cores}) has no effect: Orca's workers run on the "
                "Ray nodes init_orca_context started (cores= each); the driver's Ray node takes no tasks.")
        self._ctx.ray_runtime()
        return self.address_info

    def stop(self) -> None:
        """Stop the context's Ray (the context and its Spark keep running; Ray starts again on
        next use). Does nothing where Ray is not running."""
        with context_module._lock:
            if self._ctx.has_ray:
                self._ctx._stop_ray()
            if OrcaRayContext._active_ray_context is self:
                OrcaRayContext._active_ray_context = None

    # ------------------------------------------------------------------ what it answers
    @property
    def initialized(self) -> bool:
        """True while the context's Ray runs."""
        return self._ctx.has_ray

    @property
    def ray_runtime(self) -> RayRuntime:
        """Orca's own description of this Ray (mode, node ids, CPUs of every node, auth).

        Raises:
            RuntimeError: Ray has not started in this context (``get(initialize=False)``).
        """
        runtime = self._ctx._ray
        if runtime is None:
            raise RuntimeError("Ray has not started in this Orca context: call OrcaRayContext.get() "
                               "(initialize=True) or .init() first.")
        return runtime

    @property
    def num_ray_nodes(self) -> int:
        """The Ray nodes Orca's workers run on (a head with no CPUs is not one)."""
        return len(self.ray_runtime.worker_nodes)

    @property
    def ray_node_cpu_cores(self) -> int:
        """CPUs of each Ray node the workers run on (the smallest, where they differ)."""
        return min((cpus for _, cpus in self.ray_runtime.worker_nodes), default=0)

    @property
    def total_cores(self) -> int:
        """CPUs of all the Ray nodes the workers run on."""
        return sum(cpus for _, cpus in self.ray_runtime.worker_nodes)

    @property
    def is_local(self) -> bool:
        """True when Ray is one local instance on this machine (Spark ``local`` mode)."""
        runtime = self._ctx._ray
        return (runtime.mode if runtime is not None else self._ctx.ray_mode()) == "embedded"

    @property
    def address_info(self) -> dict[str, Any]:
        """The addresses of the Ray cluster and of this process's node, under the keys of the
        reference's ``ray.init()`` result: ``address``/``gcs_address``/``redis_address`` (all the
        GCS address, which is what a process joins the cluster at since Ray replaced Redis with
        the GCS), ``node_ip_address``, ``raylet_ip_address``, ``object_store_address``,
        ``raylet_socket_name``, ``metrics_export_port`` and ``node_id``."""
        import ray

        address = self.ray_runtime.address
        node_id = ray.get_runtime_context().get_node_id()
        node: dict[str, Any] = next((n for n in ray.nodes() if n.get("NodeID") == node_id), {})
        ip = node.get("NodeManagerAddress") or ray.util.get_node_ip_address()
        return {
            "address": address,
            "gcs_address": address,
            "redis_address": address,
            "node_ip_address": ip,
            "raylet_ip_address": ip,
            "object_store_address": node.get("ObjectStoreSocketName"),
            "raylet_socket_name": node.get("RayletSocketName"),
            "metrics_export_port": node.get("MetricsExportPort"),
            "node_id": node_id,
        }

    @property
    def redis_address(self) -> str:
        """The address a process joins this Ray at (its GCS address)."""
        return self.ray_runtime.address

    @property
    def redis_password(self) -> None:
        """None: Orca's Ray has no Redis password (a token, where auth is on, travels in the
        environment Orca's workers get)."""
        return None

    @property
    def sc(self) -> Any:
        """The context's SparkContext (Spark starts if it has not yet)."""
        return self._ctx.spark_session().sparkContext

    def __repr__(self) -> str:
        state = f"{self.num_ray_nodes} node(s) x {self.ray_node_cpu_cores} CPUs at {self.redis_address}" \
            if self.initialized else "Ray not started"
        return f"OrcaRayContext(runtime={self.runtime!r}, {state})"
