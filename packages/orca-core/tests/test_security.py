"""Nothing executable on the wire or in files, and only a job's own workers in its sync group.

Real sockets and real files: strangers connect to a sync group's listener while it waits
for its members, random frames are fed to the sync listener and the progress server, and
pickles that would create a file are offered everywhere Orca reads bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import report_and_wait
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orca.core._net import find_free_port
from orca.core.codec import CodecError, decode, encode
from orca.core.engine.checkpoint import read_checkpoint, write_checkpoint
from orca.core.engine.progress import MAX_LINE, ProgressServer
from orca.core.sync import SyncError, SyncGroup, job_token

HEADER = struct.Struct("!4sIQQ")


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:  # what unpickling would run
        return (open, (self.marker, "w"))


# ------------------------------------------------------------------ codec


def test_codec_round_trips_what_the_engine_sends() -> None:
    value = {"train": {"total": 1.5, "count": 4.0}, "steps": 3, "own": None, 7: b"\x00\x01",
             "val": {"auc": {"scores": np.linspace(0, 1, 5), "labels": np.array([0, 1, 1, 0, 1], np.int8)}},
             "sample": (np.arange(6, dtype=np.float32).reshape(2, 3), [np.float64(2.5), np.bool_(True)]),
             "nan": float("nan"), "names": np.array(["a", "bc"]), "big": 2 ** 80, ("k", 1): "tuple key"}
    out = decode(encode(value))
    assert out["train"] == value["train"] and out["steps"] == 3 and out["own"] is None and out[7] == b"\x00\x01"
    np.testing.assert_array_equal(out["val"]["auc"]["scores"], value["val"]["auc"]["scores"])
    assert out["val"]["auc"]["labels"].dtype == np.int8
    assert isinstance(out["sample"], tuple) and out["sample"][0].shape == (2, 3)
    assert out["sample"][1][0] == 2.5 and isinstance(out["sample"][1][0], np.float64)
    assert np.isnan(out["nan"]) and out["big"] == 2 ** 80 and out[("k", 1)] == "tuple key"
    assert out["names"].tolist() == ["a", "bc"]


def test_codec_refuses_objects_and_object_arrays() -> None:
    with pytest.raises(CodecError, match="_Evil"):
        encode({"x": _Evil("nowhere")})
    with pytest.raises(CodecError, match="object"):
        encode(np.array([{}], dtype=object))


def test_a_pickle_is_not_a_valid_encoding_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(CodecError):
        decode(pickle.dumps(_Evil(str(marker))))
    assert not marker.exists()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_codec_decodes_random_bytes_or_says_why(data: bytes) -> None:
    try:
        decode(data)
    except CodecError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
                    lambda kids: st.lists(kids) | st.tuples(kids, kids) | st.dictionaries(st.text(), kids),
                    max_leaves=20))
def test_codec_round_trips_plain_data(value: Any) -> None:
    assert decode(encode(value)) == value


# ------------------------------------------------------------------ sync group


def _group_of_two(port: int, token: str, results: dict[int, Any], delay_rank1_s: float = 0.0) -> list[threading.Thread]:
    def rank(r: int) -> None:
        try:
            if r == 1:
                time.sleep(delay_rank1_s)
            with SyncGroup.connect(r, 2, "127.0.0.1", port, token=token, timeout_s=30) as g:
                buf = np.full(1000, float(r + 1), np.float32)
                g.allreduce(buf, op="sum")
                results[r] = (float(buf[0]), g.allgather({"rank": r}))
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            results[r] = exc

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    return threads


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(15)
    try:
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
        return len(got) <= 38  # at most the listener's challenge
    except OSError:
        return True
    finally:
        sock.close()


@pytest.mark.timeout(120)
def test_strangers_during_rendezvous_are_refused_and_the_group_works(tmp_path: Path) -> None:
    port, token, results = find_free_port(), job_token(), {}
    marker = str(tmp_path / "pwned")
    evil = pickle.dumps(_Evil(marker))
    threads = _group_of_two(port, token, results, delay_rank1_s=3.0)
    hello = json.dumps({"rank": 1, "world": 2, "addr": "127.0.0.1:9", "nonce": "00"}).encode()
    silent = _connect(port)  # held open through the rendezvous: must not hold it up
    refused = {}
    for name, payload in {
        "zeros": b"\0" * 64, "1 TB header": HEADER.pack(b"ORCA", 1, 0, 1 << 40), "random": os.urandom(4096),
        "unsigned hello": HEADER.pack(b"ORCA", 1, 0, len(hello)) + hello + os.urandom(32),
        "pickled hello": HEADER.pack(b"ORCA", 1, 0, len(evil)) + evil + os.urandom(32),
        "bare pickle": evil,
    }.items():
        sock = _connect(port)
        sock.sendall(payload)
        refused[name] = _closed_by_server(sock)
    for t in threads:
        t.join(60)
    silent.close()
    assert all(refused.values()), refused
    assert results[0] == results[1] == (3.0, [{"rank": 0}, {"rank": 1}]), results
    assert not os.path.exists(marker)


@pytest.mark.timeout(120)
def test_a_worker_of_another_job_cannot_join() -> None:
    port, results = find_free_port(), {}
    errors: dict[str, BaseException] = {}  # the intruder holds a token of its own

    def intruder() -> None:
        try:
            SyncGroup.connect(1, 2, "127.0.0.1", port, token=job_token(), timeout_s=5)
        except SyncError as exc:
            errors["intruder"] = exc

    token = job_token()
    threads = _group_of_two(port, token, results, delay_rank1_s=2.0)
    time.sleep(0.3)
    intruder()
    for t in threads:
        t.join(60)
    assert "another job" in str(errors["intruder"]) or "did not prove" in str(errors["intruder"]), errors
    assert results[0] == results[1] == (3.0, [{"rank": 0}, {"rank": 1}]), results


def test_a_group_needs_a_token() -> None:
    with pytest.raises(ValueError, match="token"):
        SyncGroup.connect(0, 2, "127.0.0.1", 0, token=None)
    with pytest.raises(ValueError, match="at least 16"):
        SyncGroup.connect(0, 2, "127.0.0.1", 0, token="short")


@pytest.mark.timeout(300)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(min_size=1, max_size=4096) | st.builds(
    lambda op, seq, n, body: HEADER.pack(b"ORCA", op, seq, n) + body,
    st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 64 - 1),
    st.binary(max_size=256)), min_size=1, max_size=4))
def test_random_frames_at_the_sync_listener_neither_break_the_group_nor_grow_memory(frames: list[bytes]) -> None:
    port, token, results = find_free_port(), job_token(), {}
    tracemalloc.start()
    try:
        threads = _group_of_two(port, token, results, delay_rank1_s=0.5)
        for frame in frames:
            sock = _connect(port)
            try:
                sock.sendall(frame)
            except OSError:
                pass
            sock.close()
        for t in threads:
            t.join(60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert results[0] == results[1] == (3.0, [{"rank": 0}, {"rank": 1}]), results
    assert peak < 32 << 20, f"the rendezvous allocated {peak} bytes for strangers' frames"


# ------------------------------------------------------------------ progress server


def _send(address: tuple[str, int], data: bytes) -> None:
    with socket.create_connection(address, timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass


def test_the_progress_server_takes_only_its_reporter() -> None:
    server = ProgressServer("127.0.0.1", use_tqdm=False)
    try:
        _send(server.address, b'{"event": "epoch", "epoch": 666}\n')  # no token
        _send(server.address, b"x" * 100 + b"\n" + b'{"event": "epoch", "epoch": 667}\n')  # a wrong token
        _send(server.address, server.endpoint[2].encode() + b"\n" + b"y" * (MAX_LINE + 10))  # an endless line
        report_and_wait(server, {"event": "epoch", "epoch": 1, "loss": 0.5})
    finally:
        server.close()
    assert [e["epoch"] for e in server.events] == [1]
    assert server.refused >= 3


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=8192), min_size=1, max_size=6))
def test_random_bytes_at_the_progress_server_are_dropped(chunks: list[bytes]) -> None:
    server = ProgressServer("127.0.0.1", use_tqdm=False)
    try:
        for chunk in chunks:
            _send(server.address, chunk)
        report_and_wait(server, {"event": "epoch", "epoch": 3})
    finally:
        server.close()
    assert list(server.events) == [{"event": "epoch", "epoch": 3}]


@pytest.mark.timeout(120)
def test_a_crowd_of_strangers_neither_grows_the_progress_servers_threads_or_memory_nor_locks_out_the_reporter(
) -> None:
    """60 strangers connect and hold their connections, each sending a line that never ends (4 KB,
    no token, no newline): the server keeps at most ``max_connections`` reader threads, its memory
    stays flat, and the real reporter, arriving last, is still heard."""
    server = ProgressServer("127.0.0.1", use_tqdm=False)
    crowd: list[socket.socket] = []
    threads_before = threading.active_count()
    tracemalloc.start()
    try:
        most_threads = 0
        for _ in range(60):
            sock = socket.create_connection(server.address, timeout=5)
            with contextlib.suppress(OSError):  # the server may already have closed it to make room
                sock.sendall(b"z" * 4096)
            crowd.append(sock)
            most_threads = max(most_threads, threading.active_count() - threads_before)
        report_and_wait(server, {"event": "epoch", "epoch": 2})
        most_threads = max(most_threads, threading.active_count() - threads_before)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        for sock in crowd:
            sock.close()
        server.close()
    # its accept thread and at most max_connections readers
    assert most_threads <= server.max_connections + 1, most_threads
    assert server.refused >= 60 - server.max_connections, server.refused
    assert peak < 4 << 20, f"the server's memory grew by {peak} bytes for 60 strangers"
    assert list(server.events) == [{"event": "epoch", "epoch": 2}]


# ------------------------------------------------------------------ checkpoints


def test_a_checkpoint_round_trips_and_is_not_a_pickle(tmp_path: Path) -> None:
    path = str(tmp_path / "c.ckpt")
    state = {"w": np.arange(3.0), "b": np.zeros(1), "opt": {"lr": 0.1, "momentum": [np.ones(2)]}}
    write_checkpoint(path, 4, state)
    assert not Path(path).read_bytes().startswith(b"\x80")
    epoch, got = read_checkpoint(path)
    assert epoch == 4 and got["opt"]["lr"] == 0.1
    np.testing.assert_array_equal(got["w"], state["w"])
    assert [p.name for p in tmp_path.iterdir()] == ["c.ckpt"]  # no temporary file left


def test_a_tampered_checkpoint_is_rejected_by_load_checkpoint(tmp_path: Path) -> None:
    from test_toy_framework import NumpyEstimator

    marker = tmp_path / "pwned"
    path = tmp_path / "model-3.ckpt"
    path.write_bytes(pickle.dumps({"epoch": 3, "state": _Evil(str(marker))}))
    est = NumpyEstimator.from_numpy()
    with pytest.raises(ValueError, match="allow_pickle=True"):
        est.load_checkpoint(str(path))
    assert not marker.exists() and est.get_state() is None
    # a damaged safe checkpoint: a clear error, not garbage state
    good = tmp_path / "good.ckpt"
    write_checkpoint(str(good), 1, {"w": np.ones(4), "b": np.zeros(1)})
    good.write_bytes(good.read_bytes()[:-5])
    with pytest.raises(ValueError, match="damaged"):
        est.load_checkpoint(str(good))


def test_an_old_pickled_checkpoint_loads_only_with_allow_pickle(tmp_path: Path) -> None:
    from test_toy_framework import NumpyEstimator

    path = tmp_path / "old.ckpt"
    path.write_bytes(pickle.dumps({"epoch": 2, "state": {"w": np.ones(4), "b": np.zeros(1)}}))
    est = NumpyEstimator.from_numpy()
    est.load_checkpoint(str(path), allow_pickle=True)
    np.testing.assert_array_equal(est.get_state()["w"], np.ones(4))
    est.save_checkpoint(str(path))  # written again in the safe format
    fresh = NumpyEstimator.from_numpy()
    fresh.load_checkpoint(str(path))
    np.testing.assert_array_equal(fresh.get_state()["w"], np.ones(4))


# ------------------------------------------------------------------ the listener sampler


def test_the_listener_sampler_sees_a_child_listening_on_every_interface_and_a_loopback_one() -> None:
    """What the per-framework loopback tests rely on: a socket bound to 0.0.0.0 in a child process
    for a moment during the block is reported as exposed; one on 127.0.0.1 is seen, not exposed."""
    import subprocess
    import sys

    from orca.core.testing.listeners import ListenerSampler

    every = "0.0.0.0"  # noqa: S104 - the exposure the sampler must catch
    code = ("import socket, sys, time\n"
            "s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)\n"
            "print(s.getsockname()[1], flush=True); time.sleep(0.5)\n")
    with ListenerSampler() as sampler:
        ports = {}
        for host in (every, "127.0.0.1"):
            proc = subprocess.Popen([sys.executable, "-c", code, host], stdout=subprocess.PIPE, text=True)
            ports[host] = int(proc.stdout.readline())  # type: ignore[union-attr]
            proc.wait(10)
    assert {ports[every], ports["127.0.0.1"]} <= sampler.ports
    assert [(s.ip, s.port) for s in sampler.exposed()] == [(every, ports[every])]
    assert sampler.exposed(except_ports=[ports[every]]) == []
