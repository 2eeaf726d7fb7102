"""What a worker has spilled to its local disk (the folders a ``DiskFeed`` writes), as tests see it."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from orca.core.engine.callbacks import Callback


def spilled() -> dict[str, int]:
    """The spill folders (``orca-feed-*``) in this worker's spill directory, with their bytes."""
    from orca.core.engine.spill import spill_dir

    return {d: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            for d in glob.glob(os.path.join(spill_dir(), "orca-feed-*"))}


class SpillProbe(Callback):
    """Writes, per rank, :func:`spilled` to ``out/rank<r>.json`` when training begins (the share
    has loaded: a share on disk is in its folders)."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        with open(os.path.join(self.out, f"rank{self.rank}.json"), "w") as fh:
            json.dump(spilled(), fh)
