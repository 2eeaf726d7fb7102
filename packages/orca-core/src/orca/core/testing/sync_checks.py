"""Worker bodies that check :class:`orca.core.sync.SyncGroup` inside real Ray actors and Spark
tasks (importable on every worker, so tests ship no code by value).

Each check builds the group from its rank, runs a scenario and returns a JSON-able report;
the test on the driver asserts on the reports of all ranks.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

import numpy as np

from orca.core.sync import SyncError, SyncGroup

#: the secret the ranks of these checks share (a real job's comes from orca.core.sync.job_token())
TEST_TOKEN = "orca-sync-checks-token-0123456789abcdef"


def rank_buffer(rank: int, n: int, dtype: str, seed: int = 0) -> np.ndarray:
    """The deterministic buffer rank ``rank`` contributes (any rank can rebuild any other's)."""
    return np.random.default_rng([seed, rank, n]).standard_normal(n).astype(dtype)


def check_allreduce(rank: int, world: int, master_addr: str, master_port: int, cases: list[tuple[str, int]],
                    timeout_s: float = 60.0) -> dict[str, Any]:
    """allreduce (sum and mean), broadcast, allgather and barrier against numpy.

    Args:
        cases: ``(dtype, number of elements)`` pairs to all-reduce.

    Returns:
        ``{"rank", "errors": {"<dtype>/<n>/<op>": max relative error vs numpy}, "digests": {same keys:
        sha256 of the result}, "gathered", "broadcast_ok"}``.
    """
    errors: dict[str, float] = {}
    digests: dict[str, str] = {}
    with SyncGroup.connect(rank, world, master_addr, master_port, token=TEST_TOKEN, timeout_s=timeout_s) as group:
        for dtype, n in cases:
            expected = rank_buffer(0, n, dtype).astype(np.float64)
            for r in range(1, world):
                expected += rank_buffer(r, n, dtype)
            for op in ("sum", "mean"):
                buf = rank_buffer(rank, n, dtype)
                out = group.allreduce(buf, op=op)
                want = expected / world if op == "mean" else expected
                scale = max(1.0, float(np.abs(want).max())) if n else 1.0
                errors[f"{dtype}/{n}/{op}"] = float(np.abs(out - want).max() / scale) if n else 0.0
                digests[f"{dtype}/{n}/{op}"] = hashlib.sha256(out.tobytes()).hexdigest()
                del buf, out
        weights = np.full(1001, float(rank), np.float64)
        group.broadcast(weights, root=0)
        gathered = group.allgather({"rank": rank, "pid": os.getpid()})
        group.barrier()
    return {"rank": rank, "errors": errors, "digests": digests, "gathered": gathered, "broadcast_ok": bool((weights == 0).all())}


def check_failure(rank: int, world: int, master_addr: str, master_port: int, *, victim: int, mode: str,
                  timeout_s: float, n: int = 4 << 20) -> dict[str, Any]:
    """Run allreduces in a loop while rank ``victim`` dies (``mode="die"``: its process exits in
    the middle of a step) or hangs (``mode="stall"``: it stops calling allreduce).

    Returns (on the ranks that survive):
        ``{"rank", "error": exception class name, "message", "after_s": seconds from the victim's
        failure to this rank's error}``.
    """
    group = SyncGroup.connect(rank, world, master_addr, master_port, token=TEST_TOKEN, timeout_s=timeout_s)
    buf = np.ones(n, np.float32)
    group.allreduce(buf)
    group.barrier()  # everyone is connected and stepping: now fail
    failed_at = time.time() + 0.3
    if rank == victim:
        if mode == "die":
            threading.Timer(0.3, lambda: os._exit(1)).start()
            while True:
                group.allreduce(buf)
        time.sleep(timeout_s * 3)  # stall: never call allreduce again
        return {"rank": rank, "error": None}
    try:
        while True:
            group.allreduce(buf)
    except SyncError as exc:
        return {"rank": rank, "error": type(exc).__name__, "message": str(exc),
                "after_s": time.time() - failed_at}
    finally:
        group.close()
