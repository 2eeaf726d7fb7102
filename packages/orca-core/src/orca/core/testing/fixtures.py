"""pytest fixtures: one real local Orca context (Spark ``local[2]`` + lazy Ray) per session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orca.core.context import OrcaContext, init_orca_context, stop_orca_context


@pytest.fixture(scope="session")
def orca_context() -> Iterator[OrcaContext]:
    """A local Orca context shared by the whole test session (Spark starts now, Ray lazily)."""
    ctx = init_orca_context(cluster_mode="local", cores=2, memory="2g", worker_timeout_s=180.0)
    yield ctx
    stop_orca_context()


@pytest.fixture(scope="session")
def spark(orca_context: OrcaContext) -> Any:
    """The SparkSession of the shared local context."""
    return orca_context.spark_session()


@pytest.fixture(scope="session")
def ray_runtime(orca_context: OrcaContext) -> Any:
    """The Ray runtime of the shared local context (started on first use)."""
    return orca_context.ray_runtime()
