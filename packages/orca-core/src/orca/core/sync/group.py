"""A group of workers that all-reduce flat numeric buffers over TCP, in the design of
BigDL's ``AllReduceParameter``.

Every buffer of ``n`` elements is cut into ``N`` contiguous shards, one owned by each rank.
A step is two phases over direct peer-to-peer connections:

1. *reduce-scatter*: each rank sends shard ``j`` of its buffer to rank ``j`` and receives
   its own shard from every peer, summing them into its own buffer;
2. *all-gather*: each rank sends its reduced shard to every peer and receives theirs
   straight into its buffer.

So each rank sends and receives ``2 (N-1) / N`` of the buffer per step, and every element
is summed by one rank only, in one order: all ranks end with bit-identical results.

The payload never gets copied in Python: sends go from the caller's array through a
``memoryview``, receives land in it (or in one reusable scratch shard) with
``socket.recv_into``. Each message carries a small header (operation, sequence number,
size) so that ranks calling different operations or buffer sizes get a clear error instead
of garbage. Sends to the ``N-1`` peers run on a thread per peer while the calling thread
receives, so no pair of ranks can block each other on full socket buffers.

Every blocking receive and send is bounded by ``timeout_s``: a peer that is dead makes the
others raise :class:`PeerLostError` (its sockets close), one that is stuck makes them raise
:class:`SyncTimeoutError`. A rank that fails closes its own connections, so the failure
spreads to the whole group at once instead of one timeout per hop.

Workers join only by proving they hold the job's secret token (an HMAC challenge-response,
:mod:`orca.core.sync.handshake`); a stranger's connection is dropped and the group goes on.
Nothing that arrives is unpickled: buffers land in arrays of a known size, and small objects
(:meth:`SyncGroup.allgather`) use the non-executable :mod:`orca.core.codec`, bounded by
``max_object_bytes``.

The module is framework-neutral (numpy and the standard library only): the PyTorch
``bigdl`` backend and the TF1 graph Estimator both use it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from orca.core.codec import CodecError, decode, encode
from orca.core.sync.collective import Collective
from orca.core.sync.errors import PeerLostError, SyncError, SyncTimeoutError
from orca.core.sync.handshake import HEADER, HELLO, MAGIC, TABLE, accept_peers, dial, recv_exact, token_key

__all__ = ["PeerLostError", "SyncError", "SyncGroup", "SyncTimeoutError"]

_REDUCE, _GATHER, _BCAST, _OBJECT, _BARRIER = range(3, 8)
_OP_NAMES = {HELLO: "hello", TABLE: "address table", _REDUCE: "allreduce (reduce-scatter)",
             _GATHER: "allreduce (all-gather)", _BCAST: "broadcast", _OBJECT: "allgather", _BARRIER: "barrier"}
#: a barrier's message: a header and nothing else (a peer announcing more fails the barrier at once)
_NOTHING = np.zeros(0, np.uint8)
#: the default bound on one rank's allgather message (stats, metric states, flags)
MAX_OBJECT_BYTES = 256 << 20
_SOCKET_BUFFER = 4 << 20


def shard_bounds(n: int, world: int) -> list[int]:
    """Offsets ``b`` such that rank ``r`` owns ``[b[r], b[r+1])`` of an ``n``-element buffer.

    Shards differ in size by at most one element (the first ``n % world`` are longer).

    Examples:
        >>> shard_bounds(10, 3)
        [0, 4, 7, 10]
    """
    base, extra = divmod(n, world)
    bounds = [0]
    for r in range(world):
        bounds.append(bounds[-1] + base + (1 if r < extra else 0))
    return bounds


def _tune(sock: socket.socket, timeout_s: float) -> socket.socket:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, opt, _SOCKET_BUFFER)
    sock.settimeout(timeout_s)
    return sock


def _recv_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False if the peer closed the connection first."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return False
        got += k
    return True


class SyncGroup(Collective):
    """``N`` workers connected all-to-all, for allreduce, broadcast, barrier and allgather.

    Build one per worker with :meth:`connect` (or :meth:`from_rendezvous` inside an Orca
    Runner); every rank must call the same operations in the same order with buffers of
    the same size and dtype.

    Attributes:
        rank: this worker's rank.
        world_size: the number of workers.
        timeout_s: the bound on every receive and send.

    Examples:
        >>> group = SyncGroup.connect(rank, world, "127.0.0.1", port, token=token)  # doctest: +SKIP
        >>> grads = np.ones(1000, np.float32)                            # doctest: +SKIP
        >>> group.allreduce(grads, op="mean")  # in place; identical on every rank  # doctest: +SKIP
    """

    def __init__(self, rank: int, world_size: int, peers: dict[int, socket.socket], timeout_s: float,
                 max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
        self.rank = rank
        self.max_object_bytes = int(max_object_bytes)
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._peers = peers
        self._order = [(rank + k) % world_size for k in range(1, world_size)]  # spread the load
        self._pool = ThreadPoolExecutor(max_workers=max(1, world_size - 1), thread_name_prefix="orca-sync")
        self._seq = 0
        self._header = bytearray(HEADER.size)
        self._scratch: dict[tuple[int, str], np.ndarray] = {}
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ set-up
    @classmethod
    def connect(cls, rank: int, world_size: int, master_addr: str, master_port: int, *,
                token: str | bytes | None, host: str = "127.0.0.1", timeout_s: float = 60.0,
                max_object_bytes: int = MAX_OBJECT_BYTES) -> SyncGroup:
        """Connect this worker to its ``world_size - 1`` peers, authenticated by the job's ``token``.

        Rank 0 listens on ``master_addr:master_port``; the others listen on an ephemeral port
        of ``host``, tell rank 0 where, get everyone's address back and connect to the ranks
        below them. Every connection starts with a challenge-response on ``token``
        (:mod:`orca.core.sync.handshake`): a stranger's connection is dropped and logged, and
        the group keeps waiting for its real members. Returns when every pair is connected.

        Args:
            rank: this worker's rank, ``0..world_size-1``.
            world_size: number of workers.
            master_addr: rank 0's address.
            master_port: a free port on rank 0's host (Orca's Rendezvous reserves one).
            token: the job's secret (:func:`orca.core.sync.job_token` on the driver, shipped to
                every worker with the job); the same on every rank.
            host: the interface this worker listens on (loopback in local mode).
            timeout_s: bound on connecting and on every later receive and send.
            max_object_bytes: the largest message :meth:`allgather` accepts from a peer.

        Raises:
            SyncTimeoutError: a peer did not show up within ``timeout_s``.
            SyncError: peers disagree on the group size, or rank 0's port is taken.
            ValueError: a rank outside ``0..world_size-1``, or no token.
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside 0..{world_size - 1}.")
        key = token_key(token)
        if world_size == 1:
            return cls(rank, 1, {}, timeout_s, max_object_bytes)
        deadline = time.monotonic() + timeout_s
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        peers: dict[int, socket.socket] = {}
        try:
            try:
                listener.bind((master_addr, master_port) if rank == 0 else (host, 0))
            except OSError as exc:
                raise SyncError(f"rank {rank} cannot listen on {master_addr if rank == 0 else host}:"
                                f"{master_port if rank == 0 else 0}: {exc}") from None
            listener.listen(max(8, world_size))
            me = f"{listener.getsockname()[0]}:{listener.getsockname()[1]}"
            if rank == 0:
                joined = accept_peers(listener, key, rank, world_size, set(range(1, world_size)), deadline)
                peers.update({r: sock for r, (sock, _) in joined.items()})
                table = {0: me, **{r: hello.addr for r, (_, hello) in joined.items()}}
                blob = json.dumps(table).encode()
                for sock in peers.values():
                    sock.sendall(HEADER.pack(MAGIC, TABLE, 0, len(blob)) + blob)
            else:
                peers[0] = dial(master_addr, master_port, key, rank, world_size, me, deadline)
                table = cls._read_table(peers[0], world_size, deadline)
                for lower in range(1, rank):
                    addr, port = table[lower].rsplit(":", 1)
                    peers[lower] = dial(addr, int(port), key, rank, world_size, me, deadline)
                joined = accept_peers(listener, key, rank, world_size, set(range(rank + 1, world_size)), deadline)
                peers.update({r: sock for r, (sock, _) in joined.items()})
        except BaseException:
            for sock in peers.values():
                sock.close()
            raise
        finally:
            listener.close()
        for sock in peers.values():
            _tune(sock, timeout_s)
        return cls(rank, world_size, peers, timeout_s, max_object_bytes)

    @classmethod
    def from_rendezvous(cls, rendezvous: Any, token: str | bytes | None, timeout_s: float = 60.0) -> SyncGroup:
        """Connect the group described by an :class:`orca.core.engine.Rendezvous`.

        Rank 0 listens on the rendezvous' ``sync_port`` (reserved for this group by every Orca
        backend) or, in a rendezvous without one, on its ``master_port``.
        """
        port = int((rendezvous.extra or {}).get("sync_port") or rendezvous.master_port)
        return cls.connect(rendezvous.rank, rendezvous.world_size, rendezvous.master_addr or "127.0.0.1",
                           port, token=token, host=rendezvous.host, timeout_s=timeout_s)

    @staticmethod
    def _read_table(sock: socket.socket, world: int, deadline: float) -> dict[int, str]:
        """Rank 0's address table (from an authenticated connection; its size and shape checked)."""
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            magic, op, seq, nbytes = HEADER.unpack(recv_exact(sock, HEADER.size))
            if magic != MAGIC or op != TABLE or seq != 0 or not 0 < nbytes <= 300 * world + 64:
                raise SyncError("rank 0 broke the sync handshake (expected the address table).")
            table = {int(k): str(v) for k, v in json.loads(recv_exact(sock, nbytes)).items()}
        except TimeoutError:
            raise SyncTimeoutError("no address table from rank 0 before the sync timeout.") from None
        except ConnectionError:
            raise PeerLostError("rank 0 closed its connection before sending the address table.") from None
        except ValueError as exc:
            raise SyncError(f"rank 0 sent a malformed address table ({exc}).") from None
        if sorted(table) != list(range(world)):
            raise SyncError(f"rank 0's address table names ranks {sorted(table)}, not 0..{world - 1}.")
        return table

    # ------------------------------------------------------------------ collectives
    def allreduce(self, buf: np.ndarray, op: str = "mean") -> np.ndarray:
        """Reduce ``buf`` over all ranks, in place: every rank ends with the same sum or mean.

        Args:
            buf: a C-contiguous float32 or float64 array (any shape; it is treated as flat).
                Every rank passes the same size and dtype.
            op: ``"mean"`` or ``"sum"``.

        Returns:
            ``buf``, now holding the result.

        Raises:
            SyncTimeoutError: a peer sent nothing within ``timeout_s``.
            PeerLostError: a peer's connection closed (its worker died).
            SyncError: peers passed a different size or called a different operation.
            TypeError, ValueError: ``buf`` is not a contiguous float array, or ``op`` is unknown.
        """
        if op not in ("mean", "sum"):
            raise ValueError(f"op={op!r} is not supported; use 'mean' or 'sum'.")
        flat = self._flat(buf)
        if self.world_size == 1:
            return buf
        seq = self._next()
        bounds = shard_bounds(flat.size, self.world_size)
        shard = lambda r: flat[bounds[r]:bounds[r + 1]]  # noqa: E731 - local shorthand
        mine = shard(self.rank)
        # phase 1: reduce-scatter
        sends = [self._pool.submit(self._send, j, _REDUCE, seq, shard(j)) for j in self._order]
        scratch = self._scratch_for(mine)
        for j in self._order:
            self._recv(j, _REDUCE, seq, scratch)
            np.add(mine, scratch, out=mine)
        if op == "mean":
            np.divide(mine, self.world_size, out=mine)
        self._wait(sends)  # the shards sent away are overwritten next
        # phase 2: all-gather
        sends = [self._pool.submit(self._send, j, _GATHER, seq, mine) for j in self._order]
        for j in self._order:
            self._recv(j, _GATHER, seq, shard(j))
        self._wait(sends)
        return buf

    def broadcast(self, buf: np.ndarray, root: int = 0) -> np.ndarray:
        """Copy ``root``'s ``buf`` into every rank's ``buf``, in place (e.g. initial weights).

        ``buf`` may be any C-contiguous numeric array of the same size and dtype on every rank.
        """
        flat = self._flat(buf, floats_only=False)
        if self.world_size == 1:
            return buf
        seq = self._next()
        if self.rank == root:
            self._wait([self._pool.submit(self._send, j, _BCAST, seq, flat) for j in self._order])
        else:
            self._recv(root, _BCAST, seq, flat)
        return buf

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, indexed by rank.

        ``obj`` is plain data: numbers, strings, bytes, lists, tuples, dicts and numeric numpy
        arrays (see :mod:`orca.core.codec`; nothing is pickled). Each peer's message is bounded
        by ``max_object_bytes``.

        Raises:
            orca.core.codec.CodecError: ``obj`` holds another type (before anything is sent).
            SyncError: a peer's message is larger than ``max_object_bytes`` or not a valid encoding.
        """
        if self.world_size == 1:
            return [obj]
        blob = np.frombuffer(encode(obj), dtype=np.uint8)
        if blob.nbytes > self.max_object_bytes:
            raise ValueError(f"allgather of {blob.nbytes} bytes: more than max_object_bytes="
                             f"{self.max_object_bytes} that the peers accept; gather less, or raise the bound.")
        seq = self._next()
        sends = [self._pool.submit(self._send, j, _OBJECT, seq, blob) for j in self._order]
        out: list[Any] = [None] * self.world_size
        out[self.rank] = obj
        for j in self._order:
            raw = self._recv(j, _OBJECT, seq, None)
            try:
                out[j] = decode(raw)
            except CodecError as exc:
                raise self._fail(SyncError(f"rank {self.rank}: rank {j} sent an allgather message that is not a "
                                           f"valid encoding ({exc}).")) from None
        self._wait(sends)
        return out

    def barrier(self) -> None:
        """Return once every rank has called ``barrier``.

        Each rank sends every peer an empty message: one that announces any payload is refused
        before it is read (a :class:`SyncError`), so a barrier never allocates for a peer."""
        if self.world_size == 1:
            return
        seq = self._next()
        sends = [self._pool.submit(self._send, j, _BARRIER, seq, _NOTHING) for j in self._order]
        for j in self._order:
            self._recv(j, _BARRIER, seq, _NOTHING)
        self._wait(sends)

    def close(self) -> None:
        """Close every connection (peers still waiting on this rank fail at once)."""
        for sock in self._peers.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._peers = {}
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SyncGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _flat(self, buf: Any, floats_only: bool = True) -> np.ndarray:
        if not isinstance(buf, np.ndarray):
            raise TypeError(f"expected a numpy array, got {type(buf).__name__}.")
        if floats_only and buf.dtype not in (np.float32, np.float64):
            raise TypeError(f"allreduce works on float32 or float64 buffers, not {buf.dtype}.")
        if not buf.flags.c_contiguous or not buf.flags.writeable:
            raise ValueError("the buffer must be C-contiguous and writeable (it is reduced in place).")
        if self._error is not None:
            raise SyncError(f"this sync group is broken by an earlier error ({self._error}); build a new one.")
        return buf.reshape(-1)

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _scratch_for(self, like: np.ndarray) -> np.ndarray:
        key = (like.size, like.dtype.str)
        buf = self._scratch.get(key)
        if buf is None:
            self._scratch = {key: np.empty(like.size, like.dtype)}  # keep one: steps reuse one size
            buf = self._scratch[key]
        return buf

    def _fail(self, exc: BaseException) -> BaseException:
        """Remember the first error and close the connections so the peers fail now too."""
        with self._lock:
            if self._error is None:
                self._error = exc
                for sock in self._peers.values():
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        return exc

    def _send(self, peer: int, op: int, seq: int, arr: np.ndarray) -> None:
        sock = self._peers[peer]
        try:
            sock.sendall(HEADER.pack(MAGIC, op, seq, arr.nbytes))
            if arr.nbytes:
                sock.sendall(arr.data.cast("B"))
        except TimeoutError:
            raise self._fail(SyncTimeoutError(
                f"rank {self.rank}: rank {peer} took no data for {self.timeout_s:g}s during the "
                f"{_OP_NAMES[op]}; it is stuck or far behind.")) from None
        except OSError as exc:
            raise self._fail(PeerLostError(
                f"rank {self.rank}: the connection to rank {peer} broke during the {_OP_NAMES[op]} "
                f"({exc.strerror or exc}); that worker died or left.")) from None

    def _recv(self, peer: int, op: int, seq: int, into: np.ndarray | None) -> bytes:
        """Receive one message from ``peer`` into ``into`` (or return it, for objects)."""
        sock = self._peers[peer]
        what = _OP_NAMES[op]
        try:
            if not _recv_exact(sock, memoryview(self._header)):
                raise self._fail(PeerLostError(f"rank {self.rank}: rank {peer} closed its connection during "
                                               f"the {what}; that worker died or left."))
            magic, got_op, got_seq, nbytes = HEADER.unpack(self._header)
            if magic != MAGIC or got_op != op or got_seq != seq:
                raise self._fail(SyncError(
                    f"rank {self.rank} is in {what} #{seq} but rank {peer} sent "
                    f"{_OP_NAMES.get(got_op, 'garbage')} #{got_seq}: every worker must call the same sync "
                    "operations in the same order."))
            payload: bytes | bytearray
            if into is None:
                if nbytes > self.max_object_bytes:
                    raise self._fail(SyncError(
                        f"rank {self.rank}: rank {peer} announced a {what} message of {nbytes} bytes, more than "
                        f"max_object_bytes={self.max_object_bytes}."))
                payload = bytearray(nbytes)
                view = memoryview(payload)
            else:
                if nbytes != into.nbytes:
                    raise self._fail(SyncError(
                        f"rank {self.rank} expects {into.nbytes} bytes in {what} #{seq} but rank {peer} sent "
                        f"{nbytes}: every worker must pass buffers of the same size and dtype."))
                payload = b""
                view = into.data.cast("B")
            if nbytes and not _recv_exact(sock, view):
                raise self._fail(PeerLostError(f"rank {self.rank}: rank {peer} closed its connection during "
                                               f"the {what}; that worker died or left."))
            return bytes(payload)
        except TimeoutError:
            raise self._fail(SyncTimeoutError(
                f"rank {self.rank}: no data from rank {peer} for {self.timeout_s:g}s during the {what}; "
                "that worker is stuck or far behind.")) from None
        except SyncError:
            raise
        except OSError as exc:
            raise self._fail(PeerLostError(
                f"rank {self.rank}: the connection to rank {peer} broke during the {what} "
                f"({exc.strerror or exc}); that worker died or left.")) from None

    def _wait(self, futures: Sequence[Future[None]]) -> None:
        for fut in futures:
            fut.result()  # each send is bounded by the socket timeout
