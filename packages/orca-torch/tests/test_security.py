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
from typing import Any

import numpy as np
import pytest
from conftest import HOROVOD, sgd
from test_training import expected_sgd_weight, one_weight_model
from torch import nn

from orca.core.testing.listeners import listeners_of_a_fit, read_facts, with_straggler
from orca.torch import Estimator

HEADER = struct.Struct("!4sIQQ")  # the sync layer's frame header: magic, operation, sequence, size
StragglerEstimator = with_straggler(Estimator)


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:  # what unpickling would run: create the marker file
        return (open, (self.marker, "w"))


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
            facts = read_facts(rdv_file)
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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["bigdl", "ray", "spark", *HOROVOD])
def test_a_local_fit_listens_on_loopback_only(orca_context, backend, tmp_path):
    """Every listening socket of this process and its children (Spark, Ray, the workers), sampled
    while a fit runs, is on 127.0.0.1; the sync listener (and gloo's store) are among them."""
    rdv_file = tmp_path / "rdv.json"
    x = np.random.default_rng(0).standard_normal((64, 1)).astype(np.float32)
    est = StragglerEstimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(),
                                        backend=backend, workers_per_node=2, config={"rdv_file": str(rdv_file)},
                                        use_tqdm=False)
    # 40 epochs: long enough to sample gloo's store
    sampler, facts = listeners_of_a_fit(est, lambda: est.fit({"x": x, "y": 2 * x}, epochs=40, batch_size=8), rdv_file)
    if backend != "bigdl":
        assert facts["master_port"] in sampler.ports, f"gloo's store was not seen: {sorted(sampler.seen)}"
    assert not sampler.exposed(), f"listening beyond loopback in local mode: {sampler.exposed()}"
