"""The MultiWorkerMirroredStrategy a worker joins, built from orca-core's rendezvous.

TF allows one collective configuration per process, made before the first TF op, so a
process joins at most one strategy: :func:`can_join` says whether this one still can
(a fresh Ray actor can; a reused Spark Python worker that already ran TF cannot, and its
runner moves to a fresh child process instead, see :mod:`orca.core.engine.child`).

The strategy is used as the transport only: the model and its optimizer stay plain Keras
objects (as in one process), and each step's gradients are summed over the workers by the
strategy's collective all-reduce. That serves Keras 3, whose ``model.fit`` under this
strategy is broken (keras-team/keras#20585), and tf_keras alike.
"""

from __future__ import annotations

import json
import os
from typing import Any

from orca.core.plugin import Rendezvous

_JOINED: dict[str, Any] = {}


def tf_config(rendezvous: Rendezvous) -> dict[str, Any]:
    """``TF_CONFIG`` for this rank: every worker's reserved ``host:port`` in rank order."""
    workers = list(rendezvous.extra.get("worker_addresses") or [])
    if len(workers) != rendezvous.world_size:
        raise RuntimeError("the rendezvous lacks worker_addresses for every rank; orca-core too old for orca-tf.")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rendezvous.rank}}


def _context_started() -> bool:
    from tensorflow.python.eager import context

    ctx = context.context_safe()
    return bool(ctx is not None and getattr(ctx, "_initialized", False))


def can_join(rendezvous: Rendezvous) -> bool:
    """True if this process can join the strategy of ``rendezvous`` (or already has)."""
    key = json.dumps(tf_config(rendezvous))
    if key in _JOINED:
        return True
    return not _JOINED and not _context_started()


def join(rendezvous: Rendezvous, threads: int) -> Any:
    """Create (once per process) the strategy of ``rendezvous``; returns it."""
    import tensorflow as tf

    cfg = tf_config(rendezvous)
    key = json.dumps(cfg)
    if key not in _JOINED:
        set_threads(threads)
        os.environ["TF_CONFIG"] = key
        comm = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        _JOINED[key] = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    return _JOINED[key]


def set_threads(threads: int) -> None:
    """Intra-op threads (only before TF's context starts; later calls are no-ops)."""
    import tensorflow as tf

    if _context_started():
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, int(threads))))
    except RuntimeError:  # the context started in between
        pass


def all_sum(strategy: Any, tensor: Any) -> Any:
    """Sum ``tensor`` over every worker (a collective: every worker must call it)."""
    import tensorflow as tf

    return strategy.reduce(tf.distribute.ReduceOp.SUM, tensor, axis=None)
