"""The peers of ``memory.py``'s Orca fits, and what every measurement there shares.

Each peer trains the same model on the same Parquet files as Orca (Linear 256 -> 1, MSE, SGD
lr 0.01, global batch 256, 2 workers x 1 thread, 2 epochs), the way its documentation shows
for a Spark DataFrame or Parquet input:

- ``torch-distributor``: ``TorchDistributor(num_processes=2, local_mode=False)._train_on_dataframe``
  (the pyspark API that hands each DataFrame partition to one training process: it needs
  ``local_mode=False``); in the training function ``_get_spark_partition_data_loader``
  (pyspark's DataLoader over the partition, which Spark first writes to an Arrow file on
  local disk). Rows come in partition order (that loader does not shuffle).
- ``ray-train``: ``TorchTrainer`` with ``datasets={"train": ray.data.read_parquet(dir)}``, each
  worker iterating ``get_dataset_shard("train").iter_torch_batches`` with a local shuffle buffer
  of 4 batches (as ``train_peers.py``); the model wrapped by ``prepare_model`` (DDP, gloo).

Every training process writes :func:`worker_report` (its pid, ``VmHWM``, per-epoch seconds)
when it ends; the parent's :class:`AnonPeaks` gives the pid's peak anonymous memory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from orca.core.testing.anon import AnonPeaks, proc_status

WIDTH = 256  # float32 features: 1 KB a row
BATCH = 256  # the global batch
EPOCHS = 2
WORKERS = 2
LR = 0.01


# ------------------------------------------------------------------------ memory, per process


def worker_report(out_dir: str, name: str, **extra: Any) -> None:
    """Called by a training process as it ends: its pid and peak RSS, for the parent."""
    status = proc_status()
    Path(out_dir, f"{name}.json").write_text(json.dumps(
        {"pid": os.getpid(), "vmhwm_mb": status["VmHWM"], "rss_anon_end_mb": status["RssAnon"], **extra}))


def read_reports(out_dir: str, peaks: AnonPeaks) -> list[dict[str, Any]]:
    """Every report under ``out_dir``, each with the peak anonymous RSS its pid reached."""
    reports = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("rank*.json"))]
    for r in reports:
        r["anon_peak_mb"] = peaks.peak_mb(r["pid"])
    return reports


# ------------------------------------------------------------------------------ TorchDistributor


def _distributor_train(out_dir: str, rows_per_worker: int) -> None:
    import torch
    import torch.distributed as dist
    from pyspark.ml.torch.distributor import _get_spark_partition_data_loader
    from torch import nn

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(WIDTH, 1))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.MSELoss()
    loader = _get_spark_partition_data_loader(rows_per_worker, BATCH // world)
    epoch_s = []
    for _ in range(EPOCHS):
        dist.barrier()
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x.float()), y.float().view(-1, 1))
            loss.backward()
            opt.step()
        dist.barrier()
        epoch_s.append(time.perf_counter() - t0)
    worker_report(out_dir, f"rank{rank}", epoch_s=epoch_s)
    dist.destroy_process_group()


def run_distributor(rows: int, data_dir: str, out_dir: str) -> list[float]:
    """Train under TorchDistributor on the Parquet files; rank 0's epoch seconds (from the reports)."""
    import cloudpickle
    import memory_peers
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(memory_peers)
    spark = (SparkSession.builder.master(f"local[{WORKERS}]").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = read_parquet(spark, data_dir)
        TorchDistributor(num_processes=WORKERS, local_mode=False, use_gpu=False)._train_on_dataframe(
            memory_peers._distributor_train, df, out_dir, rows // WORKERS)
    finally:
        spark.stop()
    return json.loads(Path(out_dir, "rank0.json").read_text())["epoch_s"]


def read_parquet(spark: Any, data_dir: str) -> Any:
    """The Parquet files (one per worker) as a DataFrame of exactly ``WORKERS`` equal partitions."""
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4g")  # one partition per file, up to x64's 1 GB
    df = spark.read.parquet(data_dir)
    if df.rdd.getNumPartitions() != WORKERS:
        raise RuntimeError(f"{data_dir} read as {df.rdd.getNumPartitions()} partitions, not {WORKERS}: "
                           "raise spark.sql.files.maxPartitionBytes")
    return df


# ------------------------------------------------------------------------------------ Ray Train


def _ray_train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Linear(WIDTH, 1))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.MSELoss()
    ctx = ray.train.get_context()
    local_bs = BATCH // ctx.get_world_size()
    shard = ray.train.get_dataset_shard("train")
    epoch_s = []
    for _ in range(EPOCHS):
        dist.barrier()
        t0 = time.perf_counter()
        for batch in shard.iter_torch_batches(batch_size=local_bs, local_shuffle_buffer_size=local_bs * 4):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(batch["features"]), batch["label"].view(-1, 1))
            loss.backward()
            opt.step()
        dist.barrier()
        epoch_s.append(time.perf_counter() - t0)
    worker_report(config["out_dir"], f"rank{ctx.get_world_rank()}", epoch_s=epoch_s)


def run_ray_train(rows: int, data_dir: str, out_dir: str) -> list[float]:
    """Train with Ray Train on ``ray.data.read_parquet`` of the files; rank 0's epoch seconds."""
    import cloudpickle
    import memory_peers
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    cloudpickle.register_pickle_by_value(memory_peers)
    # logical CPUs for Ray Data's read tasks besides the 2 workers (as train_peers.py)
    ray.init(num_cpus=WORKERS + 2, include_dashboard=False, address="local", log_to_driver=False)
    try:
        ds = ray.data.read_parquet(data_dir)
        TorchTrainer(memory_peers._ray_train_loop, train_loop_config={"out_dir": out_dir},
                     scaling_config=ScalingConfig(num_workers=WORKERS, resources_per_worker={"CPU": 1}),
                     run_config=RunConfig(storage_path=os.path.join(out_dir, "ray_results"), name="memory"),
                     datasets={"train": ds}).fit()
    finally:
        ray.shutdown()
    return json.loads(Path(out_dir, "rank0.json").read_text())["epoch_s"]
