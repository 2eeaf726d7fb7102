"""A runner in a fresh child process, for a worker whose process can no longer join a strategy.

TF configures collective ops once per process, before its first op. A reused Spark Python
worker that already ran TF (an earlier ``fit``, a prediction) cannot join a new
MultiWorkerMirroredStrategy, so its runner runs in a spawned child and the parent forwards
each call (batches in, losses and states out) over a pipe. The child costs one TF import.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any

import cloudpickle

from orca.core.engine.runner import Rendezvous


def _serve(conn: Any, spec_blob: bytes, rendezvous: Rendezvous) -> None:
    from orca.tf.runner import KerasRunner

    try:
        runner = KerasRunner(dict(cloudpickle.loads(spec_blob), in_child=True))
        runner.setup(rendezvous)
        conn.send((True, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send((False, "".join(traceback.format_exception(exc))))
        return
    while True:
        name, args = cloudpickle.loads(conn.recv_bytes())
        if name == "__exit__":
            return
        try:
            result = (True, getattr(runner, name)(*args))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = (False, f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)))
        conn.send_bytes(cloudpickle.dumps(result))


class ChildProcess:
    """A spawned process hosting a ``KerasRunner``; :meth:`call` runs one of its methods."""

    def __init__(self, spec: dict[str, Any], rendezvous: Rendezvous, timeout_s: float) -> None:
        ctx = mp.get_context("spawn")
        self.timeout_s = timeout_s
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child_conn, cloudpickle.dumps(spec), rendezvous),
                                   daemon=True)
        self.process.start()
        ok, err = self._recv(lambda: self.conn.recv(), "setup")
        if not ok:
            self.close()
            raise RuntimeError(f"the TF worker process failed to start:\n{err}")

    def _recv(self, read: Any, what: str) -> Any:
        if not self.conn.poll(self.timeout_s):
            self.close()
            raise TimeoutError(f"the TF worker process did not answer {what} within {self.timeout_s:.0f}s.")
        return read()

    def call(self, name: str, *args: Any) -> Any:
        """Run ``runner.name(*args)`` in the child; re-raise its error here."""
        self.conn.send_bytes(cloudpickle.dumps((name, args)))
        ok, value = cloudpickle.loads(self._recv(self.conn.recv_bytes, name))
        if not ok:
            first = value.splitlines()[0]
            exc_type = {"ValueError": ValueError, "TypeError": TypeError}.get(first.split(":")[0], RuntimeError)
            raise exc_type(f"{first.split(': ', 1)[-1]}\n\nTF worker process traceback:\n{value}")
        return value

    def close(self) -> None:
        """Ask the child to exit; kill it if it does not."""
        try:
            self.conn.send_bytes(cloudpickle.dumps(("__exit__", ())))
        except (OSError, ValueError):
            pass
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
