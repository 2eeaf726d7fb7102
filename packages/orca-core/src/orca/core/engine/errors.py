"""Errors the engine raises on the driver."""

from __future__ import annotations


class OrcaWorkerError(RuntimeError):
    """A worker failed; the message carries the worker's own traceback.

    Attributes:
        rank: the failed worker's rank (``None`` when unknown).
        worker_traceback: the traceback text from the worker.
    """

    def __init__(self, message: str, rank: int | None = None, worker_traceback: str = "") -> None:
        super().__init__(message + (f"\n\nWorker traceback:\n{worker_traceback}" if worker_traceback else ""))
        self.rank = rank
        self.worker_traceback = worker_traceback


class WorkerLostError(OrcaWorkerError):
    """A worker's process was lost (killed, crashed, its node or executor gone), as opposed to
    an exception in the user's code: ``fit(..., max_failures=N)`` recovers from these."""


class NotFittedError(RuntimeError):
    """A method that needs a model was called before there was one."""


def check_positive_int(name: str, value: object) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an int of at least 1.

    The one check behind every count argument of the Estimators (``epochs``, ``batch_size``,
    ``workers_per_node``...), so they all refuse bad values with the same message.
    """
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_workers_fit(workers_per_node: int, cpus: int) -> None:
    """Raise a ValueError unless ``workers_per_node`` workers fit a node of ``cpus`` CPUs.

    Every worker holds at least one CPU (a Ray actor's reservation, a Spark barrier task's slot):
    more workers than CPUs would wait for CPUs that never come free.
    """
    if workers_per_node > cpus:
        raise ValueError(f"workers_per_node={workers_per_node} is more than the {cpus} CPU(s) of a node; every "
                         f"worker needs one: use workers_per_node <= {cpus} (or give the context more cores).")
