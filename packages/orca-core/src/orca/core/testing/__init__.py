"""Test helpers shared by every Orca package: fixtures for real local engines and clusters,
and the Estimator conformance suite.

Framework packages enable the fixtures with ``pytest_plugins = ["orca.core.testing.fixtures"]``
in their ``conftest.py``.
"""
