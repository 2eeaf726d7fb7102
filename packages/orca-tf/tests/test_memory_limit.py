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

import memory_limit_job as job
import pytest

from orca.core.testing.memory_limit import check_job

LIMIT_MB = 2700


@pytest.mark.timeout(600)
def test_a_share_three_times_sparks_python_memory_limit_streams_and_trains_the_one_process_model(tmp_path):
    check_job(job, tmp_path / "fit.json", LIMIT_MB, ["bigdl"], timeout_s=540)
