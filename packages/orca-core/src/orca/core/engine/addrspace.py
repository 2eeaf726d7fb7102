"""Workers under an address-space limit spend it on data, not on allocators' reservations.

Spark applies ``spark.executor.pyspark.memory`` to its Python workers as ``RLIMIT_AS``: a limit
on *virtual* memory, which counts what allocators reserve and never touch. Two reservations
dwarf a worker's data there, measured on a torch worker (2.4 GB of address space for 0.43 GB
resident):

- pyarrow's default pool (jemalloc or mimalloc) reserves about 1 GB of address space up front;
- glibc's malloc gives each thread that allocates its own arena, each reserving 64 MB (a
  worker's framework, gloo and Arrow threads make a dozen).

:func:`economize` (called where a Spark task starts Orca's work) moves pyarrow to the C
library's allocator and caps glibc's arenas at two when, and only when, the process runs under
such a limit, and exports the same settings to the processes it starts (a runner's child);
without a limit nothing changes. The same torch worker then peaks at 0.9 GB of address space.
"""

from __future__ import annotations

import ctypes
import os
import resource

#: glibc's ``mallopt`` parameter for the most arenas (malloc.h's ``M_ARENA_MAX``)
_M_ARENA_MAX = -8
#: the arenas a process under a limit keeps: the main one and one for every other thread
ARENAS = 2

_done = False
#: bytes kept free for what the framework maps after the share has loaded
_reserve = 0


def limited() -> bool:
    """Whether this process has a finite address-space limit (``RLIMIT_AS``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY


def room_bytes() -> int | None:
    """Address space this process may still map under its limit (``None``: no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    with open("/proc/self/status") as f:
        size_kb = next((int(line.split()[1]) for line in f if line.startswith("VmSize:")), 0)
    return max(0, soft - size_kb * 1024)


def share_memory_bytes(memory_bytes: int | None) -> int | None:
    """The most bytes of its share a worker keeps in memory: ``memory_bytes``
    (``worker_data_memory_mb``), and under an address-space limit at most a third of the room
    left once the framework's runtime is set aside (:func:`economize`'s ``reserve_mb``; a share
    held in memory needs about 2.6 times its size while it loads: its Arrow batches, their
    conversion and the arrays they are joined into), so that a share the limit
    cannot hold streams to disk instead of failing with ``MemoryError``."""
    room = room_bytes()
    if room is None:
        return memory_bytes
    cap = max(0, room - _reserve) // 3
    return cap if memory_bytes is None else min(memory_bytes, cap)


def economize(reserve_mb: int = 0) -> bool:
    """Under an address-space limit, stop the allocators reserving it (once per process).

    Args:
        reserve_mb: address space the framework maps after the share has loaded (a runner's
            ``address_space_mb``), kept free of the share (see :func:`share_memory_bytes`).

    Returns:
        whether a limit applies (and the settings were made).
    """
    global _done, _reserve
    if not limited():
        return False
    _reserve = reserve_mb << 20
    if _done:
        return True
    # for the processes this one starts (read at their start)
    os.environ.setdefault("MALLOC_ARENA_MAX", str(ARENAS))
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, ARENAS)
    except (OSError, AttributeError):  # not glibc: its allocator has no such arenas
        pass
    import pyarrow as pa

    if os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system":
        pa.set_memory_pool(pa.system_memory_pool())
    _done = True
    return True
