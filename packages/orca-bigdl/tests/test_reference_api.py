"""The reference's API (orca.core.testing.reference_api) against orca.bigdl's real signatures: every
argument the data says Orca accepts is a parameter (with the reference's default where it says so),
every one it says is unsupported is not. Reads signatures only: no Spark, no Ray."""

import pytest

from orca.core.testing.reference_api import assert_matches_reference


@pytest.fixture(scope="session", autouse=True)
def _orca_first():
    """Overrides the conftest fixture that starts Spark: these checks read signatures only."""
    return None


def test_the_reference_api_data_matches_orca_bigdl_signatures() -> None:
    assert_matches_reference("bigdl")
