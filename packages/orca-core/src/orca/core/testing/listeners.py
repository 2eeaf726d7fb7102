"""What a running job listens on: the listening TCP sockets of this process and all its
descendants (Spark's JVM and Python workers, Ray's daemons and actors, child drivers), sampled
in the background while a block runs.

Used by the security tests that check a local-mode fit listens on loopback only::

    with ListenerSampler() as sampler:
        est.fit(...)
    assert not sampler.exposed(), sampler.exposed()

A sync group's listener is open only during its rendezvous; :class:`Straggler` (mixed into a
framework's runner) holds rank 1 back for a few seconds so that it is open long enough to be
seen, and has rank 0 write where it is.

Needs ``psutil`` (orca-core's ``test`` extra).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import psutil

from orca.core.engine.runner import Rendezvous

LOOPBACK = frozenset({"127.0.0.1", "::ffff:127.0.0.1", "::1"})


class Listener(NamedTuple):
    """One listening socket: the process that holds it and its local address."""

    pid: int
    name: str
    ip: str
    port: int


def listeners(procs: Iterable[psutil.Process]) -> set[Listener]:
    """The listening inet sockets of ``procs`` (processes that exited meanwhile are skipped)."""
    out: set[Listener] = set()
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add(Listener(p.pid, p.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def job_listeners() -> set[Listener]:
    """The listeners of this process and all its descendants, now."""
    me = psutil.Process()
    return listeners([me, *me.children(recursive=True)])


class ListenerSampler:
    """Samples the listeners of this process and its descendants every ``interval_s`` while the
    ``with`` block runs (and once more at its end); :attr:`seen` has every one seen.

    Args:
        interval_s: time between two samples.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.seen: set[Listener] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orca-listener-sampler", daemon=True)

    def sample(self) -> None:
        """Take one sample now."""
        self.seen.update(job_listeners())

    def _run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval_s)

    def __enter__(self) -> ListenerSampler:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join(30)
        self.sample()

    @property
    def ports(self) -> set[int]:
        """Every port seen listening."""
        return {s.port for s in self.seen}

    def exposed(self, except_ports: Iterable[int] = ()) -> list[Listener]:
        """Listeners seen on an address other than loopback, but for ``except_ports``."""
        allowed = set(except_ports)
        return sorted(s for s in self.seen if s.ip not in LOOPBACK and s.port not in allowed)



class Straggler:
    """Runner mixin: rank 0 writes its rendezvous facts (host, sync port, master port, every
    rank's reserved address) as JSON to ``config["rdv_file"]`` when it sets up; rank 1 joins the
    sync group :attr:`join_delay_s` late (after its framework's own collective, if any), so the
    group's rendezvous listener stays open that long. Mix it in before the runner class
    (``class SlowRunner(Straggler, TorchRunner)``)."""

    config: dict[str, Any]
    rendezvous: Rendezvous | None
    group: Any
    join_delay_s = 4.0

    def setup(self, rendezvous: Rendezvous) -> None:
        if rendezvous.rank == 0:
            facts = {"host": rendezvous.master_addr, "sync_port": rendezvous.extra["sync_port"],
                     "master_port": rendezvous.master_port, "pid": os.getpid(),
                     "worker_addresses": list(rendezvous.extra.get("worker_addresses") or [])}
            Path(self.config["rdv_file"]).write_text(json.dumps(facts))
        super().setup(rendezvous)  # type: ignore[misc]

    def join_group(self) -> None:
        if self.rendezvous is not None and self.rendezvous.rank == 1 and self.group is None:
            time.sleep(self.join_delay_s)
        super().join_group()  # type: ignore[misc]


def with_straggler(estimator_cls: type[Any]) -> type[Any]:
    """A subclass of ``estimator_cls`` whose every built backend runs a :class:`Straggler` version
    of its runner (the class travels to the workers by value: it is made here, not importable)."""
    from orca.core.engine.backend import Backend, declare

    slow = []
    for b in estimator_cls.backends.values():
        if b.planned:
            continue
        runner = b.runner_cls()
        slow_runner = type(f"Straggling{runner.__name__}", (Straggler, runner), {})
        slow.append(Backend(b.name, b.launcher, slow_runner, f"{b.description} (rank 1 joins late)", b.requires,
                            b.install))
    return type(f"Straggling{estimator_cls.__name__}", (estimator_cls,), {"backends": declare(*slow)})


def listeners_of_a_fit(est: Any, fit: Callable[[], Any], rdv_file: str | Path) -> tuple[ListenerSampler, dict[str, Any]]:
    """Runs ``fit()`` of ``est`` (a :func:`with_straggler` Estimator writing to ``rdv_file``) under a
    :class:`ListenerSampler`, shuts ``est`` down, and checks that the sync group's listener was seen
    (so the sample is not empty by chance). Returns the sampler and rank 0's rendezvous facts."""
    try:
        with ListenerSampler() as sampler:
            fit()
    finally:
        est.shutdown()
    facts = read_facts(rdv_file, timeout_s=5)
    assert facts["sync_port"] in sampler.ports, f"the sync listener was not seen: {sorted(sampler.seen)}"
    return sampler, facts


def still_listening(ports: Iterable[int], timeout_s: float) -> set[Listener]:
    """Waits up to ``timeout_s`` for this process and its descendants to stop listening on
    ``ports``; returns the listeners still open then (empty: all closed)."""
    ports = set(ports)
    deadline = time.monotonic() + timeout_s
    while True:
        left = {s for s in job_listeners() if s.port in ports}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def read_facts(path: str | Path, timeout_s: float = 120) -> dict[str, Any]:
    """The facts a :class:`Straggler` rank 0 wrote to ``path``, waiting up to ``timeout_s``."""
    path = Path(path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return dict(json.loads(path.read_text()))
        time.sleep(0.02)
    raise TimeoutError(f"rank 0 never wrote {path}")
