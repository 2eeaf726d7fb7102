"""The CI tier and the full matrix of the test suites.

CI (``nox -t test``, ``.ci/run``) must finish within its time budget on a 2-core machine, so a
test whose subject is the shared engine rather than one backend (a slow fit, a stalled or killed
worker, Ctrl-C, the partition layouts) runs on one backend per package there; orca-core's toy
framework runs each of them on every launcher. ``ORCA_FULL_MATRIX=1`` runs every such test on
every backend (the GitHub workflow sets it: there each session is a job of its own).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

#: the skip reason of a launcher-level test on a backend the CI tier leaves out
LAUNCHER_LEVEL = ("launcher-level test: runs on another backend of this package in CI (orca-core's toy framework "
                  "runs it on every launcher; ORCA_FULL_MATRIX=1 runs it on every backend)")


def full_matrix() -> bool:
    """True under ``ORCA_FULL_MATRIX=1``: every test on every backend."""
    return os.environ.get("ORCA_FULL_MATRIX") == "1"


def runs_on(backend: str, backends: Sequence[str] | None) -> bool:
    """Whether a launcher-level test runs on ``backend``: ``backends`` is ``None`` (all) or names
    it, or this is the full matrix."""
    return backends is None or backend in backends or full_matrix()


def skip_unless_runs_on(backend: str, backends: Sequence[str] | None) -> None:
    """Skip the calling launcher-level test unless it :func:`runs_on` ``backend``."""
    if not runs_on(backend, backends):
        pytest.skip(LAUNCHER_LEVEL)


#: where the CI tier runs the spark launcher across a standalone cluster's executors (the per-framework
#: standalone tests of orca-tf, orca-mxnet and orca-openvino run in the full matrix: CI time, issue #35)
STANDALONE_COVERAGE = ("orca-torch's and orca-bigdl's standalone-cluster fits and orca-core's test_hosts.py "
                       "(the spark launcher across two executors)")


def _full_matrix_reason(covered_by: str) -> str:
    return f"launcher-level test: {covered_by} runs this launcher path in CI; ORCA_FULL_MATRIX=1 runs it here"


def skip_unless_full_matrix(covered_by: str) -> None:
    """Skip the calling launcher-level test outside the full matrix; ``covered_by`` names the CI
    tier's test of the same launcher path."""
    if not full_matrix():
        pytest.skip(_full_matrix_reason(covered_by))


def full_matrix_only(covered_by: str) -> pytest.MarkDecorator:
    """A mark for a launcher-level test that runs in the full matrix only, skipped before its
    fixtures start anything (a cluster); ``covered_by`` names the CI tier's test of the same path."""
    return pytest.mark.skipif(not full_matrix(), reason=_full_matrix_reason(covered_by))
