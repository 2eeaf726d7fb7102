"""What the Spark launcher needs of a session, for a classic session and a Spark Connect one alike.

The launcher's DataFrame path (barrier ``mapInArrow`` for fit, ``mapInArrow`` for evaluation,
Arrow UDFs for prediction) runs unchanged on Spark Connect; it needs four more things of the
session, which a classic ``SparkContext`` offers and a Connect session does not:

- shipping a job's bytes to the tasks (``broadcast``): on Connect they travel inside the task's
  function, which the client pickles into the plan (so a model state is bounded by the server's
  ``spark.connect.grpc.maxInboundMessageSize``, 128 MiB by default);
- tagging and cancelling the call's jobs (``addJobTag`` / ``cancelJobsWithTag``): on Connect the
  session's ``addTag`` / ``interruptTag``;
- the number of task slots (``defaultParallelism``) and of a DataFrame's partitions: on Connect
  counted by a job that calls a function once per partition and reads no rows;
- RDDs (``parallelize``): none on Connect; the sources that need them (XShards, numpy arrays,
  data creators) raise one clear error naming what works instead.

:func:`launch_context` gives the launcher one object with that face for either kind of session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from orca.core._connect import is_connect

#: what a Spark Connect client can train on, evaluate and predict (the message of every refusal)
CONNECT_INPUTS = ("on Spark Connect, Orca's spark launcher reads Spark DataFrames only; pass a DataFrame "
                  "(spark.createDataFrame(pandas_df), spark.read.parquet(...)), or run this from a classic "
                  "Spark session (init_orca_context(cluster_mode='local'|'standalone'|...)).")


class Shipped:
    """A value that travels inside a task's function: the Connect stand-in for a broadcast."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def destroy(self) -> None:
        """Nothing to free (a broadcast's ``destroy``)."""

    def unpersist(self) -> None:
        """Nothing to free (a broadcast's ``unpersist``)."""


class ConnectLaunchContext:
    """The part of a ``SparkContext`` the Spark launcher uses, on a Spark Connect session."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def broadcast(self, value: Any) -> Shipped:
        """``value``, to be captured by the task's function."""
        return Shipped(value)

    def addJobTag(self, tag: str) -> None:  # noqa: N802 - SparkContext's name
        """Tag the jobs this thread starts from now on."""
        self.spark.addTag(tag)

    def removeJobTag(self, tag: str) -> None:  # noqa: N802 - SparkContext's name
        """Stop tagging this thread's jobs with ``tag``."""
        self.spark.removeTag(tag)

    def cancelJobsWithTag(self, tag: str) -> None:  # noqa: N802 - SparkContext's name
        """Interrupt the session's running jobs tagged ``tag`` (the server cancels their Spark jobs)."""
        self.spark.interruptTag(tag)

    @property
    def defaultParallelism(self) -> int:  # noqa: N802 - SparkContext's name
        """The server's task slots: the partitions of a range it splits by its default parallelism."""
        return num_partitions(self.spark.range(0, 1 << 16))

    def parallelize(self, *args: Any, **kwargs: Any) -> Any:
        """No RDDs on Spark Connect: refuse with what works instead."""
        raise TypeError(CONNECT_INPUTS)


def launch_context(spark: Any) -> Any:
    """The session's ``SparkContext`` (classic), or a :class:`ConnectLaunchContext` (Spark Connect)."""
    return ConnectLaunchContext(spark) if is_connect(spark) else spark.sparkContext


def num_partitions(df: Any) -> int:
    """The number of partitions of ``df``: ``df.rdd.getNumPartitions()`` on a classic session; on
    Spark Connect (no RDDs) a job whose tasks each return one row without reading their rows."""
    if not is_connect(df):
        return int(df.rdd.getNumPartitions())
    import pyarrow as pa

    def one(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"one": [1]})

    return len(df.mapInArrow(one, "one long").collect())


def require_classic(spark: Any) -> None:
    """Refuse, with what works instead, an input that only a classic session can read (an RDD).

    Raises:
        TypeError: ``spark`` is a Spark Connect session.
    """
    if is_connect(spark):
        raise TypeError(CONNECT_INPUTS)
