"""One progress bar on the driver, fed by rank 0's reports over a small TCP channel.

Workers (Spark tasks or Ray actors) connect to a listener on the driver and send JSON
lines; the driver draws a single tqdm bar. Reporting is best effort: a worker that cannot
reach the driver trains on silently, and nothing ever waits on the bar.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from typing import Any

log = logging.getLogger("orca")


class ProgressServer:
    """Listens on ``host`` for worker reports and draws one bar (or logs, without tqdm).

    Args:
        host: the driver address workers can reach (127.0.0.1 locally).
        use_tqdm: draw a tqdm bar; otherwise log each epoch's stats.
    """

    def __init__(self, host: str, use_tqdm: bool = True) -> None:
        self.use_tqdm = use_tqdm
        self.events: list[dict[str, Any]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(8)
        self._sock.settimeout(0.5)
        self.address = (host, int(self._sock.getsockname()[1]))
        self._bar: Any = None
        self._stop = threading.Event()
        self._readers: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, name="orca-progress", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
            self._readers.append(reader)
            reader.start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                try:
                    self._handle(json.loads(line))
                except (ValueError, TypeError):
                    continue

    def _handle(self, event: dict[str, Any]) -> None:
        self.events.append(event)
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

    def close(self) -> None:
        """Stop listening, read what reporters already sent (they close at the end of fit), close the bar."""
        self._stop.set()
        self._thread.join(timeout=2)
        for reader in self._readers:
            reader.join(timeout=2)
        self._sock.close()
        if self._bar is not None:
            self._bar.close()


class Reporter:
    """Worker side: sends events to the driver's :class:`ProgressServer`, never raising."""

    def __init__(self, address: tuple[str, int] | None, every: int = 5) -> None:
        self.every = every
        self._pending = 0
        self._sock: socket.socket | None = None
        if address is not None:
            try:
                self._sock = socket.create_connection(address, timeout=5)
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


def driver_host() -> str:
    """The address workers use to reach this driver."""
    from orca.core.context import OrcaContext

    ctx = OrcaContext.current()
    if ctx.cluster_mode == "local" and not ctx.address:
        return "127.0.0.1"
    if ctx.has_spark:
        host = ctx.spark_session().sparkContext.getConf().get("spark.driver.host")
        if host:
            return str(host)
    return socket.gethostbyname(socket.gethostname())
