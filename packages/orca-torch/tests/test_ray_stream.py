"""A cached DataFrame whose share is past ``worker_data_memory_mb`` streams into a ``ray`` actor a
block at a time, as it does into the Spark launchers' workers (issue #37): the anonymous memory
of the Spark task that moves a partition into Ray and of the actor stays flat as the data grows
8x. (The task used to gather its whole partition and put it into Ray as one object.)"""

import json
import os

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch import nn

from orca.core import OrcaContext, release_warm_workers
from orca.core.plugin import Callback
from orca.core.testing.anon import AnonPeaks
from orca.torch import Estimator

WIDTH = 256  # float32 features: 1 KB a row


class _Pid(Callback):
    """Writes the training process's pid when training begins (its share has loaded)."""

    def __init__(self, out):
        self.out = out

    def on_train_begin(self, logs=None):
        with open(os.path.join(self.out, f"rank{self.rank}.json"), "w") as fh:
            json.dump({"pid": os.getpid()}, fh)


def _one_process(x, y):
    torch.manual_seed(0)
    model = nn.Linear(WIDTH, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(0, len(x), 1024):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.from_numpy(x[i:i + 1024])), torch.from_numpy(y[i:i + 1024])[:, None]).backward()
        opt.step()
    return model


@pytest.mark.timeout(300)
def test_a_cached_dataframe_share_over_worker_data_memory_mb_streams_into_a_ray_actor(spark, tmp_path):
    """One worker, worker_data_memory_mb=8, a cached single-partition DataFrame of 12 MB, then of
    96 MB: the peak anonymous memory (sampled from outside, loading included) of the Spark task
    that moves the partition into Ray and of the actor that trains on it grows by less than 24 MB
    for the 84 MB more data, each fit trains on every row, and
    the 96 MB one (three blocks) ends at the weights of one process's SGD steps on the rows in order."""

    def _rows(batches):  # (nested: Spark sends it by value)
        for b in batches:
            ids = b.column("id").to_numpy()
            if not len(ids):
                continue
            x = np.random.default_rng(int(ids[0])).standard_normal((len(ids), WIDTH), dtype=np.float32)
            offsets = pa.array(np.arange(0, x.size + 1, WIDTH, dtype=np.int32))
            yield pa.RecordBatch.from_arrays([pa.ListArray.from_arrays(offsets, pa.array(x.reshape(-1))),
                                              pa.array(x[:, :8].sum(1))], ["features", "label"])

    saved = OrcaContext.worker_data_memory_mb
    OrcaContext.worker_data_memory_mb = 8
    peaks = []
    try:
        for rows in (12_288, 98_304):
            df = spark.range(0, rows, numPartitions=1).mapInArrow(_rows, "features array<float>, label float").cache()
            assert df.count() == rows
            out = tmp_path / str(rows)
            out.mkdir()
            release_warm_workers()  # a fresh actor for each size, its whole life watched
            torch.manual_seed(0)
            model = nn.Linear(WIDTH, 1)
            with AnonPeaks() as watch:
                est = Estimator.from_torch(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                           loss=nn.MSELoss(), backend="ray", workers_per_node=1, use_tqdm=False)
                try:
                    hist = est.fit(df, epochs=1, batch_size=1024, feature_cols=["features"], label_cols=["label"],
                                   shuffle=False, callbacks=[_Pid(str(out))])
                    trained = est.get_model()
                finally:
                    est.shutdown()
                    release_warm_workers()
            if rows > 50_000:  # its blocks came in the DataFrame's row order: the one-process SGD steps
                want = _one_process(np.stack(df.select("features").toPandas()["features"]),
                                    df.select("label").toPandas()["label"].to_numpy(np.float32))
                for got, w in zip(trained.state_dict().values(), want.state_dict().values(), strict=True):
                    np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=0, atol=1e-6)
            df.unpersist()
            assert hist[-1]["num_samples"] == rows and np.isfinite(hist[-1]["train_loss"])
            pid = json.loads((out / "rank0.json").read_text())["pid"]
            peaks.append((watch.peak_mb(pid), watch.peak_of("pyspark.daemon")))
    finally:
        OrcaContext.worker_data_memory_mb = saved
    (actor_small, task_small), (actor_big, task_big) = peaks
    assert None not in (actor_small, task_small, actor_big, task_big), f"a process was not seen: {peaks}"
    assert actor_big - actor_small < 24, f"the actor's anonymous peak: {actor_small:.0f} MB, then {actor_big:.0f} MB"
    assert task_big - task_small < 24, f"the Spark task's anonymous peak: {task_small:.0f} MB, then {task_big:.0f} MB"
