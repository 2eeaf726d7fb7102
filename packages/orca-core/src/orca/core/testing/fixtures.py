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

import sys
from collections.abc import Iterator
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
