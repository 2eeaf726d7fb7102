"""The small-object collective every worker group offers (stats, flags), not tensors.

It lives here, in the lowest layer, because :class:`~orca.core.sync.SyncGroup` implements it and
the engine's runners and worker loop use it: the engine imports the sync layer, never the reverse.
"""

from __future__ import annotations

import abc
from typing import Any


class Collective(abc.ABC):
    """Small-object collectives among the workers of a group (stats, flags), not tensors."""

    @abc.abstractmethod
    def allgather(self, obj: Any) -> list[Any]:
        """Return every rank's ``obj``, indexed by rank."""

    def barrier(self) -> None:
        """Wait until every rank arrives."""
        self.allgather(None)


class SoloCollective(Collective):
    """The collective of a group of one."""

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]
