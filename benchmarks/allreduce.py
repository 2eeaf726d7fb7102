"""Allreduce throughput of orca.core.sync and Horovod against torch.distributed gloo, side by side.

N processes on this machine hold a gloo process group, an Orca :class:`SyncGroup` and, where
``horovod.torch`` imports, Horovod (its gloo controller, started from Orca's rendezvous as the
``horovod`` backend starts it); for each buffer size they take turns (so load changes hit all
alike) and report the median time per allreduce. Throughput per worker is buffer bytes / time
(the "algorithm bandwidth"). Target: >= 0.8 of gloo for buffers of 4 MB and more (issue #4);
Horovod's rows are measurements (issue #17), without a target.

    python benchmarks/allreduce.py [--quick]     (torch environment; writes results/sync.json)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import horovod_missing  # noqa: E402 - after the path

MB = 1 << 20
SIZES_MB = {True: [1, 4, 16, 64], False: [1, 4, 16, 64, 256]}
WORLDS = {True: [2], False: [2, 4]}


def _start_horovod(rank: int, world: int, ports: tuple[int, ...], group: Any) -> tuple[Any, Any]:
    """``hvd.init()`` in this plain process, as the ``horovod`` backend joins (``orca.core.horovod.join``:
    rank 0 serves Horovod's rendezvous store on ``ports[0]``). Returns ``(hvd, store or None)``."""
    import horovod.torch as hvd

    from orca.core.engine.runner import make_rendezvous
    from orca.core.horovod import join

    rdv = make_rendezvous(rank, ["127.0.0.1"] * world, ports, sync_port=0)
    return hvd, join(hvd, rdv, group, timeout_s=120)


def _worker(rank: int, world: int, ports: tuple[int, int], hvd_ports: tuple[int, ...] | None, sizes_mb: list[int],
            reps: int, q: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import numpy as np
    import torch
    import torch.distributed as dist

    from orca.core.horovod import leave
    from orca.core.sync import SyncGroup

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank, world_size=world)
    group = SyncGroup.connect(rank, world, "127.0.0.1", ports[1], token="allreduce-benchmark-token-0123456789", timeout_s=120)
    hvd, store = _start_horovod(rank, world, hvd_ports, group) if hvd_ports else (None, None)
    kinds = ("orca", "gloo") + (("horovod",) if hvd is not None else ())
    out: dict[int, dict[str, float]] = {}
    for size in sizes_mb:
        t = torch.ones(size * MB // 4, dtype=torch.float32)  # gloo's and Horovod's buffer
        a = np.ones(size * MB // 4, dtype=np.float32)
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(reps + 1):  # the first round warms every kind up
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:  # each kind takes every place in turn
                group.barrier()
                start = time.perf_counter()
                if kind == "orca":
                    group.allreduce(a, op="sum")
                elif kind == "gloo":
                    dist.all_reduce(t)
                else:
                    hvd.allreduce_(t, op=hvd.Sum)
                elapsed = time.perf_counter() - start
                if i:
                    times[kind].append(elapsed)
        out[size] = {k: statistics.median(v) for k, v in times.items()}
        del t, a
    if rank == 0:
        q.put(out)
    if hvd is not None:
        hvd.shutdown()
        group.barrier()  # every rank left Horovod before rank 0 stops its store
        leave(hvd, store)
    group.close()
    dist.destroy_process_group()


def measure(world: int, sizes_mb: list[int], reps: int, horovod: bool = False) -> dict[int, dict[str, float]]:
    """Median seconds per allreduce, ``{size_mb: {"orca": s, "gloo": s[, "horovod": s]}}``, for ``world``
    processes (Horovod's with ``horovod=True``)."""
    from orca.core._net import find_free_ports

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    drawn = find_free_ports(2 + (world if horovod else 0))  # one draw: no two coincide
    ports = tuple(drawn[:2])
    hvd_ports = tuple(drawn[2:]) if horovod else None  # rank 0's: the store
    procs = [ctx.Process(target=_worker, args=(r, world, ports, hvd_ports, sizes_mb, reps, q)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        result = q.get(timeout=900)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    return result


def run(quick: bool) -> list[dict[str, Any]]:
    """Rows for the benchmark suite: orca.core.sync vs gloo, then Horovod vs gloo, per world size and
    buffer size (Horovod: one row saying why, where it does not import)."""
    reps = 3 if quick else 7
    missing = horovod_missing()
    rows, hvd_rows = [], []
    for world in WORLDS[quick]:
        res = measure(world, SIZES_MB[quick], reps, horovod=missing is None)
        for size, t in sorted(res.items()):
            orca_mbs, gloo_mbs = size / t["orca"], size / t["gloo"]
            ratio = orca_mbs / gloo_mbs
            rows.append({
                "part": "sync", "name": f"allreduce {size} MB, {world} workers: orca.core.sync vs gloo",
                "value": round(orca_mbs, 1), "unit": "MB/s per worker", "reference": round(gloo_mbs, 1),
                "ratio": round(ratio, 3), "target": ">= 0.8" if size >= 4 else "-",
                "note": "" if size < 4 or ratio >= 0.8 else "MISSED",
            })
            if "horovod" in t:
                hvd_mbs = size / t["horovod"]
                hvd_rows.append({
                    "part": "sync", "name": f"allreduce {size} MB, {world} workers: horovod vs gloo",
                    "value": round(hvd_mbs, 1), "unit": "MB/s per worker", "reference": round(gloo_mbs, 1),
                    "ratio": round(hvd_mbs / gloo_mbs, 3), "target": "-", "note": "",
                })
    if missing:
        hvd_rows.append({"part": "sync", "name": "allreduce: horovod vs gloo", "value": None, "unit": "MB/s per worker",
                         "reference": None, "ratio": None, "target": "-", "note": missing})
    return rows + hvd_rows


def main(argv: list[str] | None = None) -> int:
    from harness import loadavg, write_part

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    started, load = time.perf_counter(), loadavg()
    rows = run(a.quick)
    print(f"{'comparison':<58} {'MB/s':>10} {'gloo MB/s':>10} {'ratio':>6}  target")
    for r in rows:
        v, ref, rat = (("n/a" if r[k] is None else r[k]) for k in ("value", "reference", "ratio"))
        print(f"{r['name']:<58} {v:>10} {ref:>10} {rat:>6}  {r['target']} {r['note']}")
    settings = {"quick": a.quick, "sizes_mb": SIZES_MB[a.quick], "workers": WORLDS[a.quick],
                "repeats": 3 if a.quick else 7, "horovod": horovod_missing() or "horovod.torch (gloo controller)"}
    print(f"wrote {write_part('sync', rows, settings, None, started, load)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
