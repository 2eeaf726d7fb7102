"""How the test sessions' two pytest-xdist processes share the work (orca.core.testing.fixtures):
a test class runs per value of its first parameter (a conformance suite's backends side by side,
each backend's class-scoped fixtures made once), and the longest units start first, by the
recorded durations, so that no long module runs alone at the end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: a suite of its own: one short module collected first (it would start first), one class of two
#: backends, and one module recorded as long
SUITE = {
    "test_a_short.py": """
        import os, time
        def test_short(tmp_path_factory):
            open(os.environ["ORDER_LOG"], "a").write(f"short {os.environ['PYTEST_XDIST_WORKER']} {time.time()}\\n")
    """,
    "test_b_class.py": """
        import os, time, pytest
        class TestSuite:
            @pytest.fixture(scope="class", params=["ray", "spark"])
            def backend(self, request):
                open(os.environ["ORDER_LOG"], "a").write(f"fixture-{request.param} {os.getpid()}\\n")
                return request.param
            @pytest.mark.parametrize("case", ["x", "y"])
            def test_case(self, backend, case):
                open(os.environ["ORDER_LOG"], "a").write(f"{backend}-{case} {os.getpid()}\\n")
    """,
    "test_c_long.py": """
        import os, time
        def test_long():
            open(os.environ["ORDER_LOG"], "a").write(f"long {os.environ['PYTEST_XDIST_WORKER']} {time.time()}\\n")
            time.sleep(2)
    """,
}


@pytest.mark.timeout(120)
def test_the_longest_unit_starts_first_and_a_class_splits_by_backend(tmp_path: Path) -> None:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["orca.core.testing.fixtures"]\n')
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "test-durations.json").write_text(json.dumps({"test_c_long.py::test_long": 120.0}))
    log = tmp_path / "order.log"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadscope",
                          "-q", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=110,
                         env={**__import__("os").environ, "ORDER_LOG": str(log)})
    assert out.returncode == 0, out.stdout + out.stderr
    events = [line.split()[0] for line in log.read_text().splitlines()]
    # one process runs every unit in the scheduler's order: the long module first though collected last
    assert events[0] == "long", events
    # each backend's class-scoped fixture made once, and its tests run together as one unit
    assert events.count("fixture-ray") == 1 and events.count("fixture-spark") == 1, events
    ray = [i for i, e in enumerate(events) if e.startswith(("fixture-ray", "ray-"))]
    spark = [i for i, e in enumerate(events) if e.startswith(("fixture-spark", "spark-"))]
    assert ray == list(range(ray[0], ray[0] + 3)) and spark == list(range(spark[0], spark[0] + 3)), events


def test_scope_of_splits_a_class_by_its_first_parameter_only() -> None:
    from orca.core.testing.fixtures import scope_of

    assert scope_of("t.py::TestX::test_a[ray-empty]") == scope_of("t.py::TestX::test_b[ray]") == "t.py::TestX[ray]"
    assert scope_of("t.py::TestX::test_a[spark-empty]") == "t.py::TestX[spark]"
    assert scope_of("t.py::test_a[ray]") == scope_of("t.py::test_b") == "t.py"
