"""How the sync group fails (the handshake and the group both raise these)."""

from __future__ import annotations


class SyncError(RuntimeError):
    """The sync group failed: peers disagree on the operation, or the group is broken."""


class SyncTimeoutError(SyncError, TimeoutError):
    """A peer sent nothing within the timeout (it is stuck, or far slower than the rest)."""


class PeerLostError(SyncError, ConnectionError):
    """A peer closed its connection (its worker died or left the group)."""
