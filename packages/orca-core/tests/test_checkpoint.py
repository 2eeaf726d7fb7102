"""Checkpoints you can trust: a writer killed half-way leaves the previous checkpoint intact, and
a truncated or foreign file is refused with a clear error."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from orca.core.engine.checkpoint import read_checkpoint, write_checkpoint

pytestmark = pytest.mark.timeout(120)

WRITER = r"""
import sys
import numpy as np
from orca.core.engine.checkpoint import write_checkpoint
big = {"w": np.ones(64 << 20, np.float64)}  # 512 MB: the write takes a while
write_checkpoint(sys.argv[1], 2, big)
"""


def test_a_writer_killed_half_way_leaves_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "model.ckpt")
    write_checkpoint(path, 1, {"w": np.arange(4.0)})
    child = subprocess.Popen([sys.executable, "-c", WRITER, path])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            partial = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
            if partial and partial[0].stat().st_size > 0:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the writer never started writing")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL, "the writer finished before it was killed: nothing was tested"
    epoch, state = read_checkpoint(path)
    assert epoch == 1
    np.testing.assert_array_equal(state["w"], np.arange(4.0))


def test_a_truncated_or_foreign_file_is_refused_clearly(tmp_path):
    path = tmp_path / "model.ckpt"
    write_checkpoint(str(path), 3, {"w": np.arange(1000.0)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="damaged Orca checkpoint"):
        read_checkpoint(str(path))
    path.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(ValueError, match="not an Orca checkpoint|not a checkpoint"):
        read_checkpoint(str(path))
