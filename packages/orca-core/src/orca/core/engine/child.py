"""A runner hosted in a fresh child process, its calls forwarded over a pipe.

Some frameworks configure process-wide state once, before their first op, and never again:
TensorFlow's collective ops (one ``MultiWorkerMirroredStrategy`` per process), for example. A
reused Spark Python worker that already ran such a framework (an earlier ``fit``, a
prediction) cannot join a new group, so its runner runs in a spawned child and the worker
forwards each call (batches in, losses and states out).

A child costs a fresh interpreter and the framework's import (seconds for TF). So that a
worker fitting again and again does not pay it every time, :func:`start_child` keeps one
*spare* per worker process: a child that has already imported ``preload`` and waits for its
runner. The next call takes the spare and starts the next spare in the background. A spare
exits when its parent does (its pipe closes).

This module is framework-neutral: the runner class and the modules to preload are the
framework package's.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import threading
import traceback
from collections.abc import Sequence
from typing import Any

import cloudpickle

from orca.core.engine.feed import Batch
from orca.core.engine.runner import Rendezvous, Runner

#: errors a child's traceback is re-raised as on the parent side (by the exception's name)
_KNOWN = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError,
          "NotImplementedError": NotImplementedError}


def _exit_with_parent(parent: int, every_s: float = 0.5) -> None:
    """End this process once ``parent`` has gone (checked every ``every_s`` from a daemon thread).

    A child busy in user code never reads its pipe, so it would not see its parent die: a Spark
    Python worker killed for a stalled task (or by the OOM killer) would leave its child running
    with the model, its memory and its threads, until the machine restarts.
    """
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="orca-exit-with-parent", daemon=True).start()


def _serve(conn: Any, preload: Sequence[str], parent: int | None = None) -> None:
    """The child's loop: preload, wait for the runner, then answer calls until told to exit."""
    if parent is not None:
        _exit_with_parent(parent)
    try:
        for name in preload:
            importlib.import_module(name)
        conn.send(("ready", None))
        job = cloudpickle.loads(conn.recv_bytes())
        if job[0] == "__exit__":  # a spare closed before it got a runner
            return
        runner_cls, spec, rendezvous = job
        runner = runner_cls(dict(spec, in_child=True))  # its parent holds the sync group
        runner.setup(rendezvous)
        conn.send((True, None))
    except (EOFError, OSError):  # the parent went away while this was a spare
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send((False, "".join(traceback.format_exception(exc))))
        return
    while True:
        try:
            name, args = cloudpickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if name == "__exit__":
            try:
                runner.shutdown()
            except BaseException:  # noqa: BLE001 - the child exits either way
                traceback.print_exc()
            return
        try:
            result = (True, getattr(runner, name)(*args))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = (False, f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)))
        conn.send_bytes(cloudpickle.dumps(result))


class ChildProcess:
    """A spawned process that will host one runner; :meth:`call` runs one of its methods.

    Args:
        preload: modules the child imports before it is handed a runner.
        timeout_s: the bound on every answer the parent waits for.
        what: how errors name the child ("the TF worker process").
    """

    def __init__(self, preload: Sequence[str] = (), timeout_s: float = 600.0, what: str = "the worker process") -> None:
        ctx = mp.get_context("spawn")
        self.timeout_s = timeout_s
        self.what = what
        self.preload = tuple(preload)
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child_conn, self.preload, os.getpid()), daemon=True)
        self.process.start()
        child_conn.close()  # the child's end lives in the child: its exit then reads as EOF here
        self._ready = False

    def host(self, runner_cls: type, spec: dict[str, Any], rendezvous: Rendezvous) -> ChildProcess:
        """Build ``runner_cls(spec)`` in the child and set it up for ``rendezvous``; returns ``self``."""
        if not self._ready:
            self._expect("ready", "start")
        self.conn.send_bytes(cloudpickle.dumps((runner_cls, spec, rendezvous)))
        ok, err = self._recv(self.conn.recv, "setup")
        if not ok:
            self.close()
            raise RuntimeError(f"{self.what} failed to start:\n{err}")
        return self

    def _expect(self, tag: str, what: str) -> None:
        got, _ = self._recv(self.conn.recv, what)
        if got != tag:
            self.close()
            raise RuntimeError(f"{self.what} sent {got!r} instead of {tag!r} at {what}.")
        self._ready = True

    def _recv(self, read: Any, what: str) -> Any:
        try:
            if not self.conn.poll(self.timeout_s):
                self.close()
                raise TimeoutError(f"{self.what} did not answer {what} within {self.timeout_s:.0f}s.")
            return read()
        except (EOFError, OSError) as exc:
            code = self.process.exitcode
            self.close()
            raise RuntimeError(f"{self.what} exited during {what} (exit code {code}).") from exc

    def call(self, name: str, *args: Any) -> Any:
        """Run ``runner.name(*args)`` in the child; re-raise its error here."""
        try:
            self.conn.send_bytes(cloudpickle.dumps((name, args)))
        except OSError as exc:  # the child is gone
            code = self.process.exitcode
            self.close()
            raise RuntimeError(f"{self.what} exited before {name} (exit code {code}).") from exc
        ok, value = cloudpickle.loads(self._recv(self.conn.recv_bytes, name))
        if not ok:
            first = value.splitlines()[0]
            exc_type = _KNOWN.get(first.split(":")[0], RuntimeError)
            raise exc_type(f"{first.split(': ', 1)[-1]}\n\n{self.what} traceback:\n{value}")
        return value

    def alive(self) -> bool:
        return self.process.is_alive()

    def close(self) -> None:
        """Ask the child to exit (its runner shuts down); kill it if it does not."""
        try:
            self.conn.send_bytes(cloudpickle.dumps(("__exit__", ())))
        except (OSError, ValueError):
            pass
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


_spares: dict[tuple[str, ...], ChildProcess] = {}
_spares_lock = threading.Lock()


def start_child(runner_cls: type, spec: dict[str, Any], rendezvous: Rendezvous, *, preload: Sequence[str] = (),
                timeout_s: float = 600.0, what: str = "the worker process", keep_spare: bool = True) -> ChildProcess:
    """A child process hosting ``runner_cls(spec)`` set up for ``rendezvous``.

    Takes this process's spare child when one has preloaded the same modules (else spawns
    one), then, with ``keep_spare``, spawns the next spare so the following call finds it ready.

    Raises:
        RuntimeError: the runner failed to build or set up in the child (with its traceback).
        TimeoutError: the child did not answer within ``timeout_s``.
    """
    key = tuple(preload)
    with _spares_lock:
        child = _spares.pop(key, None)
    if child is None or not child.alive():
        child = ChildProcess(preload, timeout_s, what)
    child.timeout_s, child.what = timeout_s, what
    if keep_spare:
        spare = ChildProcess(preload, timeout_s, what)  # imports while this child sets up and trains
        with _spares_lock:
            old = _spares.pop(key, None)
            _spares[key] = spare
        if old is not None:
            old.close()
    return child.host(runner_cls, spec, rendezvous)


def drop_spares() -> None:
    """Close this process's spare children (tests; a worker that will not fit again)."""
    with _spares_lock:
        spares = list(_spares.values())
        _spares.clear()
    for child in spares:
        child.close()


class ChildRunner(Runner):
    """Stands in for a runner hosted in a child process (see :meth:`Runner.needs_child`).

    The group's sync layer and the reading of native loaders stay in this process (they need
    no framework state); every other call goes to the child's runner. Methods a framework
    adds (``runner.begin_fit(...)`` from its callbacks) are forwarded by name.
    """

    def __init__(self, runner_cls: type[Runner], spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.runner_cls = runner_cls
        #: a copy of the runner in this process, never set up: it reads native loaders
        self.local = runner_cls(spec)
        self.child: ChildProcess | None = None

    def setup(self, rendezvous: Rendezvous) -> None:
        # The child's runner sets up first (its framework's collective), then this process joins
        # the sync group: the order a runner hosted in-process keeps (Runner.needs_child), so
        # ranks hosted here and ranks hosted in place wait for each other in the same order.
        self.child = start_child(self.runner_cls, self.spec, rendezvous, preload=self.runner_cls.child_preload,
                                 timeout_s=self.timeout_s, what=f"the {self.runner_cls.__name__} worker process")
        super().setup(rendezvous)
        self.local.rendezvous, self.local.rank, self.local.world = rendezvous, self.rank, self.world
        self.local.group = self.group

    def shutdown(self) -> None:
        if self.child is not None:
            self.child.close()  # the child's runner shuts down with it
            self.child = None
        super().shutdown()

    def _call(self, name: str, *args: Any) -> Any:
        if self.child is None:
            raise RuntimeError(f"{self.runner_cls.__name__}: the worker process is not running.")
        return self.child.call(name, *args)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "child" not in self.__dict__:
            raise AttributeError(name)
        return lambda *args: self._call(name, *args)

    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        return self._call("train_batch", batch, True) if skip_non_finite else self._call("train_batch", batch)

    def eval_batch(self, batch: Batch) -> tuple[float, list[Any]]:
        return self._call("eval_batch", batch)

    def predict_batch(self, batch: Batch) -> list[Any]:
        return self._call("predict_batch", batch)

    def native_batches(self, creator: Any, batch_size: int, training: bool, steps: int | None = None) -> Any:
        return self.local.native_batches(creator, batch_size, training, steps)

    def metric_states(self) -> Any:
        return self._call("metric_states")

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        return self._call("merge_metric_states", states)

    def on_epoch_end(self, epoch: int) -> None:
        self._call("on_epoch_end", epoch)

    def get_state(self) -> dict[str, Any]:
        return self._call("get_state")

    def set_state(self, state: dict[str, Any]) -> None:
        self._call("set_state", state)

    def weights(self) -> list[Any]:
        return self._call("weights")

    def weights_digest(self) -> str:
        return self._call("weights_digest")

    def optimizer_params(self) -> dict[str, Any]:
        return self._call("optimizer_params")

    def save_checkpoint(self, path: str, epoch: int, meta: dict[str, Any] | None = None) -> None:
        self._call("save_checkpoint", path, epoch, meta)


def host_runner(runner_cls: type[Runner], spec: dict[str, Any], rendezvous: Rendezvous) -> Runner:
    """Build and set up ``runner_cls(spec)`` for ``rendezvous``: here, or in a child process when
    the runner says this process cannot host it. Every launcher builds its runners here."""
    runner = ChildRunner(runner_cls, spec) if runner_cls.needs_child(spec, rendezvous) else runner_cls(spec)
    runner.setup(rendezvous)
    return runner
