"""The driver's liveness rule (orca.core.engine.liveness), on its own: who is blamed and when.

End-to-end checks with real workers are in the conformance suite (a slow fit completes, a stalled
rank is named and stopped); these pin the rule's edges with a real heartbeat connection."""

import time

import pytest

from orca.core.engine.liveness import Liveness, beat, beating
from orca.core.engine.progress import ProgressServer

pytestmark = pytest.mark.timeout(60)


def test_a_rank_that_keeps_beating_is_never_silent_and_a_quiet_one_is_named():
    live = Liveness(2, timeout_s=1.0)
    for _ in range(12):  # 2.4 s: more than twice the timeout
        live.seen(0, {"phase": "training", "epoch": 1, "step": 3, "host": "h0", "pid": 10})
        live.seen(1, {"phase": "training", "epoch": 1, "step": 3, "host": "h1", "pid": 11})
        time.sleep(0.2)
        assert live.silent() is None
    for _ in range(7):
        live.seen(0, {"phase": "training", "epoch": 1, "step": 4})
        time.sleep(0.2)
    msg = live.silent()
    assert msg is not None and msg.startswith("Orca worker rank 1 (host h1, pid 11) made no progress")
    assert "while training (epoch 1, step 3)" in msg


def test_a_rank_waiting_in_a_collective_is_not_blamed_while_another_makes_progress():
    live = Liveness(2, timeout_s=0.3)
    live.seen(0, {"phase": "merging the epoch", "epoch": 1})  # rank 0 waits at the epoch's end
    for _ in range(5):  # rank 1 still validates, slowly
        live.seen(1, {"phase": "evaluating"})
        time.sleep(0.15)
        assert live.silent() is None
    time.sleep(0.4)  # now nobody makes progress: the collective is stuck
    msg = live.silent()
    assert msg is not None and "rank 1" in msg and "rank(s) 0 wait for it" in msg


def test_start_up_has_its_own_bound_and_a_second_process_for_a_rank_is_seen():
    live = Liveness(1, timeout_s=0.2, start_s=1.0)
    live.seen(0, {"phase": "started", "host": "h", "pid": 1})
    time.sleep(0.4)
    assert live.silent() is None  # still starting: the start-up bound applies
    live.seen(0, {"phase": "training", "host": "h", "pid": 1})
    time.sleep(0.3)
    assert "worker_timeout_s=0.2" in (live.silent() or "")
    assert live.restarted == []
    live.seen(0, {"phase": "started", "host": "h", "pid": 2})  # the task ran again in a new process
    assert live.restarted == [0]


def test_beats_travel_over_the_authenticated_channel_only_when_progress_changed():
    live = Liveness(1, timeout_s=1.5)
    server = ProgressServer("127.0.0.1", use_tqdm=False, liveness=live)
    try:
        with beating(server.endpoint, 0):
            for step in range(8):
                beat("training", epoch=1, step=step)
                time.sleep(0.15)
                assert live.silent() is None
            time.sleep(2.0)  # the heartbeat thread runs, but nothing changed: silence
            msg = live.silent()
        assert msg is not None and "step 7" in msg
    finally:
        server.close()


def test_strangers_holding_connections_do_not_lock_the_reporters_out():
    import socket

    from conftest import report_and_wait

    from orca.core.engine.progress import MAX_CONNECTIONS

    server = ProgressServer("127.0.0.1", use_tqdm=False)
    strangers = [socket.create_connection(server.address) for _ in range(MAX_CONNECTIONS + 3)]  # silent, no token
    try:
        time.sleep(0.5)
        report_and_wait(server, {"event": "epoch", "epoch": 3})
        assert list(server.events) == [{"event": "epoch", "epoch": 3}]
        assert server.refused >= 3  # the oldest strangers made room
    finally:
        for s in strangers:
            s.close()
        server.close()


def test_a_worker_stuck_in_user_code_ends_its_process_when_the_driver_stops_the_call():
    """A real worker process beats, then hangs in user code (a sleep that never returns): the
    driver's stop_workers ends it within a few heartbeats, and it says why on stderr. A worker
    whose call ended normally is not touched."""
    import subprocess
    import sys

    server = ProgressServer("127.0.0.1", use_tqdm=False, liveness=Liveness(2, timeout_s=30))
    script = (
        "import sys, time\n"
        "from orca.core.engine.liveness import beat, beating\n"
        f"with beating({tuple(server.endpoint)!r}, int(sys.argv[1])):\n"
        "    beat('training', force=True, epoch=1, step=2)\n"
        "    if sys.argv[1] == '1':\n"
        "        time.sleep(3600)\n"
        "print('done', flush=True)\n"
        "time.sleep(3600)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        assert procs[0].stdout.readline().strip() == "done"  # rank 0 left its call
        deadline = time.monotonic() + 30
        while sorted(server.liveness._pids) != [0, 1] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # rank 0's connection has closed on the server
        assert server.stop_workers() == 1
        assert procs[1].wait(timeout=10) == 1
        assert "the driver stopped this call while the worker was training" in procs[1].stderr.read()
        assert procs[0].poll() is None  # its call had ended: it runs on
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        server.close()


def test_ranks_meet_through_the_driver_each_getting_every_value_in_rank_order():
    """``progress.gather`` (what Spark barrier tasks use instead of ``allGather``): four ranks arriving
    in reverse order each get all four values by rank; two gathers of one call with different keys
    stay apart; a caller without the call's token gets nothing; a rank still waiting when the call
    ends gets a ConnectionError, not a hang."""
    import socket
    import threading

    from orca.core.engine.progress import gather

    server = ProgressServer("127.0.0.1", use_tqdm=False, liveness=Liveness(4, timeout_s=30.0))
    results: dict[tuple[str, int], object] = {}

    def rank(key: str, r: int, world: int) -> None:
        try:
            results[(key, r)] = gather(server.endpoint, r, world, key, {"rank": r, "port": 1000 + r}, 20.0)
        except Exception as exc:  # noqa: BLE001 - checked below
            results[(key, r)] = exc

    try:
        threads = []
        for r in reversed(range(4)):
            for key in ("a", "b"):
                threads.append(threading.Thread(target=rank, args=(key, r, 4)))
                threads[-1].start()
                time.sleep(0.02)
        # a stranger sends a gather without the token: it is closed, not counted as a rank
        with socket.create_connection(server.address[:2]) as stranger:
            stranger.sendall(b"not-the-token\n" + b'{"event": "gather", "rank": 0, "world": 4, "key": "a", "value": 9}\n')
        for t in threads:
            t.join(30)
        want = [{"rank": r, "port": 1000 + r} for r in range(4)]
        assert all(results[(key, r)] == want for key in ("a", "b") for r in range(4)), results
        waiting = threading.Thread(target=rank, args=("c", 0, 2))  # its peer never comes
        waiting.start()
        time.sleep(0.3)
    finally:
        server.close()
    waiting.join(30)
    assert isinstance(results[("c", 0)], ConnectionError), results[("c", 0)]


def test_the_rendezvous_is_bounded_by_the_start_timeout_alone_and_names_the_fix():
    """Ranks meeting their peers wait for each other (not blamed while one still loads its data); once
    all are silent for worker_start_timeout_s, even below worker_timeout_s, the call fails with a
    message that says they could not meet and what to check (addresses, driver_host)."""
    from orca.core.engine.liveness import MEETING

    live = Liveness(2, timeout_s=30.0, start_s=0.3)
    live.seen(0, {"phase": MEETING, "host": "h0", "pid": 1})
    for _ in range(4):  # rank 1 still loads its data: rank 0 waits, unblamed
        live.seen(1, {"phase": "loading its data", "host": "h1", "pid": 2})
        time.sleep(0.15)
        assert live.silent() is None
    live.seen(1, {"phase": MEETING, "host": "h1", "pid": 2})
    time.sleep(0.4)
    msg = live.silent() or ""
    assert msg.startswith("Orca worker rank 0 (host h0, pid 1) could not meet its peers"), msg
    assert "worker_start_timeout_s=0.3" in msg and "rank(s) 1 wait for it" in msg, msg
    assert "driver_host=" in msg and "SPARK_LOCAL_IP" in msg and "127.0.1.1" in msg, msg


def test_a_workers_failure_reaches_the_driver_before_its_result():
    """report_failure sends the worker's error over the call's channel at once: the driver's record
    holds it by rank, as error_result made it."""
    from orca.core.engine.group import error_result
    from orca.core.engine.liveness import report_failure

    live = Liveness(2, timeout_s=30.0)
    server = ProgressServer("127.0.0.1", use_tqdm=False, liveness=live)
    try:
        with beating(server.endpoint, 1):
            report_failure(error_result(RuntimeError("connect refused at 127.0.1.1:29500"), 1))
            deadline = time.monotonic() + 10
            while not live.failures and time.monotonic() < deadline:
                time.sleep(0.02)
        assert list(live.failures) == [1]
        failure = live.failures[1]
        assert failure["error"] == "RuntimeError: connect refused at 127.0.1.1:29500"
        assert failure["rank"] == 1 and "Traceback" not in failure["error"] and failure["exc_type"] == "RuntimeError"
        live.restart()  # a new call forgets them
        assert live.failures == {}
    finally:
        server.close()
