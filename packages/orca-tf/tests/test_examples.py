"""The repository's example for orca-tf (examples/quickstart.py) runs as a user runs it."""

from orca.core.testing.clusters import quickstart_test

test_the_quickstart_example_runs = quickstart_test("tf")
