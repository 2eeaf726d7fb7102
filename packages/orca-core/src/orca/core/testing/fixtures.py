"""pytest fixtures shared by every Orca package.

- ``orca_context``: one real local Orca context (Spark ``local[2]`` now, Ray on first use)
  for the whole test session; ``spark`` and ``ray_runtime`` hand out its engines.
- ``spark_standalone_master``: the master URL of a real Spark standalone cluster (master and
  one 2-core worker on 127.0.0.1), started on first use and stopped after the test module
  (a cluster costs two JVMs or two Ray nodes: do not keep it for the whole session).
- ``ray_cluster_address``: the address of a real two-node Ray cluster on 127.0.0.1, per
  module like the Spark one; ``ray_cluster_handle`` is the whole :class:`RayCluster` and
  ``ray_cluster_env`` the environment a driver attaching to it needs.

Every test module is checked, when it ends, for Ray workers it left running (an Estimator never
shut down): those are shut down and the module fails, naming itself, instead of the next
module's Estimators failing for want of CPUs.

Only one Orca context can be active in a process and the session shares ``orca_context``, so
a test that attaches to a cluster runs its driver in a fresh interpreter with
:func:`orca.core.testing.clusters.run_python`.

Enable them with ``pytest_plugins = ["orca.core.testing.fixtures"]`` in a ``conftest.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orca.core.context import OrcaContext, init_orca_context, stop_orca_context
from orca.core.testing.clusters import RayCluster, ray_cluster, spark_standalone_cluster


@pytest.fixture(scope="session")
def orca_context() -> Iterator[OrcaContext]:
    """A local Orca context shared by the whole test session (Spark starts now, Ray lazily)."""
    ctx = init_orca_context(cluster_mode="local", cores=2, memory="2g", worker_timeout_s=180.0)
    yield ctx
    stop_orca_context()


@pytest.fixture(scope="module", autouse=True)
def _no_ray_workers_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test module that leaves Ray worker actors up (after shutting them down)."""
    yield
    if "ray" not in sys.modules:
        return
    from orca.core.engine.ray_backend import live_worker_groups

    left = live_worker_groups()
    for group in left:
        group.shutdown()
    if left:
        pytest.fail(f"{request.module.__name__} left the Ray workers of {len(left)} Estimator(s) running "
                    f"({sum(g.num_workers for g in left)} actors); call est.shutdown() in the test "
                    "(try/finally or a fixture).", pytrace=False)


@pytest.fixture(scope="session")
def spark(orca_context: OrcaContext) -> Any:
    """The SparkSession of the shared local context."""
    return orca_context.spark_session()


@pytest.fixture(scope="session")
def ray_runtime(orca_context: OrcaContext) -> Any:
    """The Ray runtime of the shared local context (started on first use)."""
    return orca_context.ray_runtime()


@pytest.fixture(scope="module")
def spark_standalone_master() -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a standalone master with one 2-core, 1 GiB worker."""
    with spark_standalone_cluster(cores=2, memory="1g") as cluster:
        yield cluster.master_url


@pytest.fixture(scope="module")
def ray_cluster_handle() -> Iterator[RayCluster]:
    """A two-node Ray cluster (1 CPU per node) on 127.0.0.1, as a :class:`RayCluster`."""
    with ray_cluster(num_cpus_head=1, num_cpus_worker=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def ray_cluster_address(ray_cluster_handle: RayCluster) -> str:
    """``127.0.0.1:<port>``: the GCS address of the two-node Ray cluster."""
    return ray_cluster_handle.address


@pytest.fixture(scope="module")
def ray_cluster_env(ray_cluster_handle: RayCluster) -> dict[str, str]:
    """Environment variables a driver attaching to the two-node Ray cluster should run with."""
    return dict(ray_cluster_handle.env)

def scope_of(nodeid: str) -> str:
    """The unit of work pytest-xdist gives one test process under ``--dist loadscope``: a test
    module, or a test class per value of its first parameter (for the conformance suites: per
    backend), so that a suite's backends run side by side while each backend's class-scoped
    fixtures (its started workers, its shared trained Estimator) are still made once.

    Examples:
        >>> scope_of("t/test_c.py::TestConformance::test_fit[ray-empty]")
        't/test_c.py::TestConformance[ray]'
        >>> scope_of("t/test_c.py::TestConformance::test_save")
        't/test_c.py::TestConformance'
        >>> scope_of("t/test_training.py::test_fit[spark]")
        't/test_training.py'
    """
    scope = nodeid.rsplit("::", 1)[0]
    if "::" not in scope or not nodeid.endswith("]"):
        return scope  # a module's functions stay together: they share its module-scoped fixtures
    params = nodeid[len(scope):]
    first = params[params.find("[") + 1:-1].split("-")[0]
    return f"{scope}[{first}]" if "[" in params and first else scope


#: where the scheduler reads how long tests took (``.ci/durations.py`` writes it from a CI log)
DURATIONS_FILE = Path(".ci") / "test-durations.json"
#: seconds assumed for a test the file does not list (it lists each session's slowest 40)
UNLISTED_TEST_S = 2.0


def longest_first(scopes: dict[str, dict[str, bool]], seconds: dict[str, float]) -> list[str]:
    """The units of work (scope -> its test ids) ordered longest first, by the tests' recorded
    ``seconds`` (:data:`UNLISTED_TEST_S` for a test not recorded): the two test processes then end
    close together instead of one running a long module alone at the end. Ties keep their order.

    Examples:
        >>> longest_first({"a.py": {"a.py::t1": False}, "b.py": {"b.py::t1": False, "b.py::t2": False},
        ...                "c.py": {"c.py::t1": False}}, {"c.py::t1": 90.0})
        ['c.py', 'b.py', 'a.py']
    """
    def cost(scope: str) -> float:
        return sum(seconds.get(nodeid, UNLISTED_TEST_S) for nodeid in scopes[scope])

    return sorted(scopes, key=cost, reverse=True)


def _recorded_durations(rootpath: Path) -> dict[str, float]:
    try:
        data = json.loads((rootpath / DURATIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope`` (the noxfile's test sessions), schedule by :func:`scope_of`, the
    longest units first (:func:`longest_first`, by :data:`DURATIONS_FILE`)."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    seconds = _recorded_durations(config.rootpath)

    class ByClassAndFirstParameter(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first assignment: the whole queue is known, nothing taken yet
                self.ordered = True
                order = longest_first(dict(self.workqueue), seconds)
                units = dict(self.workqueue)
                self.workqueue.clear()
                self.workqueue.update((scope, units[scope]) for scope in order)
            super()._assign_work_unit(node)

    return ByClassAndFirstParameter(config, log)
