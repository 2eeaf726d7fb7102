"""The framework side of one worker, and what every framework's worker shares.

A framework package subclasses :class:`Runner`: how to build the model, take a step,
predict a batch, and get or set state. The base class does what every framework repeats:
seeding, joining the group's :class:`~orca.core.sync.SyncGroup` (the small-object
collective of the group, and a parameter-sync transport for frameworks without one of their
own), packed broadcast and all-reduce of named arrays, and the exact lock-step rule for
native loaders. Everything around it (feeding batches in lock-step, merging stats,
callbacks, progress) is :mod:`orca.core.engine.loop`, written once.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core._net import check_reachable
from orca.core.engine.feed import Batch
from orca.core.engine.metrics import Metric
from orca.core.sync.collective import Collective


@dataclass(frozen=True)
class Rendezvous:
    """Where a worker stands in its group.

    Attributes:
        rank: this worker's rank, ``0..world_size-1``.
        world_size: number of workers.
        master_addr: address of rank 0 (for the framework's own process group).
        master_port: a free port on rank 0's host, reserved for the process group.
        counts: training rows each rank holds (same list on every worker).
        host: this worker's host address.
        extra: launcher facts; every launcher sets ``worker_addresses``: each rank's
            ``"host:port"`` with a port reserved for that rank (e.g. for TF_CONFIG), and
            ``sync_port``: another port on rank 0's host, for :mod:`orca.core.sync` (so a
            framework can run its own group and a sync group side by side). The Spark
            launcher adds ``process_outlives_call=True``: its Python workers are reused by
            later tasks, so what a runner opens in place (and cannot close) outlives the call.
    """

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    counts: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    extra: dict[str, Any] = field(default_factory=dict)


def make_rendezvous(rank: int, hosts: Sequence[str], ports: Sequence[int], sync_port: int,
                    counts: Sequence[int] = (), machines: Sequence[str] | None = None, **extra: Any) -> Rendezvous:
    """The rendezvous of ``rank`` in a group whose rank ``r`` runs on ``hosts[r]`` and reserved
    ``ports[r]`` (every launcher builds its ranks' rendezvous here).

    Raises:
        ConnectionError: ``machines`` (each rank's :func:`orca.core._net.machine_id`) shows a rank
            that would connect to a loopback address of another host (a host whose name resolves
            to 127.0.1.1): the message names the address and the fix.
    """
    if machines is not None:
        check_reachable(list(hosts), list(machines))
    facts = {"worker_addresses": [f"{h}:{p}" for h, p in zip(hosts, ports, strict=True)],
             "sync_port": int(sync_port), **extra}
    return Rendezvous(rank=rank, world_size=len(hosts), master_addr=hosts[0], master_port=int(ports[0]),
                      counts=tuple(int(c) for c in counts), host=hosts[rank], extra=facts)


def solo_runner(runner_cls: type[Runner], spec: dict[str, Any], state: Any, threads: int = 1) -> Runner:
    """A runner of a group of one (inference on an executor, the driver's copy of the model)."""
    runner = runner_cls(dict(spec, threads=threads))
    runner.setup(Rendezvous(rank=0, world_size=1, master_addr="", master_port=0))
    if state is not None:
        runner.set_state(state)
    return runner


def pack(arrays: Sequence[np.ndarray], dtype: Any = np.float64) -> np.ndarray:
    """One flat, contiguous ``dtype`` buffer holding ``arrays`` one after the other."""
    if not arrays:
        return np.zeros(0, dtype)
    return np.concatenate([np.asarray(a, dtype=dtype).reshape(-1) for a in arrays])


def unpack(flat: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Split ``flat`` (from :func:`pack`) back into arrays of ``like``'s shapes and dtypes."""
    out, offset = [], 0
    for a in like:
        n = int(np.prod(np.shape(a)))
        out.append(flat[offset:offset + n].reshape(np.shape(a)).astype(np.asarray(a).dtype, copy=False))
        offset += n
    return out


class Runner(abc.ABC):
    """One worker's model, optimizer and loss. Subclassed once per framework.

    Subclasses call ``super().setup(rendezvous)`` first in their ``setup``; afterwards
    ``self.rank``, ``self.world``, ``self.threads`` and (in a group of several workers that
    trains) ``self.group``, the group's :class:`~orca.core.sync.SyncGroup`, are set, and
    numpy and the framework (:meth:`seed_framework`) are seeded.

    Args:
        spec: the framework's picklable description of what to build (creators, config).
    """

    #: set by a callback (e.g. early stopping) to end ``fit`` after the current epoch.
    stop_training: bool = False
    #: False for inference-only runners: they join no sync group.
    trains: bool = True
    #: modules a child process hosting this runner imports ahead of time (see :meth:`needs_child`)
    child_preload: tuple[str, ...] = ()
    #: address space (MB) the framework maps in this process after the share has loaded (its
    #: import and runtime, where they come later), kept free under an address-space limit (see
    #: :mod:`orca.core.engine.addrspace`)
    address_space_mb: int = 0
    #: True when a process that hosted one runner of this class (its model, its process group,
    #: shut down) can host the next one, of another Estimator: the ``ray`` backend then keeps an
    #: Estimator's actors warm after ``shutdown()`` for the next Estimator of the same framework and
    #: size (``OrcaSettings.warm_workers_s``), which skips the process start and framework import
    reuses_process: bool = False
    group: Any = None

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.config: dict[str, Any] = dict(spec.get("config") or {})
        self.rendezvous: Rendezvous | None = None
        self.rank, self.world = 0, 1
        self.threads = int(spec.get("threads", 1))
        self.timeout_s = float(spec.get("timeout_s", 600.0))

    # -------------------------------------------------------------- lifecycle
    @classmethod
    def needs_child(cls, spec: dict[str, Any], rendezvous: Rendezvous) -> bool:
        """True when this process cannot host the runner and a fresh child process must
        (e.g. TensorFlow configures its collectives once per process). Default: never.

        In one group some ranks may be hosted in a child and others in place, so the runner's
        ``setup`` must wait on its peers in the order a child's does: everything the framework's
        own collective needs first, then :meth:`join_group` last (a child's parent joins the sync
        group after the child has set up).
        """
        return False

    def setup(self, rendezvous: Rendezvous) -> None:
        """Build the model and join the group. Subclasses call this first (or, to wait on
        their framework's collective before the sync group, :meth:`begin_setup` first and
        :meth:`join_group` last)."""
        self.begin_setup(rendezvous)
        self.join_group()

    def begin_setup(self, rendezvous: Rendezvous) -> None:
        """Take this worker's place in ``rendezvous`` and seed the generators (no peer waits)."""
        self.rendezvous = rendezvous
        self.rank, self.world = rendezvous.rank, rendezvous.world_size
        seed = self.spec.get("seed")
        if seed is not None:
            np.random.seed(int(seed))
            self.seed_framework(int(seed))

    def join_group(self) -> None:
        """Join the group's sync layer (:mod:`orca.core.sync`); waits for every peer."""
        rendezvous = self.rendezvous
        if rendezvous is not None and self.world > 1 and self.trains and not self.spec.get("in_child") \
                and self.group is None:
            # a child's parent holds the group (see orca.core.engine.child)
            from orca.core.sync import SyncGroup

            self.group = SyncGroup.from_rendezvous(rendezvous, token=self.spec.get("sync_token"),
                                                   timeout_s=self.timeout_s)

    def seed_framework(self, seed: int) -> None:  # noqa: B027 - an optional hook
        """Seed the framework's random generators (numpy's is seeded already)."""

    def shutdown(self) -> None:
        """Leave the group and free resources; subclasses call this last."""
        if self.group is not None:
            self.group.close()
            self.group = None

    # -------------------------------------------------------------- group helpers
    def collective(self) -> Collective | None:
        """The group's small-object collective (``None`` for a group of one)."""
        return self.group

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Rank 0's ``arrays`` on every rank (one packed float64 broadcast; dtypes kept)."""
        if self.group is None or not arrays:
            return list(arrays)
        flat = pack(arrays)
        self.group.broadcast(flat)
        return unpack(flat, arrays)

    def allreduce_mean_(self, flat: np.ndarray) -> np.ndarray:
        """Replace the float32/float64 buffer ``flat`` in place by its mean over the group."""
        if self.group is not None:
            self.group.allreduce(flat, op="mean")
        return flat

    def lockstep(self, batches: Iterable[Batch], training: bool = True) -> Iterator[Batch]:
        """This rank's native batches, in lock-step with the other ranks.

        Every rank takes the same number of steps: before each step the ranks exchange the
        size of their next batch; a rank that ran out takes an empty step, and each batch is
        weighted by its share of that step's global batch. No row is duplicated or dropped, so a
        step's averaged gradient is exactly the global batch's.
        """
        if self.world == 1 or self.group is None or not training:
            for b in batches:
                yield Batch(x=b.x, y=b.y, size=b.size, weight=1.0, global_size=b.size)
            return
        it = iter(batches)
        while True:
            batch = next(it, None)
            sizes = self.group.allgather(batch.size if batch is not None else -1)
            if all(s < 0 for s in sizes):
                return
            global_rows = int(sum(s for s in sizes if s > 0))
            if batch is None or batch.size == 0:
                yield Batch(x=[], y=[], size=0, weight=0.0, global_size=global_rows)
            else:
                yield Batch(x=batch.x, y=batch.y, size=batch.size, weight=batch.size * self.world / global_rows,
                            global_size=global_rows)

    # -------------------------------------------------------------- steps
    #: True when :meth:`train_batch` takes ``skip_non_finite`` (``fit(skip_non_finite_steps=True)``)
    can_skip_steps: bool = False

    @abc.abstractmethod
    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        """Take one synchronised training step; return the batch's mean loss (0.0 if empty).

        With ``skip_non_finite`` (only passed where :attr:`can_skip_steps` is True), a step whose
        gradient, reduced over the group, holds a NaN or an infinity is not applied (optimizer
        state included) and ``None`` is returned. Every rank holds the same reduced gradient,
        so every rank skips the same steps: decide on the reduced gradient, never on this rank's
        loss.
        """

    @abc.abstractmethod
    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        """Return the batch's mean loss and the model's outputs as numpy arrays."""

    def update_metrics(self, metrics: Sequence[Metric], outputs: list[np.ndarray], batch: Batch) -> None:
        """Fold one evaluated batch into ``metrics``: by default each metric's ``update`` with the first
        output and the first target (a batch without targets adds nothing).

        Args:
            metrics: the evaluation's metrics (this worker's accumulators).
            outputs: what :meth:`eval_batch` returned for ``batch``.
            batch: the batch just evaluated.
        """
        if not batch.y or batch.y[0] is None:
            return
        pred, target = np.asarray(outputs[0]), np.asarray(batch.y[0])
        for m in metrics:
            m.update(pred, target)

    @abc.abstractmethod
    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        """Return the model's outputs for ``batch.x`` as numpy arrays (one per output)."""

    def predict_batches(self, batches: Iterable[Batch]) -> Iterator[list[np.ndarray]]:
        """Outputs of every batch, in order (one list of arrays per batch).

        The default calls :meth:`predict_batch` one batch at a time; a framework with an
        asynchronous runtime overrides it to keep several batches in flight.
        """
        for batch in batches:
            yield self.predict_batch(batch)

    def native_batches(self, creator: Any, batch_size: int, training: bool,
                       steps: int | None = None) -> Iterable[Batch]:
        """This rank's batches from a data-creator ``f(config, batch_size)``.

        Frameworks override this to read their native loaders, sharded for this rank (no
        padding: the engine passes them through :meth:`lockstep`). ``steps`` caps the
        batches of one pass when the user gave ``steps_per_epoch``/``validation_steps``.
        """
        raise TypeError(f"{type(self).__name__} does not take data-creator functions.")

    def metric_states(self) -> Any:
        """The framework's own metrics accumulated since the last call, then reset (optional).

        Return plain data (numbers, lists, dicts, numpy arrays) that :meth:`merge_metric_states`
        can merge exactly across workers (e.g. each metric's sum and count), or ``None`` when the
        framework keeps none. The engine reads them after each training epoch and around each
        evaluation.
        """
        return None

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        """Merge every worker's :meth:`metric_states` into ``{metric name: value}``."""
        return {}

    def on_epoch_end(self, epoch: int) -> None:  # noqa: B027 - an optional hook
        """Framework work at the end of an epoch (LR scheduler step, buffer sync)."""

    def optimizer_params(self) -> dict[str, Any]:
        """The optimizer's name and hyper-parameters as this worker built it (``{"optimizer": "SGD",
        "lr": 0.05, "momentum": 0.9, ...}``), for MLflow's run parameters: rank 0 reports them to the
        driver as a fit begins (see :func:`orca.core.engine.tracking.hyperparameters`, which keeps
        the scalar ones). Frameworks override it; the default reports none."""
        return {}

    # -------------------------------------------------------------- state
    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Return the training state (model, and optimizer where there is one)."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`get_state`."""

    def weights(self) -> list[np.ndarray]:
        """The model's trainable weights as numpy arrays (used to check workers agree)."""
        return []

    def weights_digest(self) -> str:
        """A digest of :meth:`weights`: equal on two workers iff their weights are bit-identical."""
        import hashlib

        h = hashlib.sha256()
        for w in self.weights():
            h.update(np.ascontiguousarray(w).tobytes())
        return h.hexdigest()

    def save_checkpoint(self, path: str, epoch: int, meta: dict[str, Any] | None = None) -> None:
        """Write a checkpoint (state plus ``epoch``, and ``meta``: what the fit's checkpoints carry
        besides the state, e.g. its MLflow run) to ``path`` (local or fsspec URL), in Orca's
        non-executable format (:mod:`orca.core.engine.checkpoint`)."""
        from orca.core.engine.checkpoint import write_checkpoint

        write_checkpoint(path, epoch, self.get_state(), meta=meta)
