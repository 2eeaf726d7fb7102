"""Build and install Horovod for this environment's PyTorch or TensorFlow.

Horovod ships no wheels: pip builds it from its sdist, against the framework already installed
(so ``--no-build-isolation``), and two things stand in the way on today's stacks:

- its CMake forces ``-std=c++14`` while torch >= 2.1's headers need C++17: the build runs with
  ``CXX`` set to a small wrapper that turns ``-std=c++11/14`` into ``-std=c++17``;
- it does not build against TensorFlow >= 2.16 (TF stopped shipping the XLA headers it
  includes): ``tensorflow-cpu==2.15.1`` (Keras 2) is the newest it builds with.

Run it in the environment Horovod is for, after installing the framework::

    pip install orca-torch
    python -m orca.core.horovod_install torch          # or: tensorflow

The built wheel is kept in a cache of its own (``~/.cache/orca/horovod``, or ``$ORCA_HOROVOD_CACHE``)
keyed by the framework, its version and the Python version: pip's own wheel cache knows the
sdist only, and would hand a torch build of Horovod to a TensorFlow environment. The first build
takes about 2-4 minutes on 2 cores (measured: 2 min 15 s for torch, 2 min 9 s for TensorFlow on a
quiet machine); later installs take seconds.
Horovod uses its gloo controller (no MPI is needed or built).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HOROVOD = "horovod==0.28.1"
#: what Horovod needs at run time besides the framework (its own dependencies, installed with it)
RUNTIME_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi>=1.4.0")
#: what the build needs in the environment (``--no-build-isolation``)
BUILD_DEPS = ("setuptools", "wheel", "cmake>=3.13")
FRAMEWORKS = {"torch": "torch", "tensorflow": "tensorflow-cpu"}
#: the newest TensorFlow Horovod builds against
TF_FOR_HOROVOD = "tensorflow-cpu==2.15.1"

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


def cache_dir(framework: str, version: str) -> Path:
    """Where the wheel built for this framework version and Python is kept."""
    root = Path(os.environ.get("ORCA_HOROVOD_CACHE") or Path.home() / ".cache" / "orca" / "horovod")
    tag = f"{HOROVOD.replace('==', '-')}-{framework}-{version}-py{sys.version_info[0]}{sys.version_info[1]}"
    return root / tag


def build_env(framework: str, wrapper_dir: Path) -> dict[str, str]:
    """The environment of the build: one framework, gloo only, the C++17 wrapper as ``CXX``."""
    env = dict(os.environ)
    real_cxx = env.get("CXX") or shutil.which("g++") or "c++"
    wrapper = wrapper_dir / "cxx17"
    wrapper.write_text(_CXX_WRAPPER.format(cxx=real_cxx))
    wrapper.chmod(0o755)
    on, off = ("PYTORCH", "TENSORFLOW") if framework == "torch" else ("TENSORFLOW", "PYTORCH")
    env.update({
        "CXX": str(wrapper), f"HOROVOD_WITH_{on}": "1", f"HOROVOD_WITHOUT_{off}": "1",
        "HOROVOD_WITHOUT_MXNET": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
        "HOROVOD_CPU_OPERATIONS": "gloo", "MAKEFLAGS": f"-j{os.cpu_count() or 2}",
    })
    return env


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)  # noqa: S603 - this interpreter's pip, fixed arguments, no shell


def install(framework: str) -> Path:
    """Build (or take from the cache) Horovod for ``framework`` and install it here.

    Returns:
        The wheel installed.
    """
    if framework not in FRAMEWORKS:
        raise SystemExit(f"unknown framework {framework!r}: choose one of {sorted(FRAMEWORKS)}.")
    version = _framework_version(framework)
    if framework == "tensorflow" and tuple(int(p) for p in version.split(".")[:2]) > (2, 15):
        raise SystemExit(f"Horovod 0.28.1 does not build against TensorFlow {version} (TF >= 2.16 ships no XLA "
                         f"headers it includes). Use an environment with `pip install \"{TF_FOR_HOROVOD}\"`.")
    try:
        import pip  # noqa: F401
    except ImportError:
        raise SystemExit(f"pip is not installed in {sys.prefix}: `python -m ensurepip` (or `uv pip install pip`) "
                         "first.") from None
    wheels = cache_dir(framework, version)
    found = sorted(wheels.glob("horovod-*.whl"))
    if found:
        print(f"Horovod for {framework} {version}: the wheel built before, {found[-1]}", flush=True)
    else:
        print(f"Building {HOROVOD} for {framework} {version} (2-4 minutes on 2 cores)...", flush=True)
        _pip("install", *BUILD_DEPS, *RUNTIME_DEPS)
        with tempfile.TemporaryDirectory(prefix="orca-horovod-") as tmp:
            out = Path(tmp) / "wheel"
            _pip("wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "--no-binary", "horovod",
                 "-w", str(out), HOROVOD, env=build_env(framework, Path(tmp)))
            built = sorted(out.glob("horovod-*.whl"))
            if not built:
                raise SystemExit(f"pip built no Horovod wheel in {out}")
            wheels.mkdir(parents=True, exist_ok=True)
            partial = wheels / (built[-1].name + ".partial")
            shutil.copyfile(built[-1], partial)
            partial.replace(wheels / built[-1].name)  # whole or not at all
        found = sorted(wheels.glob("horovod-*.whl"))
    _pip("install", str(found[-1]), *RUNTIME_DEPS)
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    """``python -m orca.core.horovod_install {torch,tensorflow}``."""
    parser = argparse.ArgumentParser(prog="python -m orca.core.horovod_install", description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=sorted(FRAMEWORKS), help="the framework Horovod is built against")
    args = parser.parse_args(argv)
    wheel = install(args.framework)
    print(f"Horovod installed from {wheel}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
