"""The framework side of one worker, and the small things every worker shares.

A framework package subclasses :class:`Runner`: how to build the model, take a step,
predict a batch, and get or set state. Everything around it — feeding batches in
lock-step, merging stats, callbacks, progress — is :mod:`orca.core.engine.loop`, written once.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core.engine.feed import Batch


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
        extra: backend-specific facts; every backend sets ``worker_addresses``: each rank's
            ``"host:port"`` with a port reserved for that rank (e.g. for TF_CONFIG), and
            ``sync_port``: another port on rank 0's host, for :mod:`orca.core.sync` (so a
            framework can run its own group and a sync group side by side).
    """

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    counts: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    extra: dict[str, Any] = field(default_factory=dict)


class Collective(abc.ABC):
    """Small-object collectives among the workers of a group (stats, flags), not tensors."""

    @abc.abstractmethod
    def allgather(self, obj: Any) -> list[Any]:
        """Return every rank's ``obj``, indexed by rank."""

    def barrier(self) -> None:
        """Wait until every rank arrives."""
        self.allgather(None)


class SoloCollective(Collective):
    """The collective of a group of one."""

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]


def solo_runner(runner_cls: type[Runner], spec: dict[str, Any], state: Any, threads: int = 1) -> Runner:
    """A runner of a group of one (inference on an executor, the driver's copy of the model)."""
    runner = runner_cls(dict(spec, threads=threads))
    runner.setup(Rendezvous(rank=0, world_size=1, master_addr="", master_port=0))
    if state is not None:
        runner.set_state(state)
    return runner


class Runner(abc.ABC):
    """One worker's model, optimizer and loss. Subclassed once per framework.

    Args:
        spec: the framework's picklable description of what to build (creators, config).
    """

    #: set by a callback (e.g. early stopping) to end ``fit`` after the current epoch.
    stop_training: bool = False

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.config: dict[str, Any] = dict(spec.get("config") or {})
        self.rendezvous: Rendezvous | None = None

    # -------------------------------------------------------------- lifecycle
    def setup(self, rendezvous: Rendezvous) -> None:
        """Build the model and join the framework's synchronisation with the other workers."""
        self.rendezvous = rendezvous

    def shutdown(self) -> None:  # noqa: B027 - an optional hook
        """Leave the process group and free resources."""

    # -------------------------------------------------------------- steps
    @abc.abstractmethod
    def train_batch(self, batch: Batch) -> float:
        """Take one synchronised training step; return the batch's mean loss (0.0 if empty)."""

    @abc.abstractmethod
    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        """Return the batch's mean loss and the model's outputs as numpy arrays."""

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

    def collective(self) -> Collective | None:
        """The framework's own small-object collective, if it has one.

        The engine prefers it to the backend's (Spark's ``allGather`` polls once a second).
        """
        return None

    def native_batches(self, creator: Any, batch_size: int, training: bool) -> Iterable[Batch]:
        """Batches from a data-creator ``f(config, batch_size)``, sharded for this rank.

        Frameworks override this to read their native loaders; every rank must yield the
        same number of batches.
        """
        raise TypeError(f"{type(self).__name__} does not take data-creator functions.")

    def metric_states(self) -> Any:
        """The framework's own metrics accumulated since the last call, then reset (optional).

        Return picklable states that :meth:`merge_metric_states` can merge exactly across
        workers (e.g. each metric's sum and count), or ``None`` when the framework keeps none.
        The engine reads them after each training epoch and around each evaluation.
        """
        return None

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        """Merge every worker's :meth:`metric_states` into ``{metric name: value}``."""
        return {}

    def on_epoch_end(self, epoch: int) -> None:  # noqa: B027 - an optional hook
        """Framework work at the end of an epoch (LR scheduler step, buffer sync)."""

    # -------------------------------------------------------------- state
    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Return the picklable training state (model, and optimizer where there is one)."""

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

    def save_checkpoint(self, path: str, epoch: int) -> None:
        """Write a checkpoint (state plus ``epoch``) to ``path`` (local or fsspec URL)."""
        import cloudpickle
        import fsspec

        with fsspec.open(path, "wb") as fh:
            cloudpickle.dump({"epoch": epoch, "state": self.get_state()}, fh)
