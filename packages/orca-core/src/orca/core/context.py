"""OrcaContext: owns the Spark session and the Ray runtime Orca runs on.

``init_orca_context()`` with no arguments starts an embedded local Spark bound to
127.0.0.1; Ray starts lazily the first time something needs it, so Spark-only users never
pay its start-up. ``stop_orca_context()`` stops both and leaves no process behind; it also
runs at interpreter exit.

Where Spark runs, ``init_orca_context`` returns the running ``SparkContext`` itself, as the
reference did (``SparkSession(sc)``, ``sc.parallelize(...)``); that object also answers every
attribute of the :class:`OrcaContext` (``sc.spark_session()``, ``sc.settings``...), and its
``stop()`` ends the whole Orca context.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orca.core import _active
from orca.core import _jvm_cache as jvm_cache
from orca.core._connect import CONNECT_MODE, connect_session, is_connect
from orca.core._java import ensure_java
from orca.core._jvm import error_text as _error_text
from orca.core._jvm import gateway_process as _gateway_process
from orca.core._jvm import stop_jvm as _stop_jvm
from orca.core._jvm import stop_spark_and_jvm as _stop_spark_and_jvm
from orca.core._net import find_free_ports
from orca.core._ray_auth import AuthEnv, auth_env, new_token
from orca.core._ray_auth import current_auth_env as _current_auth_env
from orca.core._ray_spark import RayOnSpark, keep_ray_on_loopback, parse_bytes
from orca.core._spark_conf import SPARK_CLUSTER_MODES, SPARK_OPTIONS, build_spark_conf
from orca.core._warn import warn_once
from orca.core.engine.liveness import backstop_s

log = logging.getLogger("orca")

RUNTIMES = ("spark", "ray")
# Keyword arguments init_orca_context understands besides the OrcaSettings fields.
CONTEXT_OPTIONS = frozenset({"spark_log_level", "ray_num_cpus", "object_store_memory"})
_lock = threading.RLock()
_current: OrcaContext | None = None
#: a JVM whose Spark a ``SparkSession.stop()`` ended (it still needed the JVM): the next
#: ``stop_orca_context()`` (also the one at exit) ends it, or the next context runs Spark in it
_jvm_left = False


@dataclass
class OrcaSettings:
    """Settings kept in one place, per context (printable, plain values).

    Attributes:
        log_output: forward worker stdout/stderr to the driver.
        barrier_mode: the reference's; accepted, no effect (Orca's Spark training stages always
            run in barrier mode: its workers must start together).
        shard_size: the reference's; accepted, no effect (data is split by partition).
        worker_timeout_s: the longest a working worker may be silent (no training step, no
            batch, no heartbeat) before its call fails with an error naming it. A worker that
            makes progress is never cut off, however long the fit.
        worker_start_timeout_s: the longest a worker may take to start (process, framework
            import, data loading, rendezvous) before its first progress.
        max_failures: the default of ``fit(max_failures=...)``: how many lost workers a fit
            recovers from, resuming from the last completed epoch.
        ray_start_timeout_s: upper bound on Ray's start-up.
        worker_data_memory_mb: the most of its share of the training data (MB) a worker keeps in
            memory. A larger share is written to the worker's local disk as it streams in
            (``ORCA_SPILL_DIR``, else Spark's local directory, else the system's temporary
            one) and read back a window of a quarter of this at a time, with a window
            shuffle instead of a full one: a worker's memory then follows this setting and the
            batch size, not the data. Applies to the Spark launcher (``spark`` and ``bigdl``
            backends). ``math.inf`` keeps every share in memory; 0 streams every share to disk
            (the reference's ``train_data_store`` values set these, see below).
        warm_workers_s: how long the ``ray`` backend keeps the workers of an Estimator that was
            shut down (``est.shutdown()``) up for the next Estimator of the same framework,
            worker count and threads, which then starts in milliseconds instead of seconds (no
            process start, no framework import). Parked workers hold their Ray CPUs: Orca ends
            them when it needs those CPUs for its own work (another Estimator, XShards tasks on
            Ray, a Ray Dataset, a Tune trainable), when this time passes, and when the
            context stops; ``orca.core.release_warm_workers()`` ends them at once. 0 ends the
            workers at ``shutdown()``. Applies to frameworks whose runner can be set up again in
            the same process (PyTorch). Like Spark's reused Python workers, a warm worker keeps the
            modules it imported: after editing a module your model imports, set 0 or release them.
        jvm_class_cache: let the driver's JVM map Spark's classes from a class-data-sharing
            archive Orca builds once per Java runtime and Spark installation (in the
            background, at the lowest priority, after the first session's JVM ended; ~180 MB in
            ``~/.cache/orca/jvm`` or ``$ORCA_CACHE_DIR/jvm``): every later Spark start is ~3 s
            faster. False leaves the JVM's options as they are. See :mod:`orca.core._jvm_cache`.
        train_data_store: the reference's name for where a worker keeps its training data, read
            back as it was set (``None``: never set, ``worker_data_memory_mb`` decides). Setting
            it sets ``worker_data_memory_mb``: ``"DRAM"`` to ``math.inf`` (every share stays in
            memory, as the reference's default did), ``"DISK_n"`` (``n`` an integer) to 0 (every
            share streams to the worker's local disk as it arrives and is read back in windows of
            1 MiB, the smallest; ``n`` is not used: for larger windows set ``worker_data_memory_mb``
            instead), ``"PMEM"`` as ``"DRAM"`` with a one-time
            warning (Orca does not place data in persistent memory). Case is ignored. Setting
            ``worker_data_memory_mb`` afterwards sets this back to ``None``.
        pandas_read_backend: the reference's choice of reader for ``read_csv``/``read_json``:
            ``"pandas"``, what Orca's readers always use. ``"spark"`` is accepted with a one-time
            warning and reads with pandas all the same.
        serialize_data_creator: the reference's lock around data creators (one at a time per
            node). Orca's data creators run concurrently: ``True`` is accepted with a one-time
            warning and has no effect (a creator that downloads to a shared path should lock
            itself, e.g. with ``filelock``).
    """

    log_output: bool = False
    barrier_mode: bool = True
    shard_size: int | None = None
    worker_timeout_s: float = 600.0
    worker_start_timeout_s: float = 300.0
    max_failures: int = 0
    ray_start_timeout_s: float = 120.0
    worker_data_memory_mb: float = 2048.0
    warm_workers_s: float = 30.0
    jvm_class_cache: bool = True
    train_data_store: str | None = None
    pandas_read_backend: str = "pandas"
    serialize_data_creator: bool = False


@dataclass(frozen=True)
class RayRuntime:
    """What Orca knows of the Ray runtime it uses.

    Attributes:
        address: the GCS address (``host:port``) of the Ray cluster.
        num_nodes: alive Ray nodes.
        cpus_per_node: CPUs of each alive node, in node order.
        started_here: True when this process started the local Ray instance.
        node_ids: ids of the alive nodes, in the order of ``cpus_per_node``.
        mode: ``"embedded"``, ``"on_spark"``, ``"attached"`` or ``"external"`` (a Ray this
            process was connected to before the context).
        auth: True when Ray's token authentication is on.
    """

    address: str
    num_nodes: int
    cpus_per_node: tuple[int, ...]
    started_here: bool
    node_ids: tuple[str, ...] = ()
    mode: str = "embedded"
    auth: bool = True

    @property
    def worker_nodes(self) -> tuple[tuple[str, int], ...]:
        """``(node id, CPUs)`` of the nodes Orca's workers can run on (a 0-CPU head is left out)."""
        return tuple((n, c) for n, c in zip(self.node_ids, self.cpus_per_node, strict=False) if c > 0)


class _Background:
    """``fn()`` in a daemon thread started now; :meth:`result` returns its value or raises its error."""

    def __init__(self, name: str, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits for it
            self._error = exc

    def join(self) -> None:
        """Wait for ``fn`` to end (Ctrl-C interrupts the wait)."""
        self._thread.join()

    @property
    def ok(self) -> bool:
        """True when ``fn`` returned (after :meth:`join`)."""
        return not self._thread.is_alive() and self._error is None

    def result(self) -> Any:
        """``fn``'s value, or its exception if it raised (after :meth:`join`)."""
        if self._error is not None:
            raise self._error
        return self._value


def _cancel_jobs_on_sigint(sc: Any) -> None:
    """Ctrl-C cancels the running Spark jobs, then raises ``KeyboardInterrupt``: what pyspark sets
    up when its SparkContext starts in the main thread (here it started in another)."""

    def handler(signum: int, frame: Any) -> None:
        try:
            sc.cancelAllJobs()
        finally:
            raise KeyboardInterrupt()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)


#: settings assigned on the class (``OrcaContext.log_output = True``), for every context started after
_class_settings: dict[str, Any] = {}
#: ``train_data_store`` values and the ``worker_data_memory_mb`` each sets (``DISK_<n>`` by pattern)
_DATA_STORES = {"DRAM": math.inf, "PMEM": math.inf}
_DISK_STORE = re.compile(r"DISK_\d+")
_READ_BACKENDS = ("pandas", "spark")
def _setting_values(name: str, value: Any) -> dict[str, Any]:
    """The settings that ``<name> = value`` sets, checked and normalised (a reference setting sets
    Orca's own too); warns once for a reference value that has no effect here.

    Raises:
        ValueError: a value that cannot work (the message names the setting and what it takes).
    """
    _check_setting(name, value)
    if name == "worker_data_memory_mb":
        return {name: value, "train_data_store": None}
    if name == "train_data_store":
        if value is None:
            return {name: None}
        store = value.upper()
        if store == "PMEM":
            warn_once("train_data_store=PMEM", "OrcaContext.train_data_store='PMEM': Orca does not place "
                      "data in persistent memory; each worker's share stays in memory as with 'DRAM'.", stacklevel=3)
        memory_mb = _DATA_STORES.get(store, 0.0)
        return {name: store, "worker_data_memory_mb": memory_mb}
    if name == "pandas_read_backend":
        backend = value.lower()
        if backend == "spark":
            warn_once("pandas_read_backend=spark", "OrcaContext.pandas_read_backend='spark' has no effect: "
                      "Orca's read_csv/read_json read the files with pandas on the workers (no Spark "
                      "reader); the result is the same pandas XShards.", stacklevel=3)
        return {name: backend}
    if name == "serialize_data_creator" and value:
        warn_once("serialize_data_creator", "OrcaContext.serialize_data_creator=True has no effect: Orca's "
                  "data creators run concurrently, one per worker; a creator that downloads to a path "
                  "other workers share should take a file lock itself.", stacklevel=3)
    return {name: value}


def _check_setting(name: str, value: Any) -> None:
    """Refuse a setting value that cannot work (the message names the setting)."""
    if name in ("worker_timeout_s", "worker_start_timeout_s", "ray_start_timeout_s"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}.")
    elif name == "worker_data_memory_mb":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"worker_data_memory_mb must be >= 0 (MB), got {value!r}.")
    elif name == "warm_workers_s":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"warm_workers_s must be >= 0 seconds (0: no warm workers), got {value!r}.")
    elif name == "shard_size":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"shard_size must be >= 1 or None, got {value!r}.")
    elif name == "max_failures":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"max_failures must be a non-negative int, got {value!r}.")
    elif name in ("log_output", "barrier_mode", "jvm_class_cache", "serialize_data_creator") \
            and not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    elif name == "train_data_store" and value is not None and not (
            isinstance(value, str) and (value.upper() in _DATA_STORES or _DISK_STORE.fullmatch(value.upper()))):
        raise ValueError(f"train_data_store must be 'DRAM', 'DISK_n' (n an integer, e.g. 'DISK_2') or 'PMEM', "
                         f"got {value!r}.")
    elif name == "pandas_read_backend" and not (isinstance(value, str) and value.lower() in _READ_BACKENDS):
        raise ValueError(f"pandas_read_backend must be 'pandas' or 'spark', got {value!r}.")


class _ContextType(type):
    """``OrcaContext.<setting> = value``, the reference's way to set a setting, works: the value
    goes to the running context's settings and to every context started after; reading
    ``OrcaContext.<setting>`` gives the running context's value (or the next one's)."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if name not in OrcaSettings.__dataclass_fields__:
            super().__setattr__(name, value)
            return
        values = _setting_values(name, value)
        with _lock:
            _class_settings.update(values)
            if _current is not None:
                for key, item in values.items():
                    setattr(_current.settings, key, item)
                if name == "log_output" and _current._ray is not None:
                    log.warning("OrcaContext.log_output takes effect when Ray starts; Ray is running already: "
                                "set it before init_orca_context (or pass init_orca_context(log_output=...)).")

    def __getattr__(cls, name: str) -> Any:
        if name not in OrcaSettings.__dataclass_fields__:
            raise AttributeError(name)
        if _current is not None:
            return getattr(_current.settings, name)
        return _class_settings.get(name, OrcaSettings.__dataclass_fields__[name].default)

    def __instancecheck__(cls, obj: Any) -> bool:
        # the SparkContext that init_orca_context returns answers as the OrcaContext it belongs to
        return super().__instancecheck__(obj) or (
            cls is OrcaContext and getattr(type(obj), "_orca_context_face", False))


@dataclass
class OrcaContext(metaclass=_ContextType):
    """The running Orca context. Get it from :func:`init_orca_context`.

    Where Spark runs, what :func:`init_orca_context`, :meth:`active` and :meth:`current` return is
    the running ``SparkContext``, which answers every attribute and method of this class as
    well (``isinstance(sc, OrcaContext)`` is true); see :func:`init_orca_context`.

    The class-level accessors (``OrcaContext.get_spark_session()`` etc.) act on the current
    context, as in the reference API; so do the settings: ``OrcaContext.log_output = True``
    (before ``init_orca_context``, as the reference's samples do) sets the setting of the
    running context and of those started after.
    """

    cluster_mode: str = "local"
    runtime: str = "spark"
    cores: int = 2
    memory: str = "2g"
    num_nodes: int = 1
    init_ray_on_spark: bool = False
    address: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    settings: OrcaSettings = field(default_factory=OrcaSettings)
    _spark: Any = field(default=None, repr=False)
    _ray: RayRuntime | None = field(default=None, repr=False)
    ray_on_driver: bool = False
    ray_auth: bool = True
    context_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _ray_on_spark: RayOnSpark | None = field(default=None, repr=False)
    _ray_auth_env: dict[str, str] = field(default_factory=dict, repr=False)
    _auth: AuthEnv = field(default_factory=AuthEnv, repr=False)
    _ray_connected_here: bool = field(default=False, repr=False)
    _ray_temp_dir: str | None = field(default=None, repr=False)
    _owns_spark: bool = field(default=False, repr=False)
    _face: Any = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ accessors
    @staticmethod
    def current() -> OrcaContext:
        """Return the active context (what :func:`init_orca_context` returned), starting a local
        one with defaults if there is none."""
        with _lock:
            if _current is None:
                return init_orca_context()
            return _current._public()

    @staticmethod
    def active() -> OrcaContext | None:
        """Return the active context (what :func:`init_orca_context` returned), or ``None``
        (never starts one)."""
        ctx = _current
        return ctx._public() if ctx is not None else None

    def _public(self) -> OrcaContext:
        """What ``init_orca_context`` returns for this context: its SparkContext where Spark ran
        when the context started, else this object."""
        return self._face if self._face is not None else self

    @classmethod
    def get_spark_session(cls) -> Any:
        """Return the ``SparkSession``, starting Spark if the context has not yet."""
        return cls.current().spark_session()

    @classmethod
    def get_spark_context(cls) -> Any:
        """Return the ``SparkContext`` of the current context."""
        return cls.current().spark_session().sparkContext

    @classmethod
    def get_ray_context(cls) -> RayRuntime:
        """Return the Ray runtime, starting (or attaching to) Ray on first use."""
        return cls.current().ray_runtime()

    # ------------------------------------------------------------------ spark
    @property
    def has_spark(self) -> bool:
        """True when this context's Spark session is running."""
        return self._spark is not None

    @property
    def has_ray(self) -> bool:
        """True when this context has started or attached to Ray."""
        return self._ray is not None

    def spark_session(self) -> Any:
        """Return this context's SparkSession, starting it on first use."""
        with _lock:
            if self._spark is None:
                self._adopt_spark(self._start_spark())
            return self._spark

    def _adopt_spark(self, session: Any) -> None:
        """Make ``session``, just started, this context's."""
        global _jvm_left
        self._spark = session
        _jvm_left = False  # a JVM a session's stop left now runs this context's Spark: it ends with it
        if not is_connect(session):  # (a Spark Connect session has no SparkContext)
            _answer_as(session.sparkContext, self)

    def _start_spark(self) -> Any:
        if self.cluster_mode == CONNECT_MODE:  # a client of a Spark Connect server: no JVM here
            session, self._owns_spark = connect_session(self.extra.get("remote"), self.conf)
            return session
        ensure_java()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if self.cluster_mode == "local":
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        if self.cluster_mode == "spark-submit":
            active = SparkSession.getActiveSession()
            if active is None:
                active = SparkSession.builder.getOrCreate()
            self._owns_spark = False
            return active
        entries = self._spark_conf_entries()
        _add_registered_jars(entries)
        if "spark.barrier.sync.timeout" not in self.conf and self.cluster_mode != "spark-submit":
            # a barrier allGather otherwise waits up to a year for a stuck peer
            # the driver watches liveness (orca.core.engine.liveness); Spark's own wait is a backstop
            entries["spark.barrier.sync.timeout"] = f"{int(backstop_s(self.settings.worker_timeout_s))}s"
        had_jvm = _gateway_process() is not None
        cds = None
        if not had_jvm and self.settings.jvm_class_cache:
            user_options = entries.get("spark.driver.extraJavaOptions") or jvm_cache.defaults_java_options()
            cds = jvm_cache.plan(user_options)
            if cds is not None:
                entries["spark.driver.extraJavaOptions"] = " ".join(filter(None, (user_options, cds.options)))
        builder = SparkSession.builder
        for key, value in entries.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
            session.sparkContext.setLogLevel(self.extra.get("spark_log_level", "WARN"))
        except Exception as exc:
            # Read the JVM's message while the JVM is up: a py4j error cannot print itself
            # once its JVM is gone. Then end the JVM launched for a session that failed.
            message = _error_text(exc)
            if not had_jvm:
                _stop_jvm()
            jvm_cache.discard(cds)
            raise RuntimeError(
                f"Spark did not start (cluster_mode={self.cluster_mode!r}, "
                f"master={entries.get('spark.master')!r}): {message}"
            ) from exc
        except BaseException:
            if not had_jvm:
                _stop_jvm()
            jvm_cache.discard(cds)
            raise
        self._owns_spark = True
        if cds is not None and cds.recording:
            proc = _gateway_process()
            jvm_cache.recorded(cds, proc.pid if proc is not None else None, session.sparkContext._jvm)
        return session

    def _spark_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.extra.items() if k in SPARK_OPTIONS}

    # ------------------------------------------------------------------ ray
    def ray_runtime(self) -> RayRuntime:
        """Return the Ray runtime, starting or attaching to it on first use."""
        with _lock:
            if self._ray is None:
                self._ray = self._start_ray()
            return self._ray

    def ray_runtime_now(self) -> RayRuntime:
        """Return the Ray runtime as it is now: nodes lost since it started are left out, and on
        Ray-on-Spark an executor that Spark started in place of a lost one gets its Ray node
        first (see :meth:`orca.core._ray_spark.RayOnSpark.heal`). Workers call this before
        they start; it costs one query of the Ray cluster while nothing was lost."""
        runtime = self.ray_runtime()
        with _lock:
            if self._ray is None:
                return runtime
            if self._ray_on_spark is not None:
                self._ray_on_spark.heal()
            self._ray = _runtime_snapshot(self._ray.mode, self._ray.started_here)
            return self._ray

    def ray_mode(self) -> str:
        """How this context runs Ray: ``"attached"`` (``address=``), ``"on_spark"`` (Ray worker nodes
        on the Spark executors), or ``"embedded"`` (a local Ray in this process's machine)."""
        if self.address:
            return "attached"
        if self.init_ray_on_spark:
            return "on_spark"
        if self.ray_on_driver or not self._spark_is_cluster():
            return "embedded"
        return "on_spark"

    def _spark_is_cluster(self) -> bool:
        """True when Spark runs (or will run) on a cluster, not in local mode."""
        if self.cluster_mode == "local":
            return False
        if self.cluster_mode == "spark-submit":
            master = str(self.spark_session().sparkContext.master)
            return not master.startswith("local")
        return True

    def ray_join_env(self) -> dict[str, str]:
        """The environment a process that joins this context's Ray needs (auth mode and token)."""
        self.ray_runtime()
        return dict(self._ray_auth_env)

    def _start_ray(self) -> RayRuntime:
        started_here = False
        mode = self.ray_mode()
        if mode == "on_spark" and self.cluster_mode == CONNECT_MODE:
            raise ValueError("Ray-on-Spark needs a classic Spark session (it starts Ray nodes from the executors "
                             "through the SparkContext); with cluster_mode='spark-connect' pass address='host:port' "
                             "of a running Ray cluster (or ray_on_driver=True for a Ray on this machine alone).")
        if mode == "embedded":
            keep_ray_on_loopback()
        import ray

        if ray.is_initialized():
            # Someone else connected this process to Ray: use it, and leave it to them.
            mode = "external"
            self._ray_auth_env = _current_auth_env()
        elif mode == "attached":
            if not self.ray_auth:
                self._auth.apply(auth_env(None))
            ray.init(address=self.address, log_to_driver=self.settings.log_output)
            self._ray_connected_here = True
            self._ray_auth_env = _current_auth_env()
        elif mode == "on_spark":
            cluster = self._ray_on_spark_cluster()
            cluster.spark = self.spark_session()
            cluster.start(self._ray_auth_env)
        else:
            self._embedded_ray_env()
            self._init_embedded_ray()
            started_here = True
        return _runtime_snapshot(mode, started_here)

    def _embedded_ray_env(self) -> None:
        """An embedded Ray's set-up before ``ray.init``: servers kept on loopback, the context's auth
        token applied, free metrics ports, this interpreter's ``bin`` on PATH, a private temporary
        folder (owned by this context from now on: its stop removes it)."""
        keep_ray_on_loopback()
        self._ray_auth_env = auth_env(new_token() if self.ray_auth else None)
        self._auth.apply(self._ray_auth_env)
        # Ray's metrics servers default to fixed ports that another Ray on this machine
        # may hold; a private temp dir keeps sessions, sockets and logs apart.
        autoscaler_port, dashboard_port = find_free_ports(2)
        os.environ.setdefault("AUTOSCALER_METRIC_PORT", str(autoscaler_port))
        os.environ.setdefault("DASHBOARD_METRIC_PORT", str(dashboard_port))
        _venv_bin_on_path()
        self._ray_temp_dir = tempfile.mkdtemp(prefix=f"orca-ray-{self.context_id}-")
        self._ray_connected_here = True

    def _init_embedded_ray(self) -> None:
        """Start the embedded Ray bound to loopback (after :meth:`_embedded_ray_env`)."""
        import ray

        ray.init(
            num_cpus=int(self.extra.get("ray_num_cpus", self.cores)),
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            _temp_dir=self._ray_temp_dir,
            log_to_driver=self.settings.log_output,
            object_store_memory=self.extra.get("object_store_memory"),
            configure_logging=False,
        )

    def _ray_on_spark_cluster(self) -> RayOnSpark:
        """Ray-on-Spark's driver side before its head starts: the context's Ray environment (auth
        token) applied, this interpreter's ``bin`` on PATH, and the cluster object (its ``spark``
        set once the session runs), owned by this context from now on (its stop stops it)."""
        self._ray_auth_env = auth_env(new_token() if self.ray_auth else None)
        self._auth.apply(self._ray_auth_env)
        _venv_bin_on_path()
        cluster = RayOnSpark(
            self.context_id, self._spark, cores=self.cores, memory=self.memory, num_nodes=self.num_nodes,
            object_store_memory=self.extra.get("object_store_memory"),
            timeout_s=self.settings.ray_start_timeout_s, log_to_driver=self.settings.log_output,
        )
        self._ray_connected_here = True
        self._ray_on_spark = cluster
        return cluster

    def _start_spark_and_ray(self) -> None:
        """Start Spark and Ray, both asked for up front (``init_ray_on_spark=True``), together: the
        JVM and the Spark session start in a thread (``orca-spark-start``) while this one starts
        the part of Ray's start that needs no Spark: Ray-on-Spark's head on the driver (it needs
        only the driver's address, which the Spark configuration names in local mode and where
        ``driver_host=`` or ``spark.driver.host`` is given; the executors' Ray nodes join it
        afterwards, from a Spark job). Where Spark is not started here
        (``spark-submit``, Spark Connect), Ray is connected already or the driver's address is
        not known before Spark runs, they start one after the other.

        A failure of either raises its own error, naming it, once both have settled; the
        caller's clean-up (:meth:`stop`) then stops the part that did start.
        """
        ray = sys.modules.get("ray")  # (not imported here: its import overlaps the Spark thread's)
        connected = ray is not None and ray.is_initialized()
        host = self._spark_conf_entries().get("spark.driver.host")
        if self.cluster_mode in ("spark-submit", CONNECT_MODE) or connected or not host or \
                self.ray_mode() != "on_spark":
            self.spark_session()
            self.ray_runtime()
            return
        cluster = self._ray_on_spark_cluster()
        what = f"Ray-on-Spark's head on the driver, {host}"
        # Spark in the thread: Ray ties the processes it starts to the thread that starts them
        # (they get SIGKILL when it ends), so Ray's part runs here, in the caller's thread
        spark_start = _Background("orca-spark-start", self._start_spark)
        ray_error: Exception | None = None
        try:
            cluster.start_head(host)
        except Exception as exc:  # noqa: BLE001 - raised once Spark has settled (and is stopped)
            ray_error = exc
        finally:
            spark_start.join()  # a failed Ray start, or Ctrl-C, then stops a Spark that is up
            if spark_start.ok:
                self._adopt_spark(spark_start.result())
                _cancel_jobs_on_sigint(self._spark.sparkContext)
        spark_start.result()  # Spark's own error
        if ray_error is not None:
            raise RuntimeError(f"Ray did not start ({what}; Spark started alongside and is stopped again): "
                               f"{type(ray_error).__name__}: {ray_error}") from ray_error
        cluster.spark = self._spark
        cluster.start_nodes(self._ray_auth_env)
        self._ray = _runtime_snapshot("on_spark", False)

    def _spark_conf_entries(self) -> dict[str, str]:
        """The Spark configuration this context's session starts with (the user's ``conf`` last)."""
        return build_spark_conf(self.cluster_mode, self.cores, self.memory, self.num_nodes, self.conf,
                                **self._spark_options())

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop what this context started: its Ray (or its connection to Ray) and its Spark.

        A Spark session that ``spark-submit`` created and a Ray that was connected before
        this context are left running. Errors while stopping one engine do not keep the
        other running; the first one is re-raised at the end.
        """
        self._stop(keep_jvm=False)

    def _stop(self, keep_jvm: bool) -> None:
        """:meth:`stop`; ``keep_jvm``: stop Spark but leave its JVM (to the next stop or start)."""
        global _jvm_left
        errors: list[BaseException] = []
        with _lock:
            if self._ray is not None or self._ray_connected_here:
                try:
                    self._stop_ray()
                except Exception as exc:  # noqa: BLE001 - stop Spark anyway, re-raise below
                    errors.append(exc)
            if self._spark is not None:
                session, self._spark = self._spark, None
                if is_connect(session):  # ends this client's session; the server runs on
                    if self._owns_spark:
                        try:
                            session.stop()
                        except Exception as exc:  # noqa: BLE001 - collected, raised after every part stopped
                            errors.append(exc)
                elif self._owns_spark and keep_jvm:
                    try:
                        session.stop()
                    except Exception as exc:  # noqa: BLE001 - collected, raised after every part stopped
                        errors.append(exc)
                    _jvm_left = True
                elif self._owns_spark:
                    try:
                        _stop_spark_and_jvm(session)
                    except Exception as exc:  # noqa: BLE001 - collected, raised after every part stopped
                        errors.append(exc)
                    jvm_cache.build_pending()  # the JVM has ended: its class list is complete
        if errors:
            raise errors[0]

    def _stop_ray(self) -> None:
        import ray

        release_warm_workers()
        try:
            if self._ray_on_spark is not None:
                self._ray_on_spark.stop()
            elif self._ray_connected_here:
                ray.shutdown()
        finally:
            self._ray = None
            self._ray_connected_here = False
            self._ray_on_spark = None
            self._auth.restore()
            if self._ray_temp_dir:
                shutil.rmtree(self._ray_temp_dir, ignore_errors=True)
                self._ray_temp_dir = None


#: what the SparkContext answers for its OrcaContext (computed once: see :func:`_face_class`)
_CONTEXT_NAMES: frozenset[str] = frozenset()


@functools.cache
def _face_class() -> type:
    """The class the running ``SparkContext`` takes on so that it also answers as its
    :class:`OrcaContext` (pyspark is imported here, not when orca.core is)."""
    global _CONTEXT_NAMES
    from pyspark import SparkContext

    _CONTEXT_NAMES = frozenset(
        {n for n in dir(OrcaContext) if not n.startswith("__")} | set(OrcaContext.__dataclass_fields__)
    ) - {"stop"}

    class OrcaSparkContext(SparkContext):
        """The running ``SparkContext``, which also answers every attribute and method of the
        :class:`OrcaContext` it runs in (``sc.spark_session()``, ``sc.settings``, ``sc.has_ray``...).

        ``stop()`` ends the whole Orca context (Ray, Spark and the JVM), as ``stop_orca_context()``
        does: a reference user's ``sc.stop()`` leaves nothing of Orca running.
        """

        _orca_context_face = True

        def __getattr__(self, name: str) -> Any:  # only for names the SparkContext lacks
            ctx = self.__dict__.get("_orca_context")
            if ctx is None or name not in _CONTEXT_NAMES:
                raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
            return getattr(ctx, name)

        def __setattr__(self, name: str, value: Any) -> None:
            ctx = self.__dict__.get("_orca_context")
            if ctx is not None and name in OrcaContext.__dataclass_fields__:
                setattr(ctx, name, value)
            else:
                super().__setattr__(name, value)

        def __dir__(self) -> list[str]:
            return sorted(set(super().__dir__()) | _CONTEXT_NAMES)

        def stop(self) -> None:
            """Stop the Orca context this SparkContext runs in (its Ray, its Spark, the JVM), or
            this SparkContext alone where that context has stopped already."""
            ctx = self.__dict__.get("_orca_context")
            if ctx is not None and ctx._spark is not None and ctx is _current:
                # A SparkSession.stop() that called this goes on to use the JVM: leave it to the
                # next stop_orca_context() (or the next context's Spark) to end.
                _stop_current(keep_jvm=_called_by_session_stop())
            SparkContext.stop(self)  # a stopped one returns at once; a spark-submit one stops now

    return OrcaSparkContext


def _called_by_session_stop() -> bool:
    """True when the caller of the caller is a ``SparkSession.stop``."""
    from pyspark.sql import SparkSession

    frame = sys._getframe(2)
    return frame.f_code.co_name == "stop" and isinstance(frame.f_locals.get("self"), SparkSession)


def _answer_as(sc: Any, ctx: OrcaContext) -> None:
    """Make the running SparkContext ``sc`` answer as ``ctx`` too (a SparkContext of a class of the
    user's own is left as it is)."""
    from pyspark import SparkContext

    face = _face_class()
    if type(sc) is SparkContext:
        sc.__class__ = face
    if type(sc) is face:
        sc.__dict__["_orca_context"] = ctx


def _runtime_snapshot(mode: str, started_here: bool) -> RayRuntime:
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        auth = bool(is_token_auth_enabled())
    except ImportError:
        auth = False
    return RayRuntime(
        address=str(ray.get_runtime_context().gcs_address),
        num_nodes=len(nodes),
        cpus_per_node=tuple(int(n.get("Resources", {}).get("CPU", 0)) for n in nodes),
        started_here=started_here,
        node_ids=tuple(str(n["NodeID"]) for n in nodes),
        mode=mode,
        auth=auth,
    )


#: jars that framework packages need on every Spark session Orca starts, by package
_REGISTERED_JARS: dict[str, tuple[str, ...]] = {}


def register_spark_jars(owner: str, jars: Sequence[str]) -> None:
    """Put ``jars`` on the class path of every Spark session Orca starts from now on.

    For a framework package whose engine runs in the JVM (orca-bigdl registers BigDL's jars
    when it is imported). A session that is already running is not changed: the package
    should check for its classes and say to restart the context.

    Args:
        owner: the registering package (a second call from it replaces its jars).
        jars: local paths of the jar files.

    Raises:
        FileNotFoundError: a jar does not exist.
    """
    missing = [j for j in jars if not os.path.isfile(j)]
    if missing:
        raise FileNotFoundError(f"{owner}: jar(s) not found: {missing}")
    with _lock:
        _REGISTERED_JARS[owner] = tuple(jars)


#: the entry-point group through which an installed framework package names the jars its engine
#: needs in Spark's JVM: ``name = "module:function"``, the function returning local jar paths
SPARK_JARS_ENTRY_POINTS = "orca.spark_jars"


def _discover_plugin_jars() -> None:
    """Register the jars of every installed package that declares them (:data:`SPARK_JARS_ENTRY_POINTS`),
    so a Spark session Orca starts has them whether or not the package was imported first. A
    plug-in that fails is logged and skipped: its own Estimator then says what is missing."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=SPARK_JARS_ENTRY_POINTS):
        if ep.name in _REGISTERED_JARS:
            continue
        try:
            register_spark_jars(ep.name, list(ep.load()()))
        except Exception as exc:  # noqa: BLE001 - one broken plug-in must not stop Spark from starting
            log.warning("Orca plug-in %s (%s) could not name its Spark jars: %s", ep.name, ep.value, exc)


def _add_registered_jars(entries: dict[str, str]) -> None:
    """Append the registered jars (and those installed plug-ins declare) to ``spark.jars``: the
    driver loads them and the executors fetch them. Not to ``spark.driver.extraClassPath``, which
    goes *before* Spark's own jars: a fat jar there (BigDL's bundles an old log4j) would shadow
    Spark's classes."""
    _discover_plugin_jars()
    jars = [j for owned in _REGISTERED_JARS.values() for j in owned]
    if not jars:
        return
    have = [p for p in entries.get("spark.jars", "").split(",") if p]
    entries["spark.jars"] = ",".join(have + [j for j in jars if j not in have])


def _venv_bin_on_path() -> None:
    """Put this interpreter's bin directory first on PATH (Ray spawns ``python``/``ray`` by name)."""
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def init_orca_context(
    cluster_mode: str = "local",
    cores: int = 2,
    memory: str = "2g",
    num_nodes: int = 1,
    runtime: str = "spark",
    init_ray_on_spark: bool = False,
    address: str | None = None,
    conf: dict[str, Any] | None = None,
    *,
    ray_on_driver: bool = False,
    ray_auth: bool = True,
    **kwargs: Any,
) -> OrcaContext:
    """Start (or return the running) Orca context; return its SparkContext where Spark runs.

    Args:
        cluster_mode: ``local`` (embedded Spark ``local[cores]`` on 127.0.0.1), ``standalone``
            (give ``master="spark://host:port"``), ``yarn-client``, ``k8s-client`` (give
            ``master`` and ``container_image``), ``spark-submit`` (attach to the session
            that spark-submit created) or ``spark-connect`` (a client of a Spark Connect server: give
            ``remote="sc://host:15002"``, or leave it out to use the active Connect session; the
            context then has a SparkSession but no SparkContext, and the ``spark`` launcher reads
            DataFrames only; see docs/clusters.md).
        cores: local cores, or cores per executor on a cluster.
        memory: driver memory locally, executor memory on a cluster (``"2g"``).
        num_nodes: executors on a cluster.
        runtime: ``"spark"`` starts Spark now and Ray lazily; ``"ray"`` starts Ray now and
            Spark lazily.
        init_ray_on_spark: start Ray-on-Spark now (the Ray head on the driver, a Ray worker
            node on every executor), its head while the JVM starts. On a Spark cluster this is how the ``ray`` backend runs
            anyway, started on first use; in local mode it runs one Ray node in Spark's JVM.
        address: attach to a running Ray cluster at this address (``host:port`` or ``auto``).
        conf: extra Spark configuration, applied last.
        ray_on_driver: on a Spark cluster, run an embedded Ray on the driver alone instead of
            Ray-on-Spark (its CPUs are the driver's: ``ray_num_cpus=``).
        ray_auth: keep Ray's token authentication on (a fresh token per context for a Ray the
            context starts; the user's token for ``address=``). ``False`` turns it off.
        **kwargs: mode-specific settings (see ``build_spark_conf``), ``spark_log_level``,
            ``ray_num_cpus`` (an embedded Ray's CPUs), ``object_store_memory`` (each Ray node's
            object store: bytes as an int, or a size such as ``"1g"``, ``"512m"``, ``"2G"``, in
            powers of 1024) and any :class:`OrcaSettings` field (``worker_timeout_s=...``,
            ``log_output=True``).

    Returns:
        Where Spark runs (``runtime="spark"``, or ``init_ray_on_spark=True``): the running
        ``pyspark.SparkContext``, as the reference returned (``SparkSession(sc)``,
        ``SQLContext(sc)``, ``sc.parallelize(...)`` work). The same object also answers every
        attribute and method of the :class:`OrcaContext` (``sc.spark_session()``,
        ``sc.ray_runtime()``, ``sc.settings``, ``sc.has_ray``; ``isinstance(sc, OrcaContext)``
        is true), and its ``stop()`` ends the whole context as ``stop_orca_context()`` does.
        With ``runtime="ray"`` (Spark starts later, if at all): the :class:`OrcaContext` itself
        (the reference returned its ``OrcaRayContext``, which Orca does not have;
        ``ray_runtime()`` describes the Ray). A second call returns the same object (with a
        warning when it asks for another mode, runtime or address).

    Raises:
        ValueError: an unknown ``cluster_mode`` or ``runtime``, ``address`` together with
            ``init_ray_on_spark`` or ``ray_on_driver``, a mode without what it needs (``standalone``
            without ``master``, ``k8s-client`` without ``container_image``), or an
            ``object_store_memory`` that is not a size; checked before anything starts.
        TypeError: an unknown keyword argument.

    Examples:
        >>> sc = init_orca_context(cores=2)                  # doctest: +SKIP
        >>> sc.parallelize(range(10)).sum()                  # doctest: +SKIP
        45
        >>> spark = OrcaContext.get_spark_session()           # doctest: +SKIP
        >>> sc.spark_session() is spark                       # doctest: +SKIP
        True
        >>> stop_orca_context()                               # doctest: +SKIP
    """
    global _current
    settings, extra = _validate(cluster_mode, cores, memory, num_nodes, runtime, conf, kwargs)
    _check_ray_choice(address, init_ray_on_spark, ray_on_driver)
    with _lock:
        if _current is not None:
            asked = {"cluster_mode": cluster_mode, "runtime": runtime, "address": address}
            differs = {k: v for k, v in asked.items() if getattr(_current, k) != v}
            if differs:
                log.warning(
                    "init_orca_context(%s) returns the running context (%s); call "
                    "stop_orca_context() first to start a different one.",
                    ", ".join(f"{k}={v!r}" for k, v in differs.items()),
                    ", ".join(f"{k}={getattr(_current, k)!r}" for k in differs),
                )
            return _current._public()
        ctx = OrcaContext(
            cluster_mode=cluster_mode,
            runtime=runtime,
            cores=cores,
            memory=memory,
            num_nodes=num_nodes,
            init_ray_on_spark=init_ray_on_spark,
            address=address,
            ray_on_driver=bool(ray_on_driver),
            ray_auth=bool(ray_auth),
            conf=dict(conf or {}),
            extra=extra,
            settings=settings,
        )
        _current = ctx
        try:
            if init_ray_on_spark:  # both now: Ray's head starts while the JVM does
                ctx._start_spark_and_ray()
            elif runtime == "spark":
                ctx.spark_session()
            else:
                ctx.ray_runtime()
            if ctx._spark is not None and not is_connect(ctx._spark) and \
                    getattr(type(ctx._spark.sparkContext), "_orca_context_face", False):
                ctx._face = ctx._spark.sparkContext
        except BaseException:
            # Leave nothing behind: stop whatever part did start, then report the failure.
            _current = None
            try:
                ctx.stop()
            except Exception:  # noqa: BLE001 - the start error is the one to show
                log.debug("cleanup after a failed start failed", exc_info=True)
            raise
        return ctx._public()


def _validate(
    cluster_mode: str,
    cores: int,
    memory: str,
    num_nodes: int,
    runtime: str,
    conf: dict[str, Any] | None,
    kwargs: dict[str, Any],
) -> tuple[OrcaSettings, dict[str, Any]]:
    """Check every argument before anything starts; split settings from mode options."""
    if cluster_mode not in SPARK_CLUSTER_MODES:
        raise ValueError(
            f"cluster_mode={cluster_mode!r} is not supported; use one of {SPARK_CLUSTER_MODES}."
        )
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime={runtime!r} is not supported; use one of {RUNTIMES}.")
    settings = OrcaSettings(**_class_settings)
    extra: dict[str, Any] = {}
    setting_names = set(OrcaSettings.__dataclass_fields__)
    for name, value in kwargs.items():
        if name in setting_names:
            for key, item in _setting_values(name, value).items():
                setattr(settings, key, item)
        elif name == "object_store_memory":
            extra[name] = _object_store_bytes(value)
        elif name in SPARK_OPTIONS or name in CONTEXT_OPTIONS:
            extra[name] = value
        else:
            known = sorted(setting_names | SPARK_OPTIONS | CONTEXT_OPTIONS)
            raise TypeError(f"init_orca_context() got an unknown argument {name!r}; accepted: {known}.")
    spark_options = {k: v for k, v in extra.items() if k in SPARK_OPTIONS}
    build_spark_conf(cluster_mode, cores, memory, num_nodes, conf, **spark_options)
    return settings, extra


def _object_store_bytes(value: Any) -> int | None:
    """``object_store_memory`` in bytes: an int is bytes, a string a size (``"1g"`` is 2**30
    bytes, ``"512m"``, ``"1024k"``; digits alone are bytes); ``None`` leaves Ray's default."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and value.strip().isdigit():
        size = int(value)
    else:
        try:
            size = parse_bytes(value) if isinstance(value, str) else -1
        except ValueError:
            size = -1
    if size <= 0:
        raise ValueError(f"object_store_memory={value!r} is not a size; give bytes as an int (1073741824) or "
                         "a string such as '1g', '512m' or '2G'.")
    return size


def _check_ray_choice(address: str | None, on_spark: bool, on_driver: bool) -> None:
    """At most one way to run Ray: an existing cluster, Ray-on-Spark, or Ray on the driver."""
    chosen = [name for name, on in (("address", bool(address)), ("init_ray_on_spark", on_spark),
                                    ("ray_on_driver", on_driver)) if on]
    if len(chosen) > 1:
        raise ValueError(
            f"{' and '.join(chosen)} were both given; choose one way to run Ray: address='host:port' "
            "(an existing Ray cluster), init_ray_on_spark=True (Ray on the Spark executors) or "
            "ray_on_driver=True (an embedded Ray on the driver alone)."
        )


def release_warm_workers() -> int:
    """End the warm Ray workers that Estimators shut down left for the next Estimator (see
    ``OrcaSettings.warm_workers_s``), so that their CPUs are free for other Ray work now.

    Returns:
        The number of workers ended (0 when none were warm).

    Examples:
        >>> from orca.core import release_warm_workers
        >>> release_warm_workers()  # no Estimator ran: nothing is warm
        0
    """
    return _active.release_warm_workers()


def stop_orca_context() -> None:
    """Stop the active context's Ray and Spark; a no-op when none is running.

    Where Spark runs, ``sc.stop()`` on the SparkContext that :func:`init_orca_context` returned
    does the same.
    """
    _stop_current(keep_jvm=False)


def _stop_current(keep_jvm: bool) -> None:
    """Stop the active context (``keep_jvm``: all but the JVM, see :meth:`OrcaContext._stop`), and a
    JVM an earlier ``SparkSession.stop()`` left."""
    global _current, _jvm_left
    with _lock:
        ctx, _current = _current, None
        left, _jvm_left = _jvm_left, False
    if left and _gateway_process() is not None and (ctx is None or ctx._spark is None):
        _stop_jvm()
        jvm_cache.build_pending()
    if ctx is not None:
        ctx._stop(keep_jvm=keep_jvm)


atexit.register(stop_orca_context)
# the layers below this one (data, engine) reach the running context through orca.core._active
_active.provide(active=OrcaContext.active, current=OrcaContext.current, start=init_orca_context)
