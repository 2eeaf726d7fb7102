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


class NotFittedError(RuntimeError):
    """A method that needs a model was called before there was one."""
