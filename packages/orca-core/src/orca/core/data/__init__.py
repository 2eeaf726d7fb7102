"""XShards (Spark-, Ray- and local-backed) and readers that build them.

>>> from orca.core.data import XShards, read_csv  # doctest: +SKIP
>>> shards = XShards.partition({"x": x, "y": y}, num_shards=4)  # doctest: +SKIP
"""

from orca.core.data._local import LocalXShards
from orca.core.data._ray import RayXShards
from orca.core.data._spark import SparkXShards
from orca.core.data._structure import chunks
from orca.core.data.readers import read_csv, read_json, read_parquet
from orca.core.data.shards import XShards

__all__ = [
    "LocalXShards",
    "RayXShards",
    "SparkXShards",
    "XShards",
    "chunks",
    "read_csv",
    "read_json",
    "read_parquet",
]
