"""Reference point without Orca: the same model and data trained by plain PyTorch, once in one
process (1 thread) and once with DistributedDataParallel over 2 processes x 1 thread (gloo on
loopback), interleaved. It shows what 2-worker efficiency this machine allows at all.

Run by ``benchmarks/run.py``; writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def _ddp_worker(rank: int, world: int, port: int, rows: int, batch_size: int, epochs: int, queue) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    x, y = common.synthetic(rows)
    shard = slice(rank * rows // world, (rank + 1) * rows // world)
    xt, yt = torch.from_numpy(x[shard]), torch.from_numpy(y[shard])
    model = nn.parallel.DistributedDataParallel(common.make_model())
    opt = common.make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    local_bs = batch_size // world
    out = []
    for _ in range(epochs):
        dist.barrier()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xt))
        for start in range(0, len(xt), local_bs):
            idx = perm[start:start + local_bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            float(loss.detach())
        dist.barrier()
        out.append({"epoch_time_s": time.perf_counter() - t0, "num_samples": rows})
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def ddp_epochs(rows: int, batch_size: int, epochs: int, world: int = 2) -> list[dict]:
    from orca.core._net import find_free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = find_free_port("127.0.0.1")
    procs = [ctx.Process(target=_ddp_worker, args=(r, world, port, rows, batch_size, epochs, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    x, y = common.synthetic(a.rows)
    rounds = []
    for _ in range(a.rounds):
        single = common.native_epochs(x, y, a.batch_size, a.epochs, threads=1)
        ddp = ddp_epochs(a.rows, a.batch_size, a.epochs)
        rounds.append({"native": single, "ddp2": ddp})
    with open(a.out, "w") as fh:
        json.dump({"rows": a.rows, "batch_size": a.batch_size, "epochs": a.epochs, "rounds": rounds}, fh, indent=1)


if __name__ == "__main__":
    main()
