"""Security of a real 2-worker fit: a stranger at a worker's sync listener is refused and the fit
trains the right weights; nothing it sends is unpickled; local-mode listeners are on loopback.

The runners here are the real ones, with rank 1 joining its group a few seconds late (a
straggler) and rank 0 writing where its sync listener is, so that the stranger has a window
and knows the port.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from conftest import sgd
from test_training import expected_sgd_weight, one_weight_model
from torch import nn

from orca.core.plugin import Backend, Rendezvous, declare
from orca.torch import Estimator
from orca.torch.runner import BigDLTorchRunner, TorchRunner

JOIN_DELAY_S = 4.0
HEADER = struct.Struct("!4sIQQ")  # the sync layer's frame header: magic, operation, sequence, size


class _Straggler:
    """Rank 0 writes its rendezvous to ``config["rdv_file"]``; rank 1 joins ``JOIN_DELAY_S`` late."""

    def setup(self, rendezvous: Rendezvous) -> None:
        if rendezvous.rank == 0:
            facts = {"host": rendezvous.master_addr, "sync_port": rendezvous.extra["sync_port"],
                     "master_port": rendezvous.master_port, "pid": os.getpid()}
            Path(self.config["rdv_file"]).write_text(json.dumps(facts))
        else:
            time.sleep(JOIN_DELAY_S)
        super().setup(rendezvous)


class SlowBigDLRunner(_Straggler, BigDLTorchRunner):
    pass


class SlowTorchRunner(_Straggler, TorchRunner):
    pass


class StragglerEstimator(Estimator):
    backends = declare(
        Backend("bigdl", "spark", SlowBigDLRunner, "bigdl with a late rank 1"),
        Backend("ray", "ray", SlowTorchRunner, "ray with a late rank 1"),
        Backend("spark", "spark", SlowTorchRunner, "spark with a late rank 1"),
    )


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:  # what unpickling would run: create the marker file
        return (open, (self.marker, "w"))


def _wait_for(path: Path, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise TimeoutError(f"rank 0 never wrote {path}")


def _connect(host: str, port: int, timeout_s: float = 10) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _closed_by_server(sock: socket.socket, timeout_s: float = 8) -> bool:
    """True when the server closes ``sock`` (after its 38-byte challenge) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        got = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return len(got) <= 38
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


def _attack(host: str, port: int, marker: str) -> dict[str, bool]:
    """Every kind of stranger, one connection each; whether the listener closed each one."""
    evil = pickle.dumps(_Evil(marker))
    hello = json.dumps({"rank": 1, "world": 2, "addr": "127.0.0.1:1", "nonce": "00"}).encode()
    payloads = {
        "zeros": b"\0" * 64,
        "huge size header": HEADER.pack(b"ORCA", 1, 0, 1 << 40),
        "random 4KB": os.urandom(4096),
        "unsigned hello": HEADER.pack(b"ORCA", 1, 0, len(hello)) + hello + os.urandom(32),
        "pickle as hello": HEADER.pack(b"ORCA", 1, 0, len(evil)) + evil + os.urandom(32),
        "pickle as allgather": HEADER.pack(b"ORCA", 6, 1, len(evil)) + evil,
        "bare pickle": evil,
    }
    refused = {}
    for name, payload in payloads.items():
        sock = _connect(host, port)
        try:
            sock.sendall(payload)
        except OSError:
            pass
        refused[name] = _closed_by_server(sock)
    return refused


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["bigdl", "ray"])
def test_a_stranger_at_the_sync_listener_is_refused_and_the_fit_trains_right(orca_context, backend, tmp_path):
    rdv_file, marker = tmp_path / "rdv.json", str(tmp_path / "pwned")
    x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
    y = (2 * x).astype(np.float32)
    est = StragglerEstimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(),
                                        backend=backend, workers_per_node=2, config={"rdv_file": str(rdv_file)},
                                        use_tqdm=False)
    report: dict[str, Any] = {}

    def stranger() -> None:
        try:
            facts = _wait_for(rdv_file)
            # a silent connection held through the rendezvous must not hold it up
            silent = _connect(facts["host"], facts["sync_port"])
            report["refused"] = _attack(facts["host"], facts["sync_port"], marker)
            report["attack_done_at"] = time.monotonic()
            silent.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            report["error"] = exc

    thread = threading.Thread(target=stranger, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        est.fit({"x": x, "y": y}, epochs=2, batch_size=4, shuffle=False)
        got = float(est.get_model().weight.item())
        digests = est.worker_weight_digests()
    finally:
        est.shutdown()
    thread.join(60)
    assert "error" not in report, report.get("error")
    assert report["refused"] == {k: True for k in report["refused"]}, report["refused"]
    assert report["attack_done_at"] > start
    batches = [[0, 1, 4, 5], [2, 3, 6, 7]] * 2
    want = expected_sgd_weight(x[:, 0].astype(np.float64), y[:, 0].astype(np.float64), 0.5, 0.1, batches)
    assert got == pytest.approx(want, abs=1e-6)
    assert len(digests) == 2 and digests[0] == digests[1]
    assert not os.path.exists(marker), "something unpickled what the stranger sent"


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _listeners(procs: list[psutil.Process]) -> set[tuple[str, str, int]]:
    out = set()
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((p.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["bigdl", "ray", "spark"])
def test_a_local_fit_listens_on_loopback_only(orca_context, backend, tmp_path):
    """Every listening socket of this test's child processes (Spark, Ray, the workers), sampled
    while a fit runs, is on 127.0.0.1; the sync listener (and gloo's store) are among them."""
    rdv_file = tmp_path / "rdv.json"
    x = np.random.default_rng(0).standard_normal((64, 1)).astype(np.float32)
    est = StragglerEstimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(),
                                        backend=backend, workers_per_node=2, config={"rdv_file": str(rdv_file)},
                                        use_tqdm=False)
    seen: set[tuple[str, str, int]] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(_listeners(_descendants()))
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        est.fit({"x": x, "y": 2 * x}, epochs=40, batch_size=8)  # long enough to sample gloo's store
    finally:
        done.set()
        thread.join(30)
        est.shutdown()
    facts = json.loads(rdv_file.read_text())
    ports = {port for _, _, port in seen}
    assert facts["sync_port"] in ports, f"the sync listener was not seen: {sorted(seen)}"
    if backend != "bigdl":
        assert facts["master_port"] in ports, f"gloo's store was not seen: {sorted(seen)}"
    exposed = sorted(s for s in seen if s[1] not in LOOPBACK)
    assert not exposed, f"listening beyond loopback in local mode: {exposed}"
