"""How the workers of one sync group meet and prove they belong to the same job.

Every job has a secret token, made on the driver (:func:`job_token`) and shipped to its
workers with the job (Spark's broadcast, Ray's task arguments), never over these sockets.
Whoever connects to a worker's listener must prove it holds the token before anything it
sends is read as more than a fixed-size frame:

1. the listening worker sends a challenge: ``ORCA``, the protocol version, 32 random bytes;
2. the connecting worker answers with its hello (rank, group size, listening address, a nonce
   of its own; JSON of at most :data:`MAX_HELLO` bytes) and ``HMAC-SHA256(token, challenge,
   hello)``;
3. the listener checks the MAC, then the hello (rank in range and expected here, not seen
   before, the same group size), and answers ``HMAC-SHA256(token, "welcome", challenge,
   hello)``, so the connecting worker knows it reached a worker of its own job.

A connection that fails any step (silence, garbage, an oversized length, a wrong MAC, a rank
already taken) is closed and logged; the listener keeps waiting for its real peers until the
group's deadline. Handshakes run on their own threads (at most :data:`MAX_PENDING` at once),
so a stranger that connects and stays silent delays no one. Nothing received is unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import queue
import re
import secrets
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

from orca.core.sync.errors import SyncError, SyncTimeoutError

log = logging.getLogger("orca")

MAGIC = b"ORCA"
VERSION = 2
#: every message after the handshake: magic, operation, sequence number, payload bytes
HEADER = struct.Struct("!4sIQQ")
CHALLENGE = struct.Struct("!4sH32s")
HELLO, TABLE, WELCOME = 1, 2, 7
MAC_BYTES = 32
#: the largest hello accepted (a rank, a group size, an address and a nonce fit in ~200 bytes)
MAX_HELLO = 1024
#: how long one connection may take to complete its handshake
HANDSHAKE_S = 10.0
#: handshakes in progress at once on one listener; more connections are closed at once
MAX_PENDING = 32
_ADDR = re.compile(r"^[A-Za-z0-9_.:\-\[\]%]{1,255}:\d{1,5}$")


class HandshakeRefused(Exception):
    """A connection that did not prove it belongs to the job (closed and logged, never raised)."""


def job_token() -> str:
    """A fresh secret for one job's workers (256 random bits, hex)."""
    return secrets.token_hex(32)


def token_key(token: str | bytes | None) -> bytes:
    """The HMAC key of ``token``; a clear error when there is none or it is too short."""
    if token is None or len(token) == 0:
        raise ValueError("token=None: a sync group needs its job's secret token (orca.core.sync.job_token() on the "
                         "driver, shipped to every worker with the job); Orca's Estimators pass it for you.")
    key = token.encode() if isinstance(token, str) else bytes(token)
    if len(key) < 16:
        raise ValueError(f"the sync token has {len(key)} bytes; use at least 16 random bytes "
                         "(orca.core.sync.job_token()).")
    return key


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ``ConnectionError`` if it closes first."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"the connection closed after {got} of {n} bytes.")
        got += k
    return bytes(buf)


@dataclass(frozen=True)
class Hello:
    """What a connecting worker says about itself (checked against the token's MAC)."""

    rank: int
    world: int
    addr: str


def _parse_hello(blob: bytes) -> Hello:
    try:
        fields = json.loads(blob)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HandshakeRefused(f"a signed hello that is not JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise HandshakeRefused("a signed hello that is not a JSON object")
    rank, world, addr = fields.get("rank"), fields.get("world"), fields.get("addr")
    if not (type(rank) is int and type(world) is int and isinstance(addr, str) and _ADDR.match(addr)):
        raise HandshakeRefused(f"a signed hello with bad fields (rank={rank!r}, world={world!r}, addr={addr!r})")
    return Hello(rank, world, addr)


def serve_handshake(sock: socket.socket, key: bytes, deadline: float) -> Hello:
    """The listening side of the handshake on a freshly accepted ``sock``.

    Raises:
        HandshakeRefused: the peer did not prove it holds the token, or sent a malformed hello.
    """
    sock.settimeout(max(0.05, min(HANDSHAKE_S, deadline - time.monotonic())))
    nonce = os.urandom(32)
    challenge = CHALLENGE.pack(MAGIC, VERSION, nonce)
    try:
        sock.sendall(challenge)
        magic, op, seq, nbytes = HEADER.unpack(recv_exact(sock, HEADER.size))
        if magic != MAGIC or op != HELLO or seq != 0:
            raise HandshakeRefused("not an Orca hello")
        if not 0 < nbytes <= MAX_HELLO:
            raise HandshakeRefused(f"a hello claiming {nbytes} bytes (at most {MAX_HELLO} are read)")
        blob = recv_exact(sock, nbytes)
        mac = recv_exact(sock, MAC_BYTES)
        if not hmac.compare_digest(mac, _mac(key, b"hello", challenge, blob)):
            raise HandshakeRefused("a hello without this job's signature (a stranger, or another job)")
        hello = _parse_hello(blob)
        sock.sendall(_mac(key, b"welcome", challenge, blob))
        return hello
    except (OSError, ConnectionError) as exc:  # TimeoutError is an OSError
        raise HandshakeRefused(f"the connection failed during the handshake ({exc})") from None


def dial(addr: str, port: int, key: bytes, rank: int, world: int, me: str, deadline: float) -> socket.socket:
    """Connect to a peer's listener and prove this worker belongs to the job (and that the peer does).

    Retries while the peer is not listening yet, until ``deadline``.

    Raises:
        SyncTimeoutError: the peer did not listen before ``deadline``.
        SyncError: what listens there is not a worker of this job.
    """
    delay = 0.01
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=max(0.1, deadline - time.monotonic()))
            break
        except (ConnectionRefusedError, TimeoutError) as exc:  # the peer is not listening yet
            if time.monotonic() + delay > deadline:
                raise SyncTimeoutError(f"rank {rank} could not connect to {addr}:{port} within the sync "
                                       f"timeout ({exc}).") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    try:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        challenge = recv_exact(sock, CHALLENGE.size)
        magic, version, _ = CHALLENGE.unpack(challenge)
        if magic != MAGIC or version != VERSION:
            raise SyncError(f"rank {rank}: {addr}:{port} is not an Orca sync listener of this version.")
        blob = json.dumps({"rank": rank, "world": world, "addr": me, "nonce": secrets.token_hex(16)}).encode()
        sock.sendall(HEADER.pack(MAGIC, HELLO, 0, len(blob)) + blob + _mac(key, b"hello", challenge, blob))
        if not hmac.compare_digest(recv_exact(sock, MAC_BYTES), _mac(key, b"welcome", challenge, blob)):
            raise SyncError(f"rank {rank}: the worker at {addr}:{port} did not prove it belongs to this job.")
        return sock
    except TimeoutError:
        sock.close()
        raise SyncTimeoutError(f"rank {rank}: {addr}:{port} did not complete the sync handshake in time.") from None
    except ConnectionError as exc:
        sock.close()
        raise SyncError(f"rank {rank}: {addr}:{port} refused this worker during the sync handshake ({exc}); "
                        "it holds another job's token, or another rank already took this one.") from None
    except BaseException:
        sock.close()
        raise


def accept_peers(listener: socket.socket, key: bytes, rank: int, world: int, expect: set[int],
                 deadline: float) -> dict[int, tuple[socket.socket, Hello]]:
    """Accept connections on ``listener`` until every rank in ``expect`` has joined.

    Each connection's handshake runs on its own thread; one that fails it, or names a rank
    that is not expected here or already joined, is closed and logged.

    Raises:
        SyncTimeoutError: not every expected rank joined before ``deadline``.
        SyncError: a worker of this job believes in another group size.
    """
    results: queue.Queue[tuple[socket.socket, Any, Hello | HandshakeRefused]] = queue.Queue()
    pending = [0]
    done = threading.Event()
    peers: dict[int, tuple[socket.socket, Hello]] = {}

    def shake(conn: socket.socket, who: Any) -> None:
        try:
            outcome: Hello | HandshakeRefused = serve_handshake(conn, key, deadline)
        except HandshakeRefused as exc:
            outcome = exc
        if done.is_set():
            conn.close()
        else:
            results.put((conn, who, outcome))

    listener.settimeout(0.05)
    try:
        while len(peers) < len(expect):
            while not results.empty():
                conn, who, outcome = results.get()
                pending[0] -= 1
                problem = _admit(outcome, rank, world, expect, peers)
                if problem is None:
                    assert isinstance(outcome, Hello)  # _admit accepts only hellos
                    peers[outcome.rank] = (conn, outcome)
                    continue
                conn.close()
                if isinstance(outcome, Hello) and outcome.world != world:
                    raise SyncError(problem)
                log.warning("orca sync, rank %d: dropped a connection from %s: %s", rank, who, problem)
            if len(peers) == len(expect):
                break
            if time.monotonic() > deadline:
                missing = sorted(expect - set(peers))
                raise SyncTimeoutError(f"rank {rank}: ranks {missing} did not join the sync group within the sync "
                                       "timeout: a worker failed to start, or cannot reach this one.")
            try:
                conn, who = listener.accept()
            except TimeoutError:
                continue
            if pending[0] >= MAX_PENDING:
                log.warning("orca sync, rank %d: dropped a connection from %s: %d handshakes already pending",
                            rank, who, pending[0])
                conn.close()
                continue
            pending[0] += 1
            threading.Thread(target=shake, args=(conn, who), name="orca-sync-handshake", daemon=True).start()
    except BaseException:
        for sock, _ in peers.values():
            sock.close()
        raise
    finally:
        done.set()
        while not results.empty():
            results.get()[0].close()
    return peers


def _admit(outcome: Hello | HandshakeRefused, rank: int, world: int, expect: set[int],
           peers: dict[int, Any]) -> str | None:
    """Why a handshake's outcome is not a new peer of ``rank`` (``None``: it is)."""
    if isinstance(outcome, HandshakeRefused):
        return str(outcome)
    if outcome.world != world:
        return (f"rank {outcome.rank} of this job thinks the group has {outcome.world} workers, "
                f"rank {rank} has {world}.")
    if outcome.rank not in expect:
        return f"rank {outcome.rank} is not a rank that connects to rank {rank} (expected {sorted(expect)})"
    if outcome.rank in peers:
        return f"rank {outcome.rank} already joined"
    return None
