pytest_plugins = ["orca.core.testing.fixtures"]
