"""The reference's API (orca.core.testing.reference_api) against orca.tf's real signatures: every
argument the data says Orca accepts is a parameter (with the reference's default where it says so),
every one it says is unsupported is not. Reads signatures only: no Spark, no Ray."""

from orca.core.testing.reference_api import assert_matches_reference


def test_the_reference_api_data_matches_orca_tf_signatures() -> None:
    assert_matches_reference("tf")
