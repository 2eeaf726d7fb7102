"""Spark's memory limit on its Python workers (``spark.executor.pyspark.memory``, applied as an
address-space limit) three times smaller than each worker's share of the data: a Keras fit on the
``bigdl`` backend completes, its share streamed to local disk without any setting, and trains the
model one process trains on the same global batches (issue #18).

The fit runs in its own Spark application (the limit is set when the application starts), from
memory_limit_job.py; each worker's share is generated on the executors, so the driver never holds
it. A TensorFlow worker maps about 2.5 GB before any data (the library, its thread pools and
allocators), so the limit is 2.7 GB and the share 8.1 GB, one worker (the lock-step split between
workers of a streamed share has its own tests); benchmarks/memory_limit.py runs 2 workers.
"""

import json
import subprocess
import sys
from pathlib import Path

import memory_limit_job as job
import numpy as np
import pytest

LIMIT_MB = 2700
SHARE_MB = 3 * LIMIT_MB


@pytest.mark.timeout(600)
def test_a_share_three_times_sparks_python_memory_limit_streams_and_trains_the_one_process_model(tmp_path):
    out = tmp_path / "fit.json"
    proc = subprocess.run([sys.executable, str(Path(job.__file__)), str(out), "--limit-mb", str(LIMIT_MB),
                           "--share-mb", str(SHARE_MB), "--workers", "1", "--backends", "bigdl"],
                          capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["share_mb"] >= 3 * LIMIT_MB  # each worker's share is three times its whole address space
    fit = res["fits"]["bigdl"]
    for rank in fit["ranks"]:
        assert rank["limit_mb"] == LIMIT_MB  # Spark applied the limit to the worker that trained
        assert rank["vm_peak_mb"] <= LIMIT_MB
    assert fit["ranks"][0]["on_disk_mb"] >= res["share_mb"] * 0.99  # the share went to the worker's local disk
    weight, bias = job.replay(res["rows_per_part"], res["workers"])
    np.testing.assert_allclose(fit["weight"], weight, rtol=0, atol=1e-6)
    assert fit["bias"] == pytest.approx(bias, abs=1e-6)
