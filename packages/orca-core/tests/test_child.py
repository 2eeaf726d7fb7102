"""A runner hosted in a child process (orca.core.engine.child): calls, errors, the preloaded
spare, and no process left behind."""

import os
import subprocess
import sys
import textwrap
import time

import cloudpickle
import pytest

from orca.core.engine import child as child_mod
from orca.core.engine.child import ChildProcess, drop_spares, start_child
from orca.core.engine.runner import Rendezvous, Runner

pytestmark = pytest.mark.timeout(120)

SOLO = Rendezvous(rank=0, world_size=1, master_addr="", master_port=0)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class EchoRunner(Runner):
    def setup(self, rendezvous):
        super().setup(rendezvous)
        if self.spec.get("fail_setup"):
            raise KeyError("no such layer: 'dense_9'")
        self.preloaded = "xml.dom.minidom" in sys.modules  # imported by the spare before this runner

    def pid(self):
        return os.getpid()

    def facts(self):
        return {"in_child": self.spec.get("in_child"), "preloaded": self.preloaded, "rank": self.rendezvous.rank}

    def add(self, a, b):
        return a + b

    def stall(self):
        time.sleep(3600)

    def fail(self):
        raise ValueError("the model rejected input shape (3, 5)")

    def train_batch(self, batch):
        return 0.0

    def eval_batch(self, batch):
        return 0.0, []

    def predict_batch(self, batch):
        return []

    def get_state(self):
        return {}

    def set_state(self, state):
        pass


@pytest.fixture(autouse=True)
def no_spares_left():
    yield
    drop_spares()


def _gone(pid, within_s=15.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reap it if it is our own zombie
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


def test_calls_run_in_the_child_and_errors_keep_their_type_and_traceback():
    child = start_child(EchoRunner, {}, SOLO, keep_spare=False, what="the test worker process")
    try:
        assert child.call("pid") != os.getpid()
        assert child.call("add", 2, 3) == 5
        assert child.call("facts")["in_child"] is True
        with pytest.raises(ValueError, match=r"rejected input shape \(3, 5\)") as err:
            child.call("fail")
        assert "the test worker process traceback" in str(err.value)
        assert "in fail" in str(err.value)  # the child's own frames
    finally:
        pid = child.process.pid
        child.close()
    assert _gone(pid)


def test_a_runner_that_fails_to_set_up_raises_with_the_child_traceback():
    with pytest.raises(RuntimeError, match="failed to start") as err:
        start_child(EchoRunner, {"fail_setup": True}, SOLO, keep_spare=False)
    assert "no such layer: 'dense_9'" in str(err.value)


def test_the_next_child_is_the_spare_that_preloaded_the_modules():
    first = start_child(EchoRunner, {}, SOLO, preload=["xml.dom.minidom"])
    try:
        spare = child_mod._spares[("xml.dom.minidom",)]
        assert spare.alive() and spare.process.pid != first.process.pid
    finally:
        first.close()
    second = start_child(EchoRunner, {}, SOLO, preload=["xml.dom.minidom"])
    try:
        assert second.process.pid == spare.process.pid
        assert second.call("facts")["preloaded"] is True
        assert child_mod._spares[("xml.dom.minidom",)].process.pid not in (first.process.pid, spare.process.pid)
    finally:
        second.close()


def test_a_dead_spare_is_replaced():
    first = start_child(EchoRunner, {}, SOLO)
    first.close()
    spare = child_mod._spares[()]
    spare.process.kill()
    spare.process.join(5)
    second = start_child(EchoRunner, {}, SOLO)
    try:
        assert second.call("add", 1, 1) == 2 and second.process.pid != spare.process.pid
    finally:
        second.close()


def test_a_child_that_dies_mid_call_is_a_clear_error():
    child = ChildProcess(timeout_s=30).host(EchoRunner, {}, SOLO)
    child.process.kill()
    child.process.join(5)
    with pytest.raises(RuntimeError, match="exited (before|during) add"):
        child.call("add", 1, 2)


def test_spares_exit_when_their_parent_dies_without_cleaning_up(tmp_path):
    """A parent killed hard (no atexit) leaves no child behind: the children read EOF and exit."""
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = {sys.path!r}
        import cloudpickle, test_child
        from orca.core.engine.child import start_child, _spares
        c = start_child(test_child.EchoRunner, {{}}, test_child.SOLO)
        open({str(pids)!r}, "w").write(f"{{c.process.pid}} {{_spares[()].process.pid}}")
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=os.path.dirname(__file__))
    hosted, spare = (int(p) for p in pids.read_text().split())
    assert _gone(hosted) and _gone(spare)


def test_a_child_busy_in_user_code_exits_when_its_parent_is_killed(tmp_path):
    """The hosted runner hangs in a call (it never reads its pipe) and its parent, a Spark Python
    worker, is SIGKILLed (Spark stopping a stalled task): the child exits too."""
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path[:0] = {sys.path!r}
        import cloudpickle, test_child
        from orca.core.engine.child import start_child
        c = start_child(test_child.EchoRunner, {{}}, test_child.SOLO, keep_spare=False)
        c.conn.send_bytes(cloudpickle.dumps(("stall", ())))
        open({str(pids)!r}, "w").write(str(c.process.pid))
        time.sleep(3600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.path.dirname(__file__))
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        hosted = int(pids.read_text())
        time.sleep(0.5)  # the call has reached the runner
        assert not _gone(hosted, 0.5), "the child should be alive while its parent is"
    finally:
        parent.kill()
        parent.wait(10)
    assert _gone(hosted), f"the child (pid {hosted}) outlived its killed parent"
