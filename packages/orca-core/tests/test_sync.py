"""orca.core.sync: allreduce / broadcast / allgather among real Ray workers and Spark barrier
tasks, checked against numpy; a dead or stuck worker makes the others fail within the timeout."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from orca.core._net import find_free_port
from orca.core.sync import SyncError, SyncGroup, shard_bounds
from orca.core.testing.clusters import run_python
from orca.core.testing.sync_checks import TEST_TOKEN

MB64 = 16 << 20  # float32 elements in 64 MB
# 1 element up to 64 MB, sizes that N in 2..4 does not divide, sizes below N
CASES = [("float32", 1), ("float64", 2), ("float32", 7), ("float64", 1001), ("float32", 1_000_003),
         ("float32", MB64)]


def _assert_reports(reports: list[dict], world: int) -> None:
    assert sorted(r["rank"] for r in reports) == list(range(world))
    for rep in reports:
        bad = {k: v for k, v in rep["errors"].items() if v > 1e-6}
        assert not bad, f"rank {rep['rank']} differs from numpy: {bad}"
        assert rep["broadcast_ok"]
        assert [g["rank"] for g in rep["gathered"]] == list(range(world))
        assert rep["digests"] == reports[0]["digests"], "ranks hold different results"
    assert set(reports[0]["errors"]) == {f"{d}/{n}/{op}" for d, n in CASES for op in ("sum", "mean")}


def test_shard_bounds_cover_the_buffer():
    for n in (0, 1, 5, 7, 1000003):
        for world in (1, 2, 3, 4):
            b = shard_bounds(n, world)
            sizes = np.diff(b)
            assert b[0] == 0 and b[-1] == n and sizes.max() - sizes.min() <= 1


def test_group_of_one_is_a_no_op():
    group = SyncGroup.connect(0, 1, "127.0.0.1", 0, token=TEST_TOKEN)
    buf = np.arange(5, dtype=np.float32)
    assert group.allreduce(buf, op="mean") is buf and buf.tolist() == [0, 1, 2, 3, 4]
    assert group.allgather("x") == ["x"]
    group.barrier()


def test_bad_buffers_are_rejected():
    group = SyncGroup.connect(0, 1, "127.0.0.1", 0, token=TEST_TOKEN)
    with pytest.raises(TypeError, match="float32 or float64"):
        group.allreduce(np.arange(4))
    with pytest.raises(ValueError, match="contiguous"):
        group.allreduce(np.zeros((4, 4), np.float32)[:, 1])
    with pytest.raises(ValueError, match="'mean' or 'sum'"):
        group.allreduce(np.zeros(4, np.float32), op="max")
    with pytest.raises(ValueError, match="outside"):
        SyncGroup.connect(3, 2, "127.0.0.1", 0, token=TEST_TOKEN)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_allreduce_on_ray_workers(ray_runtime, world):
    import ray

    from orca.core.testing.sync_checks import check_allreduce

    port = find_free_port()
    task = ray.remote(num_cpus=0, max_retries=0)(check_allreduce)
    reports = ray.get([task.remote(r, world, "127.0.0.1", port, CASES) for r in range(world)], timeout=240)
    _assert_reports(reports, world)
    assert len({g["pid"] for g in reports[0]["gathered"]}) == world  # separate processes


SPARK_DRIVER = textwrap.dedent(
    """
    import json, sys
    from orca.core import init_orca_context, stop_orca_context
    from orca.core._net import find_free_port
    from orca.core.testing.sync_checks import check_allreduce

    cases = [tuple(c) for c in json.loads(sys.argv[1])]
    ctx = init_orca_context(cluster_mode="local", cores=4, memory="2g")
    sc = ctx.spark_session().sparkContext
    out = {}
    for world in (2, 3):  # (every world 1-4 runs on Ray above: here, an even and an odd ring in barrier tasks)
        port = find_free_port()

        def body(rank, _rows, world=world, port=port):
            yield check_allreduce(rank, world, "127.0.0.1", port, cases)

        out[world] = sc.parallelize(range(world), world).barrier().mapPartitionsWithIndex(body).collect()
    stop_orca_context()
    print(json.dumps(out))
    """
)


@pytest.mark.timeout(300)
def test_allreduce_in_spark_barrier_tasks():
    """N = 2 and 3 Spark barrier tasks (a local[4] context of its own: barrier stages need N slots)."""
    out = run_python(SPARK_DRIVER.replace("sys.argv[1]", repr(json.dumps(CASES))), timeout_s=280)
    for world in (2, 3):
        reports = out[str(world)]
        _assert_reports(reports, world)
        assert len({g["pid"] for g in reports[0]["gathered"]}) == world


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["die", "stall"])
def test_a_dead_or_stuck_worker_fails_the_others_within_the_timeout(ray_runtime, mode):
    import ray

    from orca.core.testing.sync_checks import check_failure

    world, victim, timeout_s = 3, 2, 6.0
    port = find_free_port()
    task = ray.remote(num_cpus=0, max_retries=0)(check_failure)
    refs = [task.remote(r, world, "127.0.0.1", port, victim=victim, mode=mode, timeout_s=timeout_s)
            for r in range(world)]
    survivors = ray.get([refs[r] for r in range(world) if r != victim], timeout=60)
    ray.cancel(refs[victim], force=True)
    for rep in survivors:
        assert rep["error"] in ("PeerLostError", "SyncTimeoutError"), rep
        assert rep["after_s"] < timeout_s + 3, rep
        assert "rank" in rep["message"]
    if mode == "die":  # the dead peer's sockets close: no need to wait for the timeout
        assert min(rep["after_s"] for rep in survivors) < timeout_s / 2, survivors
    else:
        assert any(rep["error"] == "SyncTimeoutError" for rep in survivors), survivors


def _two_ranks(body, errors_of) -> dict[int, BaseException]:
    """Run ``body(rank, group)`` for ranks 0 and 1 of an in-process group (a thread each); return
    the ``errors_of`` exceptions each rank raised, by rank."""
    import threading

    port = find_free_port()
    errors: dict[int, BaseException] = {}

    def rank(r: int) -> None:
        try:
            with SyncGroup.connect(r, 2, "127.0.0.1", port, token=TEST_TOKEN, timeout_s=10) as g:
                body(r, g)
        except errors_of as exc:
            errors[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_mismatched_buffers_get_a_clear_error():
    """Two ranks passing different sizes: both raise SyncError naming the sizes, no hang."""
    errors = _two_ranks(lambda r, g: g.allreduce(np.ones(10 + r, np.float32)), SyncError)
    assert set(errors) == {0, 1}
    assert any("same size and dtype" in str(e) for e in errors.values()), errors


@pytest.mark.timeout(60)
def test_a_barrier_message_that_announces_a_payload_is_refused_before_it_is_read():
    """Rank 1 sends a barrier frame that claims 1 TiB: rank 0's barrier fails at once with a
    SyncError naming the sizes (it allocates nothing for it); barriers of honest ranks pass."""
    from orca.core.sync.group import _BARRIER, HEADER, MAGIC

    passed: list[int] = []

    def body(r, g):
        g.barrier()  # an honest one first
        passed.append(r)
        if r == 1:
            g._peers[0].sendall(HEADER.pack(MAGIC, _BARRIER, g._next(), 1 << 40))
            g._peers[0].recv(1)  # wait for rank 0 to close on us
        else:
            g.barrier()

    errors = _two_ranks(body, (SyncError, OSError))
    assert sorted(passed) == [0, 1]
    assert isinstance(errors.get(0), SyncError), errors
    assert "expects 0 bytes in barrier" in str(errors[0]) and str(1 << 40) in str(errors[0]), errors


@pytest.mark.timeout(60)
def test_a_peer_that_never_arrives_fails_the_rendezvous_within_its_timeout_naming_it():
    """Rank 0 of a group of 3 waits for ranks 1 and 2; only rank 1 comes. Rank 0 fails once the
    sync timeout passes (not before, not long after), naming rank 2 as the one that never joined."""
    import threading
    import time

    from orca.core.sync import SyncGroup, SyncTimeoutError, job_token

    port, token, timeout_s, errors = find_free_port(), job_token(), 3.0, {}

    def rank(r):
        try:
            SyncGroup.connect(r, 3, "127.0.0.1", port, token=token, timeout_s=timeout_s).close()
        except Exception as exc:  # noqa: BLE001 - recorded and checked below
            errors[r] = (exc, time.monotonic() - t0)

    t0 = time.monotonic()
    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    exc, after_s = errors[0]
    assert isinstance(exc, SyncTimeoutError), repr(exc)
    assert "ranks [2] did not join the sync group" in str(exc), str(exc)
    assert timeout_s <= after_s < timeout_s + 5, after_s
