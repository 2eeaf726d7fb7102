"""Parameter synchronisation among Orca workers, framework-neutral.

:class:`SyncGroup` all-reduces flat float32/float64 numpy buffers (reduce-scatter then
all-gather, as BigDL's ``AllReduceParameter``), broadcasts, and gathers small objects, over
direct TCP connections between the workers of a group, inside Spark tasks or Ray actors.
Workers authenticate each other with the job's secret token (:func:`job_token`); nothing
received is unpickled. Every receive is bounded by a timeout. See
:mod:`orca.core.sync.group` for the design and :mod:`orca.core.sync.handshake` for the join.
"""

from orca.core.sync.group import PeerLostError, SyncError, SyncGroup, SyncTimeoutError, shard_bounds
from orca.core.sync.handshake import job_token

__all__ = ["PeerLostError", "SyncError", "SyncGroup", "SyncTimeoutError", "job_token", "shard_bounds"]
