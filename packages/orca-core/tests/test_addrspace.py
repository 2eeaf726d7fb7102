"""Workers under an address-space limit (Spark's ``spark.executor.pyspark.memory``): the allocators
stop reserving it, and the part of a share kept in memory is capped to what the limit leaves.
Each check runs in a fresh interpreter given a real ``RLIMIT_AS`` (a limit cannot be lifted)."""

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, resource, sys
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from orca.core.engine import addrspace
import pyarrow as pa
before = pa.default_memory_pool().backend_name
done = addrspace.economize()
print(json.dumps({"limited": addrspace.limited(), "done": done, "before": before,
                  "after": pa.default_memory_pool().backend_name,
                  "env": {k: os.environ.get(k) for k in ("MALLOC_ARENA_MAX", "ARROW_DEFAULT_MEMORY_POOL")},
                  "room": addrspace.room_bytes(), "capped": addrspace.share_memory_bytes(8 << 30),
                  "none": addrspace.share_memory_bytes(None), "small": addrspace.share_memory_bytes(1 << 20)}))
"""


def _probe(limit: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "ARROW_DEFAULT_MEMORY_POOL")}
    out = subprocess.run([sys.executable, "-c", PROBE, str(limit)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.timeout(120)
def test_under_a_limit_arrow_uses_malloc_arenas_are_capped_and_a_share_fits_in_a_third_of_the_room():
    limit = 3 << 30
    r = _probe(limit)
    assert r["limited"] and r["done"]
    assert r["before"] in ("jemalloc", "mimalloc") and r["after"] == "system"
    # what this process starts (a runner's child) inherits the same settings
    assert r["env"] == {"MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert 0 < r["room"] < limit
    # a third of the room (measured again on each call: the process's size moves a little)
    assert abs(r["capped"] - r["room"] // 3) < 16 << 20 and abs(r["none"] - r["capped"]) < 16 << 20
    assert r["small"] == 1 << 20  # a setting below the cap is kept


@pytest.mark.timeout(120)
def test_without_a_limit_nothing_changes():
    r = _probe(0)
    assert not r["limited"] and not r["done"]
    assert r["after"] == r["before"] != "system"
    assert r["env"] == {"MALLOC_ARENA_MAX": None, "ARROW_DEFAULT_MEMORY_POOL": None}
    assert r["room"] is None and r["capped"] == 8 << 30 and r["none"] is None
