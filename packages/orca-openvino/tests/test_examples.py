"""The repository's example for orca-openvino (examples/quickstart.py): its job runs and predicts the true y."""

from orca.core.testing.clusters import quickstart_test

test_the_quickstart_example_runs = quickstart_test("openvino")
