"""The memory-limit jobs' JVM options (orca.core.testing.memory_limit.optimizing_jit_env): the test
sessions' C1-only JIT is taken out, every other JVM option the environment sets is kept."""

import pytest

from orca.core.testing.memory_limit import optimizing_jit_env


def test_the_memory_limit_job_gets_c2_back_and_keeps_the_other_jvm_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -Dsite.proxy=p -Xss4m")
    monkeypatch.setenv("ORCA_MARK", "kept")
    env = optimizing_jit_env()
    assert env["JAVA_TOOL_OPTIONS"] == "-Dsite.proxy=p -Xss4m"
    assert env["ORCA_MARK"] == "kept"

    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
    assert "JAVA_TOOL_OPTIONS" not in optimizing_jit_env()
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    assert "JAVA_TOOL_OPTIONS" not in optimizing_jit_env()
