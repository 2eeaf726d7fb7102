"""A class-data-sharing archive of Spark's classes, so the driver's JVM starts ~3 s sooner.

Of a local fit's first ~13 s on a 2-core machine, ~6 s are the JVM loading and verifying the
~15,000 classes of Spark's jars (gateway, SparkContext, the first SQL job). The JVM can map
those classes, already parsed and verified, from an archive (Java's AppCDS: ``-Xshare:dump``
with a class list, then ``-XX:SharedArchiveFile=``); measured here, a session's first job ends
3.2 s earlier (8.1 s to 4.9 s from process start).

How Orca builds and uses one, per Java runtime and Spark installation (the *key*):

1. A driver JVM Orca launches while no archive exists records the classes it loads
   (``-XX:DumpLoadedClassList``: no measurable cost) and Orca notes its class path and module
   options once the session is up.
2. When that JVM has ended (the context stopped, or the process exited), a detached
   background process at the lowest CPU priority runs ``java -Xshare:dump`` on the list
   (~30 s of CPU, once) and moves the archive into place atomically.
3. Every later driver JVM of that key maps the archive. The JVM checks it against its own
   runtime and class path and silently starts without it on any mismatch (an updated JDK or
   jar, a damaged file), so a stale archive costs start-up time, never a failure; the key
   changes with any jar or the ``java`` binary, so a new one is built.

Archives live in ``$ORCA_CACHE_DIR/jvm`` (default ``~/.cache/orca/jvm``), ~180 MB each; at most
:data:`KEEP` are kept (least recently used first out) and one whose Spark installation is gone
is removed. A failed build leaves a ``.failed`` note (its reason) and that key is not tried again for a week.
``init_orca_context(jvm_class_cache=False)`` turns all of it off. Nothing here runs code from
the archive's directory: it is read by the JVM as a cache of classes from Spark's own jars.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("orca")

#: archives kept at most (each ~180 MB); the least recently used go first
KEEP = 3
#: a build's upper bound (it takes ~30 s of CPU; at the lowest priority on a busy machine, longer)
BUILD_TIMEOUT_S = 900.0
#: how long a build waits for the recording JVM to end before giving up
WAIT_FOR_JVM_S = 600.0
#: a failed build's note is kept this long (its key is not tried again until then)
RETRY_FAILED_AFTER_S = 7 * 86400.0
#: the smallest class list worth an archive (a session's JVM loads ~15,000 classes)
MIN_CLASSES = 1000
_OPTION_MARKERS = ("SharedArchiveFile", "Xshare", "DumpLoadedClassList", "ArchiveClassesAtExit")

_lock = threading.Lock()
_pending: list[Path] = []  # recordings of this process whose build is not started yet
_atexit_registered = False


def cache_dir() -> Path:
    """Where the archives live: ``$ORCA_CACHE_DIR/jvm``, else ``$XDG_CACHE_HOME/orca/jvm``, else
    ``~/.cache/orca/jvm``."""
    root = os.environ.get("ORCA_CACHE_DIR")
    if root:
        return Path(root) / "jvm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "orca" / "jvm"


def java_binary() -> str | None:
    """The ``java`` that pyspark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def spark_jars_dir() -> Path | None:
    """The ``jars`` folder of the Spark installation pyspark launches, or None (a source build)."""
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:
        return None
    jars = Path(_find_spark_home()) / "jars"
    return jars if jars.is_dir() else None


def cache_key(java: str, jars: Path) -> str:
    """A digest of what an archive is valid for: the ``java`` binary (path, size, time) and every
    jar of the installation (name, size, time). Any change gives a new key."""
    h = hashlib.sha256()
    real = Path(os.path.realpath(java))
    for p in (real, *sorted(jars.iterdir())):
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def defaults_java_options() -> str | None:
    """``spark.driver.extraJavaOptions`` from the installation's ``spark-defaults.conf``
    (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), which a ``--conf`` of the same key would
    replace: the archive's options are added to it, so nothing set there is lost."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        jars = spark_jars_dir()
        if jars is None:
            return None
        conf_dir = str(jars.parent / "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    key = "spark.driver.extraJavaOptions"
    for line in lines:
        line = line.strip()
        if line.startswith(key) and line[len(key):len(key) + 1] in (" ", "\t", "=", ":"):
            return line[len(key):].lstrip(" \t=:").strip() or None
    return None


@dataclass(frozen=True)
class Plan:
    """What a driver JVM about to start does with the archive of its key.

    Attributes:
        key: the archive's key (:func:`cache_key`).
        options: the JVM options to add (``spark.driver.extraJavaOptions``).
        recording: True when this JVM records its class list for a build (no archive yet).
        archive: the archive's path.
        classes: the class list this JVM writes when recording.
    """

    key: str
    options: str
    recording: bool
    archive: Path
    classes: Path


def plan(user_options: str | None = None) -> Plan | None:
    """The archive's part in the next driver JVM's start, or None when it takes none (no Spark
    jars folder, no ``java``, JVM options of the user's that already choose class sharing, a
    failed build for this key, or a build under way)."""
    if user_options and any(m in user_options for m in _OPTION_MARKERS):
        return None
    java, jars = java_binary(), spark_jars_dir()
    if java is None or jars is None:
        return None
    try:
        key = cache_key(java, jars)
        root = cache_dir()
        archive = root / f"{key}.jsa"
        if archive.exists():
            with contextlib.suppress(OSError):  # (another user's archive: used, not touched)
                os.utime(archive)  # least recently used goes first when pruning
            return Plan(key, f"-Xshare:auto -XX:SharedArchiveFile={archive}", False, archive, Path())
        if root.is_dir():
            _sweep(root)  # (a failed build's note older than a week goes: the key is tried again)
        if (root / f"{key}.failed").exists() or _lock_held(root / f"{key}.lock"):
            return None
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # an unwritable cache: start as before
        log.debug("no JVM class cache: %s", exc)
        return None
    classes = root / f"{key}.{os.getpid()}.{time.monotonic_ns()}.classlist"
    return Plan(key, f"-XX:DumpLoadedClassList={classes}", True, archive, classes)


def recorded(p: Plan, jvm_pid: int | None, jvm: Any) -> None:
    """Note a recording JVM's class path and module options (read from the running JVM through
    py4j); its archive is built once it ends (:func:`build_pending`, at the latest at exit)."""
    global _atexit_registered
    if not p.recording or jvm_pid is None:
        return
    try:
        runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        args = [str(a) for a in runtime.getInputArguments()]
        spec = {
            "key": p.key,
            "pid": jvm_pid,
            "classpath": str(jvm.java.lang.System.getProperty("java.class.path")),
            "vm_options": [a for a in args if a.startswith(_VM_OPTION_PREFIXES)],
            "classes": str(p.classes),
            "archive": str(p.archive),
        }
        meta = p.classes.with_suffix(".json")
        meta.write_text(json.dumps(spec))
    except Exception:  # noqa: BLE001 - a cache must never fail a start
        log.debug("JVM class cache: could not note the recording JVM", exc_info=True)
        return
    with _lock:
        _pending.append(meta)
        if not _atexit_registered:
            atexit.register(build_pending)
            _atexit_registered = True


def discard(p: Plan | None) -> None:
    """Drop the class list of a recording JVM whose session failed to start (the JVM has ended)."""
    if p is not None and p.recording:
        p.classes.unlink(missing_ok=True)


def _sweep(root: Path, max_age_s: float = WAIT_FOR_JVM_S + BUILD_TIMEOUT_S) -> None:
    """Remove what a killed process or build left: class lists, their notes and partial archives
    older than any build can take."""
    now = time.time()
    for pattern, age in (("*.classlist", max_age_s), ("*.*.*.json", max_age_s), ("*.jsa.tmp", max_age_s),
                         ("*.failed", RETRY_FAILED_AFTER_S)):
        for path in root.glob(pattern):
            try:
                if now - path.stat().st_mtime > age:
                    path.unlink(missing_ok=True)
            except OSError:
                pass


def build_pending() -> None:
    """Start the background build of every recording of this process (each waits for its JVM
    to end). Called when a context stops its JVM, and at exit."""
    with _lock:
        metas, _pending[:] = list(_pending), []
    for meta in metas:
        try:
            subprocess.Popen(  # noqa: S603 - this interpreter and a file path, no shell
                [sys.executable, "-m", "orca.core._jvm_cache", str(meta)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        except OSError:
            log.debug("JVM class cache: could not start the build", exc_info=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_held(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    return pid > 0 and _alive(pid)


def _take_lock(lock: Path) -> bool:
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if _lock_held(lock):
                return False
            lock.unlink(missing_ok=True)  # its builder is gone
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


_VM_OPTION_PREFIXES = ("--add-opens=", "--add-exports=", "--add-modules=", "--enable-native-access=",
                       "--sun-misc-unsafe-memory-access=", "-XX:+IgnoreUnrecognizedVMOptions")


def _checked(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The recording's note, trusted only as far as this process can check it: the ``java`` and
    Spark installation found here again (their key must match), a class path of that
    installation's folders only and module options only; None otherwise (nothing is built)."""
    java, jars = java_binary(), spark_jars_dir()
    if java is None or jars is None or cache_key(java, jars) != spec.get("key"):
        return None
    home = jars.parent.resolve()
    entries = str(spec.get("classpath", "")).split(os.pathsep)
    if not entries or not all(e and Path(e).resolve().is_relative_to(home) for e in entries):
        return None
    options = [str(o) for o in spec.get("vm_options", [])]
    if not all(o.startswith(_VM_OPTION_PREFIXES) for o in options):
        return None
    return dict(spec, java=java, jars=str(jars), vm_options=options)


def build(meta: Path, timeout_s: float = BUILD_TIMEOUT_S, wait_s: float = WAIT_FOR_JVM_S) -> Path | None:
    """Build the archive of a recording (the background process's work; callable directly).

    Waits for the recording JVM to end (its class list is complete then), takes the key's
    lock, runs ``java -Xshare:dump`` into a temporary file and moves it into place. Returns the
    archive, or None when another process built it, the JVM did not end, or the build failed
    (then ``<key>.failed`` holds the reason and the key is not tried again for
    :data:`RETRY_FAILED_AFTER_S`).
    """
    spec = _checked(json.loads(meta.read_text()))
    if spec is None:
        for path in (meta.with_suffix(".classlist"), meta):
            path.unlink(missing_ok=True)
        return None
    root, key = meta.parent, spec["key"]
    classes, archive = Path(spec["classes"]), Path(spec["archive"])
    lock = root / f"{key}.lock"
    deadline = time.monotonic() + wait_s
    while _alive(int(spec["pid"])) and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        if _alive(int(spec["pid"])) or archive.exists() or not _take_lock(lock):
            return archive if archive.exists() else None
        try:
            n = sum(1 for _ in classes.open()) if classes.exists() else 0
            if n < MIN_CLASSES:
                return None  # a JVM that ended early: a later start records again
            tmp = root / f"{key}.{os.getpid()}.jsa.tmp"
            cmd = [spec["java"], "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
                   f"-XX:SharedArchiveFile={tmp}", "-cp", spec["classpath"], *spec["vm_options"]]
            try:
                # the java and class path this process found itself (_checked), no shell
                out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,  # noqa: S603
                                     timeout=timeout_s, check=False)
                ok = out.returncode == 0 and tmp.exists()
                reason = f"exit {out.returncode}: {(out.stderr or out.stdout)[-2000:]}"
            except subprocess.TimeoutExpired:
                ok, reason = False, f"timed out after {timeout_s:.0f} s"
            if not ok:
                tmp.unlink(missing_ok=True)
                (root / f"{key}.failed").write_text(f"{' '.join(cmd)}\n{reason}\n")
                return None
            os.replace(tmp, archive)
            archive.with_suffix(".json").write_text(json.dumps({"jars": spec["jars"], "java": spec["java"]}))
            prune(root)
            return archive
        finally:
            lock.unlink(missing_ok=True)
    finally:
        for path in (classes, meta):
            path.unlink(missing_ok=True)


def wait_for_archive(root: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S) -> Path | None:
    """Wait until a built archive is in ``root`` (default :func:`cache_dir`) and no build holds a
    lock there; return it, or None after ``timeout_s``.

    Raises:
        RuntimeError: a build failed (the message is its ``.failed`` note).
    """
    root = root or cache_dir()
    deadline = time.monotonic() + timeout_s
    while True:
        failed = sorted(root.glob("*.failed"))
        if failed:
            raise RuntimeError(f"building the JVM class archive failed: {failed[0].read_text()[-3000:]}")
        archives = sorted(root.glob("*.jsa"))
        if archives and not any(root.glob("*.lock")):
            return archives[0]
        if time.monotonic() >= deadline:
            return None
        time.sleep(1.0)


def prune(root: Path, keep: int = KEEP) -> list[Path]:
    """Remove archives whose Spark installation or ``java`` is gone, then all but the ``keep``
    most recently used; return the removed archives."""
    removed: list[Path] = []
    live: list[Path] = []
    for archive in root.glob("*.jsa"):
        meta = archive.with_suffix(".json")
        try:
            info = json.loads(meta.read_text())
            gone = not Path(info["jars"]).is_dir() or not Path(info["java"]).exists()
        except (OSError, ValueError, KeyError):
            gone = True
        (removed if gone else live).append(archive)
    _sweep(root)
    live.sort(key=lambda a: a.stat().st_mtime, reverse=True)
    removed += live[keep:]
    for archive in removed:
        archive.unlink(missing_ok=True)
        archive.with_suffix(".json").unlink(missing_ok=True)
    return removed


def _main(argv: list[str]) -> int:
    """The background build: ``python -m orca.core._jvm_cache <recording .json>``."""
    try:
        os.nice(19)
    except OSError:
        pass
    return 0 if build(Path(argv[0])) is not None else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
