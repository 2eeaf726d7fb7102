"""The driver JVM's class-data-sharing archive (orca.core._jvm_cache): recorded by the first
session, built in the background once its JVM ended, mapped by every later driver JVM, ignored
when damaged, never used when turned off; keys, pruning and the user's own JVM options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orca.core import _jvm_cache as jc

DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from orca.core import init_orca_context, stop_orca_context
    from orca.core._jvm import gateway_process

    ctx = init_orca_context(cluster_mode="local", cores=2, jvm_class_cache=sys.argv[1] == "on")
    spark = ctx.spark_session()
    total = spark.range(10_000).selectExpr("sum(id * 2) AS s").collect()[0]["s"]
    pid = gateway_process().pid
    with open(f"/proc/{pid}/cmdline") as fh:
        cmdline = fh.read().split("\\0")
    with open(f"/proc/{pid}/maps") as fh:
        mapped = sorted({line.split()[-1] for line in fh if line.rstrip().endswith(".jsa")})
    stop_orca_context()
    print(json.dumps({"total": total, "mapped": mapped, "cmdline": cmdline}))
    """
)


def _driver(cache: Path, mode: str = "on") -> dict:
    env = dict(os.environ, ORCA_CACHE_DIR=str(cache), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run([sys.executable, "-c", DRIVER, mode], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_first_session_records_then_every_later_jvm_maps_the_archive(tmp_path: Path) -> None:
    expected = 2 * sum(range(10_000))
    first = _driver(tmp_path)
    root = tmp_path / "jvm"
    assert first["total"] == expected
    assert any(a.startswith("-XX:DumpLoadedClassList=") for a in first["cmdline"])
    assert not any(m.startswith(str(root)) for m in first["mapped"])

    archive = jc.wait_for_archive(root, timeout_s=420)  # built in the background after the first JVM ended
    assert archive is not None, f"no archive in {root} after 420 s: {sorted(p.name for p in root.iterdir())}"
    assert archive.stat().st_size > 50 * 2**20  # Spark's ~15,000 classes
    assert not list(root.glob("*.classlist")) and not list(root.glob("*.jsa.tmp"))
    assert json.loads(archive.with_suffix(".json").read_text())["jars"] == str(jc.spark_jars_dir())

    second = _driver(tmp_path)
    assert second["total"] == expected
    assert f"-XX:SharedArchiveFile={archive}" in second["cmdline"]
    assert str(archive) in second["mapped"]  # the JVM mapped it: it did not fall back
    assert not any(a.startswith("-XX:DumpLoadedClassList=") for a in second["cmdline"])

    # a damaged archive: the JVM checks it, starts without it, and the job's result is the same
    archive.chmod(0o600)
    archive.write_bytes(os.urandom(2**20))
    third = _driver(tmp_path)
    assert third["total"] == expected
    assert str(archive) not in third["mapped"]

    # off: the JVM's options are left alone and nothing is written
    off_root = tmp_path / "off"
    off = _driver(off_root, mode="off")
    assert off["total"] == expected
    assert not any("SharedArchiveFile" in a or "DumpLoadedClassList" in a for a in off["cmdline"])
    assert not off_root.exists()


def _fake_install(tmp_path: Path) -> tuple[Path, Path]:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (jars / name).write_bytes(b"jar")
    return java, jars


def test_the_key_changes_with_any_jar_or_the_java_binary(tmp_path: Path) -> None:
    java, jars = _fake_install(tmp_path)
    key = jc.cache_key(str(java), jars)
    assert jc.cache_key(str(java), jars) == key
    (jars / "spark-sql.jar").write_bytes(b"jar, updated")
    key2 = jc.cache_key(str(java), jars)
    assert key2 != key
    (jars / "extra.jar").write_bytes(b"jar")
    assert jc.cache_key(str(java), jars) != key2
    os.utime(java, (1, 1))
    assert jc.cache_key(str(java), jars) not in (key, key2)


def test_prune_drops_archives_of_removed_installs_then_the_least_recently_used(tmp_path: Path) -> None:
    java, jars = _fake_install(tmp_path)
    root = tmp_path / "cache"
    root.mkdir()

    def archive(name: str, jars_dir: Path, used: float) -> Path:
        a = root / f"{name}.jsa"
        a.write_bytes(b"x")
        a.with_suffix(".json").write_text(json.dumps({"jars": str(jars_dir), "java": str(java)}))
        os.utime(a, (used, used))
        return a

    gone = archive("gone", tmp_path / "removed" / "jars", 400)
    old, mid, new = archive("old", jars, 100), archive("mid", jars, 200), archive("new", jars, 300)
    stale = root / "k.1.2.classlist"
    stale.write_text("x")
    os.utime(stale, (1, 1))
    removed = jc.prune(root, keep=2)
    assert sorted(removed) == sorted([gone, old])
    assert sorted(root.glob("*.jsa")) == sorted([mid, new])
    assert not gone.with_suffix(".json").exists() and not stale.exists()


def test_the_users_own_sharing_options_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCA_CACHE_DIR", str(tmp_path))
    for options in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/my.jsa", "-XX:DumpLoadedClassList=/tmp/l"):
        assert jc.plan(options) is None
    p = jc.plan("-Xmx4g")
    assert p is not None and p.recording and p.options.startswith("-XX:DumpLoadedClassList=")
    # a failed build is not retried for its key, until its note is a week old
    failed = tmp_path / "jvm" / f"{p.key}.failed"
    failed.write_text("why")
    assert jc.plan(None) is None
    os.utime(failed, (time.time() - jc.RETRY_FAILED_AFTER_S - 60,) * 2)
    again = jc.plan(None)
    assert again is not None and again.recording and not failed.exists()


def test_the_installations_default_driver_options_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert jc.defaults_java_options() is None  # no spark-defaults.conf
    (conf / "spark-defaults.conf").write_text(
        "# site settings\nspark.driver.memory 4g\nspark.driver.extraJavaOptionsX -Dno\n"
        "spark.driver.extraJavaOptions   -Dsite.proxy=p -XX:+UseG1GC\n")
    assert jc.defaults_java_options() == "-Dsite.proxy=p -XX:+UseG1GC"
    (conf / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions=-Xshare:off\n")
    assert jc.defaults_java_options() == "-Xshare:off"
    assert jc.plan(jc.defaults_java_options()) is None  # the site chose its own class sharing
