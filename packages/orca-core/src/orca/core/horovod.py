"""Horovod's gloo controller started from Orca's rendezvous: no MPI, no ``horovodrun``.

``horovodrun --gloo`` does three things before a worker's ``hvd.init()``: it serves an HTTP
key-value store where the ranks meet (the rendezvous), tells every process its place in the job
(``HOROVOD_RANK``, ``HOROVOD_LOCAL_RANK``, ``HOROVOD_CROSS_RANK``... ), and names the network
interface gloo binds to. Orca's workers already know their places (a :class:`Rendezvous`), so a
framework runner's Horovod backend does the same with this module and its own sync group:

1. :func:`serve` on rank 0: Horovod's rendezvous store, bound to rank 0's address (127.0.0.1 in
   local mode, never every interface) on the port the launcher reserved for the framework's
   group, answering only the job's worker hosts;
2. the sync group's barrier, so no rank asks the store before it serves;
3. :func:`environment` into ``os.environ``, then the framework's ``hvd.init()``
   (:func:`join` does the three; :func:`leave` ends it).

Nothing here imports an ML framework: ``horovod.runner`` is Horovod's framework-free launcher.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orca.core.engine.runner import Rendezvous


@dataclass(frozen=True)
class Slot:
    """One rank's place in a Horovod job, as ``horovodrun`` computes it (rank-major, hosts in
    order of their first rank)."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def worker_hosts(rendezvous: Rendezvous) -> list[str]:
    """Each rank's host, from the launcher's ``worker_addresses``."""
    addresses = list(rendezvous.extra.get("worker_addresses") or [])
    if len(addresses) != rendezvous.world_size:
        raise RuntimeError("the rendezvous lacks worker_addresses for every rank; upgrade orca-core.")
    return [a.rsplit(":", 1)[0] for a in addresses]


def slots(hosts: Sequence[str]) -> list[Slot]:
    """The Horovod slot of each rank, for ranks running on ``hosts`` (one entry per rank)."""
    local_ranks: list[int] = []
    per_host: dict[str, int] = {}
    for h in hosts:
        local_ranks.append(per_host.get(h, 0))
        per_host[h] = local_ranks[-1] + 1
    out = []
    for rank, (h, lr) in enumerate(zip(hosts, local_ranks, strict=True)):
        # the cross group of local rank ``lr``: the hosts that have such a rank, in order
        cross = [x for x in dict.fromkeys(hosts) if per_host[x] > lr]
        out.append(Slot(hostname=h, rank=rank, local_rank=lr, cross_rank=cross.index(h), size=len(hosts),
                        local_size=per_host[h], cross_size=len(cross)))
    return out


def interface_of(address: str) -> str:
    """The network interface holding ``address`` (gloo binds to an interface, not an address)."""
    if address.startswith("127."):
        return "lo"
    import psutil  # a dependency of Horovod

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            return name
    raise RuntimeError(f"no network interface of this host has the address {address} the workers meet on; "
                       "set OrcaContext's node address to one of this host's addresses.")


def environment(rendezvous: Rendezvous, timeout_s: float) -> dict[str, str]:
    """What ``hvd.init()`` reads in this rank's process, from the rendezvous."""
    slot = slots(worker_hosts(rendezvous))[rendezvous.rank]
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous.master_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous.master_port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": interface_of(rendezvous.host),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(max(1, int(timeout_s))),
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }


class RendezvousStore:
    """Horovod's HTTP rendezvous store on rank 0, bound to one address, answering only the job's hosts.

    Horovod's store has no authentication of its own (``horovodrun`` serves it on every
    interface); this one refuses connections from any host that runs none of the job's ranks.
    """

    def __init__(self, rendezvous: Rendezvous) -> None:
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        hosts = worker_hosts(rendezvous)
        allowed = set(hosts) | ({"127.0.0.1"} if rendezvous.master_addr.startswith("127.") else set())

        class _Server(RendezvousHTTPServer):  # type: ignore[misc]
            def verify_request(self, request: Any, client_address: Any) -> bool:
                return bool(client_address[0] in allowed)

        _Server.allow_reuse_address = True
        self._httpd = _Server((rendezvous.master_addr, int(rendezvous.master_port)), RendezvousHandler, False)
        self._httpd.daemon_threads = True
        self._httpd.init([SlotInfo(s.hostname, s.rank, s.local_rank, s.cross_rank, s.size, s.local_size,
                                   s.cross_size) for s in slots(hosts)])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="orca-horovod-rendezvous",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """The ``(host, port)`` it listens on."""
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start(rendezvous: Rendezvous, barrier: Any, timeout_s: float) -> RendezvousStore | None:
    """Get this process ready for the framework's ``hvd.init()``.

    Rank 0 serves the store; every rank waits on ``barrier`` (the sync group's) until it does, and
    sets the Horovod environment of its place. Returns the store on rank 0 (close it on shutdown).
    """
    store = RendezvousStore(rendezvous) if rendezvous.rank == 0 else None
    try:
        barrier()
    except BaseException:
        if store is not None:
            store.close()
        raise
    os.environ.update(environment(rendezvous, timeout_s))
    return store


def join(hvd: Any, rendezvous: Rendezvous, group: Any, timeout_s: float) -> RendezvousStore | None:
    """:func:`start` (waiting on the sync ``group``'s barrier; ``None``: no wait), then ``hvd.init()``
    of the framework's Horovod module ``hvd`` (``horovod.torch``, ``horovod.tensorflow``), checking
    that Horovod placed this process where Orca did. A Horovod left running in this process by an
    earlier runner is shut down first. Returns the store on rank 0 (give it to :func:`leave`)."""
    leave(hvd, None)
    store = start(rendezvous, group.barrier if group is not None else (lambda: None), timeout_s)
    try:
        hvd.init()
        if (hvd.rank(), hvd.size()) != (rendezvous.rank, rendezvous.world_size):
            raise RuntimeError(f"Horovod placed this worker at rank {hvd.rank()} of {hvd.size()}, Orca at "
                               f"{rendezvous.rank} of {rendezvous.world_size}.")
    except BaseException:
        leave(hvd, store)
        raise
    return store


def leave(hvd: Any, store: RendezvousStore | None) -> None:
    """Shut Horovod down in this process (so a later fit can join a new job) and close ``store``."""
    if hvd.is_initialized():
        hvd.shutdown()
    if store is not None:
        store.close()


def framework_module(module: str, framework: str) -> Any:
    """Horovod's module for a framework (``horovod.torch``, ``horovod.tensorflow``), imported by name
    for that framework's runner; an ImportError naming the command that builds it when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        from orca.core.horovod_install import install_hint

        raise ImportError(f"backend='horovod' needs Horovod built for {framework} ({module} is missing in this "
                          f"environment). Install it with: {install_hint(framework)}.") from exc
