"""Build and install Horovod for this environment's PyTorch, TensorFlow, or both.

Horovod ships no wheels: it is built from its sdist against the framework already installed,
and on today's stacks several things stand in the way. This installer takes one build path in
every environment (a fresh venv, uv's, a user's own; any pip) and sets each of them up:

- **one build path**: ``pip wheel --use-pep517 --no-build-isolation`` (with the environment's
  setuptools): pip would otherwise take Horovod's legacy ``setup.py`` build or the PEP 517 one
  depending on its own version and on whether ``wheel`` happens to be installed;
- **CMake**: Horovod 0.28.1's tree (its bundled gloo declares ``cmake_minimum_required(2.8.12)``)
  does not configure with CMake 4, PyPI's newest. The build uses its own CMake 3
  (:data:`CMAKE`, installed into the build's temporary folder: the environment's ``cmake`` is not
  touched) through Horovod's ``HOROVOD_CMAKE``, and sets ``CMAKE_POLICY_VERSION_MINIMUM=3.5`` so
  that a CMake 4 given by hand (``HOROVOD_CMAKE=...``) configures it too;
- **CPU or CUDA**: Horovod's CMake builds CUDA kernels whenever it finds ``nvcc``, GPU or not. The
  installer chooses (``--gpu auto``, the default, or ``$ORCA_HOROVOD_GPU``): a **CUDA build with
  NCCL** where a GPU is visible (``nvidia-smi -L`` lists one) and the framework is a CUDA build,
  otherwise a **CPU build** (gloo only), with CUDA detection switched off in CMake even where a
  CUDA toolkit is installed. ``--gpu cpu`` / ``--gpu cuda`` force one;
- its CMake forces ``-std=c++14`` while torch >= 2.1's headers need C++17: ``CXX`` is a small
  wrapper that turns ``-std=c++11/14`` into ``-std=c++17``;
- **only what is used**: the build asks for the frameworks' libraries alone (Horovod's tree also
  compiles a copy of its bundled gloo that no framework links) and leaves out the debug information
  of its RelWithDebInfo build (the same ``-O3`` code): measured on 2 cores, one build for torch and
  TensorFlow took 330 s of CPU and gives a 1.7 MB wheel (34 MB with ``-g``);
- it does not build against TensorFlow >= 2.16 (TF stopped shipping the XLA headers it
  includes): ``tensorflow-cpu==2.15.1`` (Keras 2) is the newest it builds with.

Run it in the environment Horovod is for, after installing the framework::

    pip install orca-torch
    python -m orca.core.horovod_install torch          # or: tensorflow; --gpu cpu|cuda|auto

An environment with both frameworks gets one build for both (``python -m orca.core.horovod_install
torch tensorflow``): Horovod's bundled gloo is compiled once instead of once per build.

The built wheel is kept in a cache of its own (``$ORCA_HOROVOD_CACHE``, else
``$XDG_CACHE_HOME/orca/horovod``, else ``~/.cache/orca/horovod``)
keyed by the framework(s), their versions, the build (cpu or cuda) and the Python version: pip's own
wheel cache knows the sdist only, and would hand a torch build of Horovod to a TensorFlow
environment. The first build takes about 2-4 minutes on 2 cores; later installs take seconds.
A failed build keeps its log in the cache folder and ends with an error naming the cause and
the fix. Two installers of the same wheel at once build it once: the second waits for the first
(:func:`build_lock`) and installs its wheel. Horovod uses its gloo controller on the CPU (no MPI is needed or built).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

HOROVOD = "horovod==0.28.1"
#: the CMake of the build: the newest 3.x (CMake 4 refuses the ``cmake_minimum_required`` of the gloo
#: Horovod bundles), installed into the build's own folder
CMAKE = "cmake==3.31.10"
#: what Horovod needs at run time besides the framework (its own dependencies, installed with it)
RUNTIME_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi>=1.4.0")
#: what the build needs in the environment (``--no-build-isolation``: setuptools' PEP 517 backend)
BUILD_DEPS = ("setuptools", "wheel")
FRAMEWORKS = {"torch": "torch", "tensorflow": "tensorflow-cpu"}
#: the newest TensorFlow Horovod builds against
TF_FOR_HOROVOD = "tensorflow-cpu==2.15.1"
#: ``--gpu`` choices: ``auto`` picks ``cuda`` where a GPU is visible and the framework is a CUDA build
GPU_CHOICES = ("auto", "cpu", "cuda")

COMMAND = "python -m orca.core.horovod_install {framework}"

_CXX_WRAPPER = """#!/bin/sh
# Horovod's CMake forces -std=c++11/14; torch's headers need C++17 (orca.core.horovod_install)
for a do
    shift
    case "$a" in -std=c++11|-std=c++14) a=-std=c++17 ;; esac
    set -- "$@" "$a"
done
exec {cxx} "$@"
"""

#: CMake options of the CPU build: no CUDA language check, no CUDA toolkit found, whatever is installed
CPU_CMAKE_ARGS = ("-DCMAKE_CUDA_COMPILER=CMAKE_CUDA_COMPILER-NOTFOUND", "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE",
                  "-DCMAKE_DISABLE_FIND_PACKAGE_NCCL=TRUE")

#: CMake options of every build: Horovod's RelWithDebInfo build (-O3 after its own edit) without the debug
#: information (-g): the same code, a smaller wheel, a faster compile
BUILD_CMAKE_ARGS = ("-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
#: Horovod 0.28.1's library target of each framework (horovod/<framework>/CMakeLists.txt): the build asks
#: for these only, so the copy of gloo no framework links (Horovod's tree compiles gloo once per C++ ABI
#: and standard, every copy by default) is not compiled
TARGETS = {"torch": "pytorch", "tensorflow": "tensorflow"}

_CMAKE_WRAPPER = """#!/bin/sh
# The CMake of Horovod's build (orca.core.horovod_install): configure runs get the build's options,
# the build itself builds the frameworks' libraries (and what they link) only
case "$1" in
    --build) dir="$2"; shift 2; exec "{cmake}" --build "$dir" {targets} "$@" ;;
    --install|--version|-E|-P) exec "{cmake}" "$@" ;;
esac
exec "{cmake}" "$@" {args}
"""


def _frameworks(framework: str | Sequence[str]) -> tuple[str, ...]:
    """One framework name or several, in the canonical order (torch, then tensorflow), unknown ones refused."""
    names = (framework,) if isinstance(framework, str) else tuple(framework)
    unknown = sorted(set(names) - set(FRAMEWORKS))
    if unknown or not names:
        raise SystemExit(f"unknown framework(s) {unknown or names!r}: choose from {list(FRAMEWORKS)}.")
    return tuple(name for name in FRAMEWORKS if name in names)


def install_hint(framework: str) -> str:
    """The commands that install Horovod for ``framework`` (``"torch"`` or ``"tensorflow"``), for errors."""
    first = "pip install orca-torch" if framework == "torch" else f'pip install orca-tf "{TF_FOR_HOROVOD}"'
    return f"`{first}` then `{COMMAND.format(framework=framework)}` (builds Horovod, 2-4 minutes the first time)"


def _framework_version(framework: str) -> str:
    names = ("torch",) if framework == "torch" else ("tensorflow-cpu", "tensorflow")
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    need = "pip install torch" if framework == "torch" else f'pip install "{TF_FOR_HOROVOD}"'
    raise SystemExit(f"{framework} is not installed in {sys.prefix}: Horovod builds against it. Run `{need}` first.")


def cache_dir(framework: str | Sequence[str], version: str | Sequence[str], variant: str = "cpu") -> Path:
    """Where the wheel built for these framework versions (one framework or several, with their versions
    in the same order), build variant (``cpu``/``cuda``) and Python is kept."""
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = Path(os.environ.get("ORCA_HOROVOD_CACHE") or cache_home / "orca" / "horovod")
    names = (framework,) if isinstance(framework, str) else tuple(framework)
    versions = (version,) if isinstance(version, str) else tuple(version)
    if len(names) != len(versions):
        raise ValueError(f"one version per framework: {names} and {versions}")
    built_for = "-".join(f"{name}-{v}" for name, v in zip(names, versions, strict=True))
    tag = f"{HOROVOD.replace('==', '-')}-{built_for}-{variant}-py{sys.version_info[0]}{sys.version_info[1]}"
    return root / tag


def gpu_visible() -> bool:
    """True when ``nvidia-smi -L`` lists a GPU (a CUDA toolkit alone, with no GPU, is not one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)  # noqa: S603 - fixed arguments
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def framework_cuda(framework: str) -> bool:
    """True when the installed framework is a CUDA build (asked in a child: the framework's import is not kept)."""
    probe = ("import torch; print(bool(torch.version.cuda))" if framework == "torch" else
             "import tensorflow as tf; print(bool(tf.test.is_built_with_cuda()))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)  # noqa: S603
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip().endswith("True")


def choose_variant(framework: str | Sequence[str], gpu: str = "auto") -> str:
    """The build to make: ``"cuda"`` (NCCL, for GPUs) or ``"cpu"`` (gloo only).

    Args:
        framework: ``"torch"`` or ``"tensorflow"``, or both (a CUDA build needs every one a CUDA build).
        gpu: ``"auto"`` (CUDA where a GPU is visible and the framework is a CUDA build), ``"cpu"`` or
            ``"cuda"``.

    Raises:
        SystemExit: an unknown choice, or a build the framework cannot take (the message names the fix).
    """
    if gpu not in GPU_CHOICES:
        raise SystemExit(f"--gpu {gpu!r} is not one of {GPU_CHOICES}.")
    names = _frameworks(framework)
    if gpu == "auto":
        gpu = "cuda" if gpu_visible() and all(framework_cuda(name) for name in names) else "cpu"
    for name in names if gpu == "cuda" else ():
        if not framework_cuda(name):
            raise SystemExit(f"--gpu cuda: the installed {name} is not a CUDA build, and Horovod's CUDA build needs "
                             f"one. Install a CUDA build of {name}, or build for the CPU (`--gpu cpu`).")
    if gpu == "cpu" and "torch" in names and framework_cuda("torch") and shutil.which("nvcc"):
        # Horovod's FindPytorch asks torch whether it has CUDA and then forces a CUDA build
        raise SystemExit("--gpu cpu: the installed torch is a CUDA build, and Horovod builds its CUDA kernels for a "
                         "CUDA torch whatever is asked. Install the CPU build of torch (`pip install torch==2.13.0` "
                         "here, or torch's CPU index), or build for CUDA on a machine with a GPU (`--gpu cuda`).")
    return gpu


def _nccl_home() -> str | None:
    """The NCCL of the ``nvidia-nccl-cu*`` wheel a CUDA framework brings (``site-packages/nvidia/nccl``)."""
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "nccl"
        if (candidate / "include").is_dir():
            return str(candidate)
    return None


def write_cmake_wrapper(cmake: Path, variant: str, wrapper_dir: Path,
                        frameworks: Sequence[str] = ()) -> Path:
    """A ``cmake`` for Horovod's ``HOROVOD_CMAKE``: runs ``cmake`` with the variant's configure options
    (and :data:`BUILD_CMAKE_ARGS`), and builds only the libraries of ``frameworks`` (all targets when none)."""
    args = [*BUILD_CMAKE_ARGS, *(CPU_CMAKE_ARGS if variant == "cpu" else ())]
    targets = f"--target {' '.join(TARGETS[name] for name in _frameworks(frameworks))}" if frameworks else ""
    wrapper = wrapper_dir / "cmake"
    wrapper.write_text(_CMAKE_WRAPPER.format(cmake=cmake, args=" ".join(f"'{a}'" for a in args), targets=targets))
    wrapper.chmod(0o755)
    return wrapper


def build_env(framework: str | Sequence[str], wrapper_dir: Path, variant: str = "cpu",
              cmake: Path | None = None) -> dict[str, str]:
    """The environment of the build: the framework(s) asked for and no other, gloo on the CPU (and NCCL for
    ``cuda``), the C++17 wrapper as ``CXX``, and (given ``cmake``) that CMake with the variant's options as
    ``HOROVOD_CMAKE``."""
    env = dict(os.environ)
    real_cxx = env.get("CXX") or shutil.which("g++") or "c++"
    wrapper = wrapper_dir / "cxx17"
    wrapper.write_text(_CXX_WRAPPER.format(cxx=real_cxx))
    wrapper.chmod(0o755)
    names = _frameworks(framework)
    switches = {f"HOROVOD_{'WITH' if name in names else 'WITHOUT'}_{flag}": "1"
                for name, flag in (("torch", "PYTORCH"), ("tensorflow", "TENSORFLOW"))}
    for key in [k for k in env if k.startswith(("HOROVOD_GPU", "HOROVOD_NCCL", "HOROVOD_CUDA", "HOROVOD_WITH"))]:
        del env[key]  # the variant and the frameworks asked for decide, not what the shell happens to hold
    env.update(switches)
    env.update({
        "CXX": str(wrapper), "HOROVOD_WITHOUT_MXNET": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
        "HOROVOD_CPU_OPERATIONS": "gloo", "MAKEFLAGS": f"-j{os.cpu_count() or 2}",
        # a CMake 4 given by hand (HOROVOD_CMAKE) configures the tree's old cmake_minimum_required too
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
    })
    if cmake is not None and "HOROVOD_CMAKE" not in os.environ:
        env["HOROVOD_CMAKE"] = str(write_cmake_wrapper(cmake, variant, wrapper_dir, names))
    if variant == "cuda":
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
        nccl = _nccl_home()
        if nccl:
            env["HOROVOD_NCCL_HOME"] = nccl
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        if cuda_home:
            env["HOROVOD_CUDA_HOME"] = cuda_home
    return env


#: (pattern in the build's log, the cause and the fix): the first match is reported
_DIAGNOSES: tuple[tuple[str, str], ...] = (
    (r"Compatibility with CMake < 3\.5 has been removed",
     "CMake 4 refused the cmake_minimum_required of a project Horovod bundles. Leave HOROVOD_CMAKE unset (the "
     f"installer builds with its own {CMAKE}), or point it at a CMake 3.x."),
    (r"No space left on device", "the disk filled up during the build. Free some space (the build needs about 2 GB "
                                 "in the temporary folder, $TMPDIR) and run the installer again."),
    (r"Horovod build with GPU support was requested but this PyTorch installation does not support CUDA",
     "a CUDA build was asked for but torch is a CPU build. Build for the CPU: `--gpu cpu`."),
    (r"(?i)(nvcc fatal|No CMAKE_CUDA_COMPILER could be found|Failed to find nvcc|CUDA_ARCHITECTURES|"
     r"unsupported gpu architecture|Could NOT find NCCL|CUDAToolkit)",
     "the CUDA part of the build failed (the toolkit, NCCL or the GPU architecture). Build for the CPU "
     "(`--gpu cpu`), or see Horovod's GPU build guide for HOROVOD_CUDA_HOME / HOROVOD_NCCL_HOME."),
    (r"C\+\+17 or later|requires at least C\+\+17|-std=c\+\+17",
     "the compiler was not run in C++17 mode: set CXX to g++ 9 or newer (the installer wraps it to force C++17)."),
    (r"(?i)(Could not find a version that satisfies the requirement|No matching distribution found|"
     r"Failed to establish a new connection|Temporary failure in name resolution)",
     "pip could not download a build requirement: check that this machine reaches the package index "
     "(pip config list) and run the installer again."),
    (r"(?i)(g\+\+|c\+\+|cc1plus).*(not found|No such file)|CMAKE_CXX_COMPILER not set",
     "no C++ compiler: install one (`apt-get install g++` on Debian/Ubuntu) and run the installer again."),
    (r"Python\.h: No such file", "the Python headers are missing: install them (`apt-get install python3-dev`)."),
)


def diagnose(log_text: str) -> str | None:
    """The cause and the fix of a failed build, read from its log; None when no known cause is in it."""
    for pattern, message in _DIAGNOSES:
        if re.search(pattern, log_text):
            return message
    return None


def _pip(*args: str, env: dict[str, str] | None = None, log: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    if log is None:
        subprocess.run(cmd, env=env, check=True)  # noqa: S603 - this interpreter's pip, fixed arguments, no shell
        return
    with log.open("ab") as sink, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,  # noqa: S603
                                                  stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # shown as it comes and kept for the diagnosis
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            sink.write(line)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def _build(frameworks: tuple[str, ...], built_for: str, variant: str, wheels: Path) -> None:
    """Build the wheel into ``wheels`` (atomically), or exit with the cause and the fix."""
    print(f"Building {HOROVOD} for {built_for}, {variant} build (2-4 minutes on 2 cores)...", flush=True)
    wheels.mkdir(parents=True, exist_ok=True)
    log = wheels.parent / f"{wheels.name}.build.log"
    log.write_bytes(b"")
    try:
        _pip("install", *BUILD_DEPS, *RUNTIME_DEPS, log=log)
        with tempfile.TemporaryDirectory(prefix="orca-horovod-") as tmp:
            tools, wrappers = Path(tmp) / "cmake-dist", Path(tmp) / "bin"
            wrappers.mkdir()
            _pip("install", "--no-deps", "--only-binary", ":all:", "--target", str(tools), CMAKE, log=log)
            cmake = next(iter(sorted(tools.glob("cmake/data/bin/cmake"))), None)
            if cmake is None:
                raise SystemExit(f"{CMAKE} installed no cmake binary in {tools}: see {log}")
            out = Path(tmp) / "wheel"
            _pip("wheel", "--use-pep517", "--no-deps", "--no-build-isolation", "--no-cache-dir", "--no-binary",
                 "horovod", "-w", str(out), HOROVOD, env=build_env(frameworks, wrappers, variant, cmake), log=log)
            built = sorted(out.glob("horovod-*.whl"))
            if not built:
                raise SystemExit(f"pip built no Horovod wheel in {out}: see {log}")
            partial = wheels / (built[-1].name + ".partial")
            shutil.copyfile(built[-1], partial)
            partial.replace(wheels / built[-1].name)  # whole or not at all
    except subprocess.CalledProcessError as exc:
        text = log.read_text(errors="replace")
        cause = diagnose(text) or "see the last lines of the log above"
        raise SystemExit(f"Building {HOROVOD} for {built_for} ({variant}) failed: {cause} "
                         f"The whole log: {log} (exit code {exc.returncode}).") from None
    log.unlink(missing_ok=True)


@contextlib.contextmanager
def build_lock(wheels: Path) -> Iterator[None]:
    """Hold the lock of the cache entry ``wheels`` (a file beside it, ``<entry>.lock``): one build of
    a wheel at a time. A second installer of the same wheel (another environment, or ``nox -t test``'s
    background build) waits for the first and then finds its wheel; the lock goes with the process
    that holds it, so a killed build leaves none behind."""
    import fcntl

    wheels.parent.mkdir(parents=True, exist_ok=True)
    with open(wheels.parent / f"{wheels.name}.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Another installer is building this wheel ({wheels}); waiting for it to finish...", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install(framework: str | Sequence[str], gpu: str | None = None) -> Path:
    """Build (or take from the cache) Horovod for ``framework`` and install it here.

    Args:
        framework: ``"torch"`` or ``"tensorflow"``, or both (one build with both frameworks' ops).
        gpu: ``"auto"``, ``"cpu"`` or ``"cuda"`` (see :func:`choose_variant`); None reads
            ``$ORCA_HOROVOD_GPU`` (default ``auto``).

    Returns:
        The wheel installed.
    """
    names = _frameworks(framework)
    versions = tuple(_framework_version(name) for name in names)
    for name, version in zip(names, versions, strict=True):
        if name == "tensorflow" and tuple(int(p) for p in version.split(".")[:2]) > (2, 15):
            raise SystemExit(f"Horovod 0.28.1 does not build against TensorFlow {version} (TF >= 2.16 ships no XLA "
                             f"headers it includes). Use an environment with `pip install \"{TF_FOR_HOROVOD}\"`.")
    try:
        import pip  # noqa: F401
    except ImportError:
        raise SystemExit(f"pip is not installed in {sys.prefix}: `python -m ensurepip` (or `uv pip install pip`) "
                         "first.") from None
    variant = choose_variant(names, gpu or os.environ.get("ORCA_HOROVOD_GPU") or "auto")
    wheels = cache_dir(names, versions, variant)
    built_for = " and ".join(f"{name} {version}" for name, version in zip(names, versions, strict=True))
    with build_lock(wheels):  # another installer building the same wheel: wait for it, then take its wheel
        found = sorted(wheels.glob("horovod-*.whl"))
        if found:
            print(f"Horovod for {built_for} ({variant}): the wheel built before, {found[-1]}", flush=True)
        else:
            _build(names, built_for, variant, wheels)
            found = sorted(wheels.glob("horovod-*.whl"))
    _pip("install", str(found[-1]), *RUNTIME_DEPS)
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    """``python -m orca.core.horovod_install {torch,tensorflow}... [--gpu auto|cpu|cuda]``."""
    parser = argparse.ArgumentParser(prog="python -m orca.core.horovod_install", description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", nargs="+", choices=sorted(FRAMEWORKS),
                        help="the framework(s) Horovod is built against (both: one build for both)")
    parser.add_argument("--gpu", choices=GPU_CHOICES, default=None,
                        help="the build: cuda (NCCL) where a GPU is visible and the framework is a CUDA build, "
                             "else cpu (auto, the default; or $ORCA_HOROVOD_GPU)")
    args = parser.parse_args(argv)
    wheel = install(args.framework, args.gpu)
    print(f"Horovod installed from {wheel}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
