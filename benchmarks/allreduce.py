"""Allreduce throughput of orca.core.sync against torch.distributed gloo, side by side.

N processes on this machine hold both a gloo process group and an Orca :class:`SyncGroup`;
for each buffer size they alternate the two (so load changes hit both alike) and report the
median time per allreduce. Throughput per worker is buffer bytes / time (the "algorithm
bandwidth"). Target: >= 0.8 of gloo for buffers of 4 MB and more (issue #4).

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

MB = 1 << 20
SIZES_MB = {True: [1, 4, 16, 64], False: [1, 4, 16, 64, 256]}
WORLDS = {True: [2], False: [2, 4]}


def _worker(rank: int, world: int, ports: tuple[int, int], sizes_mb: list[int], reps: int, q: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import numpy as np
    import torch
    import torch.distributed as dist

    from orca.core.sync import SyncGroup

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank, world_size=world)
    group = SyncGroup.connect(rank, world, "127.0.0.1", ports[1], token="allreduce-benchmark-token-0123456789", timeout_s=120)
    out: dict[int, dict[str, float]] = {}
    for size in sizes_mb:
        t = torch.ones(size * MB // 4, dtype=torch.float32)
        a = np.ones(size * MB // 4, dtype=np.float32)
        times: dict[str, list[float]] = {"orca": [], "gloo": []}
        for i in range(reps + 1):  # the first round warms both up
            for kind in ("orca", "gloo") if i % 2 == 0 else ("gloo", "orca"):
                group.barrier()
                start = time.perf_counter()
                if kind == "orca":
                    group.allreduce(a, op="sum")
                else:
                    dist.all_reduce(t)
                elapsed = time.perf_counter() - start
                if i:
                    times[kind].append(elapsed)
        out[size] = {k: statistics.median(v) for k, v in times.items()}
        del t, a
    if rank == 0:
        q.put(out)
    group.close()
    dist.destroy_process_group()


def measure(world: int, sizes_mb: list[int], reps: int) -> dict[int, dict[str, float]]:
    """Median seconds per allreduce, ``{size_mb: {"orca": s, "gloo": s}}``, for ``world`` processes."""
    from orca.core._net import find_free_port

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ports = (find_free_port(), find_free_port())
    procs = [ctx.Process(target=_worker, args=(r, world, ports, sizes_mb, reps, q)) for r in range(world)]
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
    """Rows for the benchmark suite: orca.core.sync vs gloo, per world size and buffer size."""
    reps = 3 if quick else 7
    rows = []
    for world in WORLDS[quick]:
        res = measure(world, SIZES_MB[quick], reps)
        for size, t in sorted(res.items()):
            orca_mbs, gloo_mbs = size / t["orca"], size / t["gloo"]
            ratio = orca_mbs / gloo_mbs
            rows.append({
                "part": "sync", "name": f"allreduce {size} MB, {world} workers: orca.core.sync vs gloo",
                "value": round(orca_mbs, 1), "unit": "MB/s per worker", "reference": round(gloo_mbs, 1),
                "ratio": round(ratio, 3), "target": ">= 0.8" if size >= 4 else "-",
                "note": "" if size < 4 or ratio >= 0.8 else "MISSED",
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    from harness import loadavg, write_part

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    started, load = time.perf_counter(), loadavg()
    rows = run(a.quick)
    print(f"{'comparison':<58} {'orca MB/s':>10} {'gloo MB/s':>10} {'ratio':>6}  target")
    for r in rows:
        print(f"{r['name']:<58} {r['value']:>10} {r['reference']:>10} {r['ratio']:>6}  {r['target']} {r['note']}")
    settings = {"quick": a.quick, "sizes_mb": SIZES_MB[a.quick], "workers": WORLDS[a.quick],
                "repeats": 3 if a.quick else 7}
    print(f"wrote {write_part('sync', rows, settings, None, started, load)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
