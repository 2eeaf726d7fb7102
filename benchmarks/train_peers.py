"""The peers of Orca's torch training, in a fresh process: Ray Train's ``TorchTrainer`` and Spark's
``TorchDistributor``, each used the way its documentation shows, on the same model, optimizer,
global batch, synthetic data, worker count and 1 intra-op thread per worker as ``child.py``.

- ``ray-train``: ``TorchTrainer`` with ``ScalingConfig(num_workers=N)``, the data as a Ray Dataset
  (``datasets={...}``) read per worker with ``get_dataset_shard(...).iter_torch_batches``, the model
  wrapped by ``ray.train.torch.prepare_model`` (DistributedDataParallel, gloo).
- ``torch-distributor``: ``TorchDistributor(num_processes=N, local_mode=False)`` on a local Spark
  (each process is a Spark barrier task running torchrun); it has no data path of its own, so each
  process builds its shard of the same synthetic data in memory and trains a DDP model on it.

Measured as for Orca: start-up (``cluster_s``: ``ray.init`` / Spark session), first call to the
end of rank 0's first step (``first_step_s``), process start to that step, and per-epoch times
(rank 0, DDP keeps ranks in lock-step) at each data scale. Writes JSON to ``--out``.
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()
T_PROCESS_WALL = time.time()

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle
import common

cloudpickle.register_pickle_by_value(common)


def _ddp_epochs(batches_for_epoch, rows: int, epochs: int, t_call: float, lr_scale: float = 1.0) -> dict:
    """The DDP training loop both peers run; ``batches_for_epoch(e)`` yields (x, y) tensors."""
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(common.make_model())
    opt = common.make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    out, first = [], None
    for e in range(epochs):
        dist.barrier()
        t0 = time.perf_counter()
        for xb, yb in batches_for_epoch(e):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            float(loss.detach())
            if first is None:
                first = time.time()
        dist.barrier()
        out.append({"epoch_time_s": time.perf_counter() - t0, "num_samples": rows})
    return {"epochs": out, "first_step_wall": first, "t_call": t_call}


# ------------------------------------------------------------------------------------ Ray Train


def _ray_train_loop(config: dict) -> None:
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(common.make_model())
    opt = common.make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    local_bs = config["batch_size"] // ray.train.get_context().get_world_size()
    rank = ray.train.get_context().get_world_rank()
    result: dict = {"first_step_wall": None, "scales": {}}
    for s, epochs, rows in config["plan"]:
        shard = ray.train.get_dataset_shard(f"x{s}")
        eps = []
        for _ in range(epochs):
            dist.barrier()
            t0 = time.perf_counter()
            for batch in shard.iter_torch_batches(batch_size=local_bs, local_shuffle_buffer_size=local_bs * 4):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(batch["features"]), batch["label"])
                loss.backward()
                opt.step()
                float(loss.detach())
                if result["first_step_wall"] is None:
                    result["first_step_wall"] = time.time()
                    if rank == 0:
                        with open(config["stamp"], "w") as fh:
                            fh.write(repr(result["first_step_wall"]))
            dist.barrier()
            eps.append({"epoch_time_s": time.perf_counter() - t0, "num_samples": rows})
        result["scales"][str(s)] = eps
    if rank == 0:
        with open(config["result"], "w") as fh:
            json.dump(result, fh)


def run_ray_train(a: argparse.Namespace, scales: list[int], res: dict, tmp: str) -> None:
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    t = time.perf_counter()
    # Logical CPUs leave room for Ray Train's controller and Ray Data's coordinator: compute
    # threads are fixed by torch.set_num_threads(1) in each worker, not by Ray's accounting.
    ray.init(num_cpus=a.workers + 2, include_dashboard=False, address="local", log_to_driver=False)
    res["cluster_s"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        datasets, plan = {}, []
        for s in scales:
            x, y = common.synthetic(a.rows * s)
            table = pa.table({"features": ArrowTensorArray.from_numpy(x), "label": pa.array(y)})
            datasets[f"x{s}"] = ray.data.from_arrow(table).materialize()
            plan.append((s, common.scale_epochs(s, a.epochs) * a.rounds, len(x)))
        res["data_s"] = time.perf_counter() - t
        stamp, result = os.path.join(tmp, "stamp"), os.path.join(tmp, "result.json")
        trainer = TorchTrainer(
            _ray_train_loop,
            train_loop_config={"batch_size": a.batch_size, "plan": plan, "stamp": stamp, "result": result},
            scaling_config=ScalingConfig(num_workers=a.workers, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=os.path.join(tmp, "ray_results"), name="bench"),
            datasets=datasets,
        )
        t_wall, t = time.time(), time.perf_counter()
        trainer.fit()
        res["fit_wall_s"] = time.perf_counter() - t
        with open(result) as fh:
            out = json.load(fh)
        res["first_step_s"] = out["first_step_wall"] - t_wall
        res["process_to_first_step_s"] = out["first_step_wall"] - T_PROCESS_WALL
        res["scales"] = {s: {"rows": rows, "rounds": _split_rounds(out["scales"][str(s)], a.rounds)}
                         for s, _, rows in plan}
    finally:
        ray.shutdown()


# ------------------------------------------------------------------------------ TorchDistributor


def _distributor_fn(rows: int, scales: list[int], batch_size: int, epochs_per_scale: list[int], t_call: float):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    out: dict = {"first_step_wall": None, "scales": {}}
    for s, epochs in zip(scales, epochs_per_scale, strict=True):
        x, y = common.synthetic(rows * s)
        n = len(x)
        sl = slice(rank * n // world, (rank + 1) * n // world)
        xt, yt = torch.from_numpy(x[sl]), torch.from_numpy(y[sl])
        local_bs = batch_size // world

        def batches(e: int, xt=xt, yt=yt, local_bs=local_bs):
            perm = torch.randperm(len(xt))
            for start in range(0, len(xt), local_bs):
                idx = perm[start:start + local_bs]
                yield xt[idx], yt[idx]

        r = _ddp_epochs(batches, n, epochs, t_call)
        if out["first_step_wall"] is None:
            out["first_step_wall"] = r["first_step_wall"]
        out["scales"][str(s)] = r["epochs"]
    dist.destroy_process_group()
    return out if rank == 0 else None


def run_distributor(a: argparse.Namespace, scales: list[int], res: dict) -> None:
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master(f"local[{a.workers}]").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    res["cluster_s"] = time.perf_counter() - t
    try:
        epochs = [common.scale_epochs(s, a.epochs) * a.rounds for s in scales]
        t_wall, t = time.time(), time.perf_counter()
        out = TorchDistributor(num_processes=a.workers, local_mode=False, use_gpu=False).run(
            _distributor_fn, a.rows, scales, a.batch_size, epochs, t_wall)
        res["fit_wall_s"] = time.perf_counter() - t
        res["first_step_s"] = out["first_step_wall"] - t_wall
        res["process_to_first_step_s"] = out["first_step_wall"] - T_PROCESS_WALL
        res["scales"] = {s: {"rows": a.rows * s, "rounds": _split_rounds(out["scales"][str(s)], a.rounds)}
                         for s in scales}
    finally:
        spark.stop()


def _split_rounds(epochs: list[dict], rounds: int) -> list[dict]:
    """One long run of ``rounds * E`` epochs, cut into ``rounds`` pieces shaped like child.py's rounds
    (each piece's first epoch is left out of steady state, as for Orca)."""
    per = max(1, len(epochs) // rounds)
    return [{"peer": epochs[i * per:(i + 1) * per]} for i in range(rounds)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=["ray-train", "torch-distributor"], required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--scales", default="1")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    scales = [int(s) for s in a.scales.split(",")]
    res: dict = {"system": a.system, "workers": a.workers, "threads_per_worker": 1, "rows": a.rows,
                 "batch_size": a.batch_size, "epochs": a.epochs}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if a.system == "ray-train":
            run_ray_train(a, scales, res, tmp)
        else:
            run_distributor(a, scales, res)
    res["total_s"] = time.perf_counter() - T_PROCESS
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
