"""The reference's API (orca.core.testing.reference_api) against orca.mxnet's real signatures: every
argument the data says Orca accepts is a parameter (with the reference's default where it says so),
every one it says is unsupported is not. Reads signatures only: no Spark, no Ray."""

from orca.core.testing.reference_api import REFERENCE_API, signature_problems


def test_the_reference_api_data_matches_orca_mxnet_signatures() -> None:
    assert REFERENCE_API["mxnet"], "no reference calls recorded for mxnet"
    problems = signature_problems("mxnet")
    assert not problems, "reference_api data and Orca differ:\n" + "\n".join(problems)
