"""One progress bar on the driver, fed by rank 0's reports over a small TCP channel.

Workers (Spark tasks or Ray actors) connect to a listener on the driver and send JSON
lines; the driver draws a single tqdm bar. Reporting is best effort: a worker that cannot
reach the driver trains on silently, and nothing ever waits on the bar.

The listener takes only reporters of this fit: a connection's first line must be the fit's
random token (shipped to rank 0 with the job), or it is closed. Everything is bounded: at
most :data:`MAX_CONNECTIONS` connections at once, lines of at most :data:`MAX_LINE` bytes,
the last :data:`MAX_EVENTS` events kept, and a connection silent for :data:`IDLE_S` is closed.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import json
import logging
import secrets
import select
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from orca.core._connect import CONNECT_MODE, connect_client_host

if TYPE_CHECKING:
    from orca.core.engine.liveness import Liveness

log = logging.getLogger("orca")

#: connections served at once (rank 0 needs one; the rest are strangers or stragglers)
MAX_CONNECTIONS = 4
#: the longest line read (an event is ~200 bytes)
MAX_LINE = 64 << 10
#: events kept for ``Estimator.progress_events``
MAX_EVENTS = 10_000
#: how long a connection may stay silent before the server closes it
IDLE_S = 3600.0
#: what the driver sends a worker that must end its process (the call was cancelled)
STOP_LINE = b"stop\n"
#: how long a new connection has to send its token
AUTH_S = 5.0


class ProgressServer:
    """Listens on ``host`` for worker reports and draws one bar (or logs, without tqdm).

    Args:
        host: the driver address workers can reach (127.0.0.1 locally).
        use_tqdm: draw a tqdm bar; otherwise log each epoch's stats.
        liveness: where the workers' heartbeats go (see :mod:`orca.core.engine.liveness`);
            each of its ranks may hold a connection besides rank 0's progress reporter.

    Attributes:
        endpoint: ``(host, port, token)``, what a :class:`Reporter` needs.
        events: the last :data:`MAX_EVENTS` events received.
        refused: how many connections were closed for a wrong token or a bad line.
    """

    def __init__(self, host: str, use_tqdm: bool = True, liveness: Liveness | None = None,
                 listeners: Sequence[Callable[[dict[str, Any]], None]] = ()) -> None:
        self.use_tqdm = use_tqdm
        self.liveness = liveness
        self.listeners = list(listeners)
        # each rank's heartbeat connection, and for a moment its gather connection (:func:`gather`)
        self.max_connections = MAX_CONNECTIONS + 2 * (liveness.num_workers if liveness is not None else 0)
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_EVENTS)
        self.refused = 0
        self._token = secrets.token_hex(16)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(8)
        self._sock.settimeout(0.5)
        self.address = (host, int(self._sock.getsockname()[1]))
        self.endpoint = (host, self.address[1], self._token)
        self._bar: Any = None
        self._lock = threading.Lock()
        #: accepted connections that have not sent the token yet, oldest first
        self._unauthenticated: collections.deque[socket.socket] = collections.deque()
        #: connections that sent the token (workers inside the current call)
        self._workers: set[socket.socket] = set()
        self._stop = threading.Event()
        self._readers: list[threading.Thread] = []
        #: (key, world) -> {rank: (connection, value)} of the gathers under way (see :func:`gather`)
        self._gathers: dict[tuple[str, int], dict[int, tuple[socket.socket, Any]]] = {}
        self._thread = threading.Thread(target=self._serve, name="orca-progress", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            if self._stop.is_set():  # close()'s own wake-up connection
                conn.close()
                break
            self._readers = [r for r in self._readers if r.is_alive()]
            if len(self._readers) >= self.max_connections:
                with self._lock:  # strangers that never sent the token must not lock reporters out
                    oldest = self._unauthenticated.popleft() if self._unauthenticated else None
                if oldest is None:
                    self._refuse(conn, "too many connections")
                    continue
                self._refuse(oldest, "too many connections: the oldest without a token made room")
            with self._lock:
                self._unauthenticated.append(conn)
            reader = threading.Thread(target=self._read, args=(conn,), name="orca-progress-reader", daemon=True)
            self._readers.append(reader)
            reader.start()

    def _refuse(self, conn: socket.socket, why: str) -> None:
        with self._lock:
            self.refused += 1
        log.debug("progress server: closed a connection (%s)", why)
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(AUTH_S)
            with conn.makefile("rb") as lines:
                first = lines.readline(len(self._token) + 2).strip()
                if not hmac.compare_digest(first, self._token.encode()):
                    self._refuse(conn, "no token")
                    return
                with self._lock, contextlib.suppress(ValueError):
                    self._unauthenticated.remove(conn)
                with self._lock:
                    self._workers.add(conn)
                conn.settimeout(IDLE_S)
                while True:
                    line = lines.readline(MAX_LINE)
                    if not line:
                        return
                    if not line.endswith(b"\n"):
                        self._refuse(conn, f"a line longer than {MAX_LINE} bytes")
                        return
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and event.get("event") == "gather":
                        self._gather(conn, event)
                    elif isinstance(event, dict):
                        self._handle(event)
        except (OSError, ValueError):  # (ValueError: the socket was closed to make room)
            return
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._unauthenticated.remove(conn)
            with self._lock:
                self._workers.discard(conn)
            conn.close()

    def _gather(self, conn: socket.socket, event: dict[str, Any]) -> None:
        """One rank's part of a gather; the last one to arrive sends every rank all the values."""
        rank, world, key = event.get("rank"), event.get("world"), str(event.get("key", ""))
        if (not isinstance(world, int) or isinstance(world, bool) or not 0 < world <= 1 << 16
                or not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world):
            return
        with self._lock:
            parts = self._gathers.setdefault((key, world), {})
            parts[rank] = (conn, event.get("value"))
            done = self._gathers.pop((key, world)) if len(parts) == world else None
        if done is None:
            return
        line = (json.dumps({"gathered": [done[r][1] for r in range(world)]}) + "\n").encode()
        for peer, _ in done.values():
            with contextlib.suppress(OSError):
                peer.sendall(line)

    def _handle(self, event: dict[str, Any]) -> None:
        if event.get("event") == "beat":
            if self.liveness is not None:
                self.liveness.seen(event.get("rank"), event)  # type: ignore[arg-type]
            return
        if event.get("event") == "failed":  # a worker's failure, ahead of its launcher's result
            if self.liveness is not None:
                self.liveness.failed(event.get("rank"), event)  # type: ignore[arg-type]
            return
        with self._lock:
            self.events.append(event)
            try:
                self._draw(event)
            except (TypeError, ValueError):  # a malformed field: the event is kept, the bar skips it
                pass
            for listener in self.listeners:  # (under the lock: one event at a time, in order)
                try:
                    listener(event)
                except Exception:  # noqa: BLE001 - a listener's failure never breaks the call
                    log.exception("a fit listener failed on %s", event.get("event"))

    def _draw(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "begin" and self.use_tqdm:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=event.get("total_steps") or None, desc="fit", unit="step", leave=True)
        elif kind == "step" and self._bar is not None:
            self._bar.update(int(event.get("n", 1)))
            self._bar.set_postfix(epoch=event.get("epoch"), loss=f"{event.get('loss', 0):.4g}")
        elif kind == "epoch":
            msg = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in event.items()
                            if k != "event")
            if self._bar is not None:
                self._bar.set_description(f"epoch {event.get('epoch')}")
            else:
                log.info("epoch stats: %s", msg)

    def stop_workers(self) -> int:
        """Tell every worker still inside this call to end its process now (see
        :meth:`Reporter.stopped`); returns how many were told. For a launcher whose own kill may
        not reach a worker busy in user code (a cancelled Spark task's Python worker)."""
        with self._lock:
            workers = list(self._workers)
        told = 0
        for conn in workers:
            try:
                conn.sendall(STOP_LINE)
                told += 1
            except OSError:
                pass
        return told

    def close(self) -> None:
        """Stop listening, read what reporters already sent (they close at the end of fit), close the bar."""
        self._stop.set()
        # wake the accept at once (else it notices the stop only at its 0.5 s timeout: a quarter of
        # a second added to every fit, evaluate and predict call on average)
        host = "127.0.0.1" if self.address[0] in ("", "0.0.0.0") else self.address[0]  # noqa: S104 - a wildcard bind
        with contextlib.suppress(OSError), socket.create_connection((host, self.address[1]), timeout=1.0):
            pass
        self._thread.join(timeout=2)
        with self._lock:  # ranks still waiting to meet: the call is over, they get an error
            waiting, self._gathers = [c for parts in self._gathers.values() for c, _ in parts.values()], {}
        for conn in waiting:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for reader in self._readers:
            reader.join(timeout=2)
        self._sock.close()
        if self._bar is not None:
            self._bar.close()


class Reporter:
    """Worker side: sends events to the driver's :class:`ProgressServer`, never raising."""

    def __init__(self, address: tuple[str, int, str] | None, every: int = 5) -> None:
        self.every = every
        self._pending = 0
        self._sock: socket.socket | None = None
        if address is not None:
            host, port, token = address
            try:
                self._sock = socket.create_connection((host, port), timeout=5)
                self._sock.sendall(token.encode() + b"\n")
            except OSError:
                self._sock = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self._sock is None:
            return
        if event.get("event") == "step":
            self._pending += 1
            if self._pending < self.every:
                return
            event = dict(event, n=self._pending)
            self._pending = 0
        try:
            self._sock.sendall((json.dumps(event, default=float) + "\n").encode())
        except OSError:
            self._sock = None

    def stopped(self) -> bool:
        """True once the driver told this worker to stop (:meth:`ProgressServer.stop_workers`);
        never blocks."""
        if self._sock is None:
            return False
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if not readable:
                return False
            data = self._sock.recv(len(STOP_LINE), socket.MSG_PEEK)
        except (OSError, ValueError):
            return False
        if not data:  # the driver closed the call's listener: nothing more to read
            self._sock.close()
            self._sock = None
            return False
        return data == STOP_LINE

    def close(self) -> None:
        """Flush pending steps and close."""
        if self._pending and self._sock is not None:
            try:
                self._sock.sendall((json.dumps({"event": "step", "n": self._pending}) + "\n").encode())
            except OSError:
                pass
            self._pending = 0
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def gather(endpoint: tuple[str, int, str], rank: int, world: int, key: str, value: Any,
           timeout_s: float) -> list[Any]:
    """Worker side: every rank's ``value`` (JSON), in rank order, exchanged through the driver's
    :class:`ProgressServer` at ``endpoint`` (``key`` tells one gather of a call from another).

    What Spark's ``BarrierTaskContext.allGather`` does, without its cost: the JVM side of a
    barrier call polls its reply once a second, so every rank but the last to arrive waited
    about a second, on every fit.

    Raises:
        ConnectionError: the driver closed the call, or told it to stop, before every rank arrived.
        TimeoutError: no answer within ``timeout_s`` (a backstop: the driver judges silent ranks).
    """
    host, port, token = endpoint
    request = {"event": "gather", "rank": rank, "world": world, "key": key, "value": value}
    with socket.create_connection((host, port), timeout=AUTH_S) as sock:
        sock.sendall(token.encode() + b"\n" + json.dumps(request).encode() + b"\n")
        sock.settimeout(timeout_s)
        with sock.makefile("rb") as lines:
            try:
                line = lines.readline(MAX_LINE)
            except TimeoutError:
                raise TimeoutError(f"rank {rank} waited {timeout_s:.0f}s for its peers to meet") from None
    if not line or line == STOP_LINE:
        raise ConnectionError(f"the driver ended the call while rank {rank} waited for its peers to meet")
    return list(json.loads(line)["gathered"])


def driver_host() -> str:
    """The address workers use to reach this driver."""
    from orca.core import _active

    ctx = _active.current()
    if ctx.cluster_mode == "local" and not ctx.address:
        return "127.0.0.1"
    if ctx.cluster_mode == CONNECT_MODE:
        return connect_client_host(ctx.extra.get("driver_host"), ctx.extra.get("remote"))
    if ctx.has_spark:
        host = ctx.spark_session().sparkContext.getConf().get("spark.driver.host")
        if host:
            return str(host)
    return socket.gethostbyname(socket.gethostname())
