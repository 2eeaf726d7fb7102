"""What orca-core does for a Horovod backend without Horovod itself: each rank's place (as
``horovodrun`` computes it), the environment ``hvd.init()`` reads, and the installer's build set-up
(the C++17 wrapper really run, the keyed wheel cache, the refusals). The backends themselves run in
the horovod session, where Horovod is built once for both frameworks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orca.core import horovod, horovod_install
from orca.core.engine.runner import make_rendezvous


def test_slots_match_horovodruns_host_assignment() -> None:
    # ranks 0, 1 on host a, rank 2 on b, rank 3 on a: local ranks count per host, the cross group of
    # local rank r holds the hosts that have an r-th rank
    got = horovod.slots(["a", "a", "b", "a"])
    assert [(s.rank, s.local_rank, s.local_size) for s in got] == [(0, 0, 3), (1, 1, 3), (2, 0, 1), (3, 2, 3)]
    assert [(s.cross_rank, s.cross_size) for s in got] == [(0, 2), (0, 1), (1, 2), (0, 1)]
    assert {s.size for s in got} == {4}
    one_host = horovod.slots(["h", "h"])
    assert [(s.local_rank, s.cross_rank, s.cross_size) for s in one_host] == [(0, 0, 1), (1, 0, 1)]


def test_the_environment_hvd_init_reads_comes_from_the_rendezvous() -> None:
    rdv = make_rendezvous(1, ["127.0.0.1", "127.0.0.1"], [41000, 41001], 41002)
    env = horovod.environment(rdv, timeout_s=90)
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
    assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "41000"  # rank 0's reserved framework port
    assert env["HOROVOD_GLOO_IFACE"] == "lo"  # gloo binds to loopback in local mode
    assert (env["HOROVOD_RANK"], env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_RANK"]) == ("1", "2", "1")
    assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "90"


def test_an_address_of_no_interface_is_refused_naming_it() -> None:
    with pytest.raises(RuntimeError, match="no network interface of this host has the address 192.0.2.7"):
        horovod.interface_of("192.0.2.7")  # TEST-NET-1: on no interface here


def test_the_build_wrapper_turns_cxx14_into_cxx17(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CXX", "echo")  # the "compiler" prints what it was given
    env = horovod_install.build_env("torch", tmp_path)
    out = subprocess.run([env["CXX"], "-O2", "-std=c++14", "-c", "a file.cc", "-std=c++11"], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["-O2", "-std=c++17", "-c", "a", "file.cc", "-std=c++17"]
    assert (env["HOROVOD_WITH_PYTORCH"], env["HOROVOD_WITHOUT_TENSORFLOW"], env["HOROVOD_WITHOUT_MPI"]) == ("1",) * 3
    tf_only = horovod_install.build_env("tensorflow", tmp_path)
    assert (tf_only["HOROVOD_WITH_TENSORFLOW"], tf_only["HOROVOD_WITHOUT_PYTORCH"]) == ("1", "1")
    assert "HOROVOD_WITH_PYTORCH" not in tf_only


def test_one_build_for_both_frameworks_switches_both_on_and_leaves_the_shells_choice_out(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOROVOD_WITHOUT_PYTORCH", "1")  # left over in a user's shell
    env = horovod_install.build_env(["tensorflow", "torch"], tmp_path)
    assert (env["HOROVOD_WITH_PYTORCH"], env["HOROVOD_WITH_TENSORFLOW"]) == ("1", "1")
    assert "HOROVOD_WITHOUT_PYTORCH" not in env and "HOROVOD_WITHOUT_TENSORFLOW" not in env
    assert env["HOROVOD_WITHOUT_MXNET"] == "1"
    with pytest.raises(SystemExit, match="unknown framework"):
        horovod_install.build_env(["torch", "jax"], tmp_path)
    # the command line takes both, and refuses what is not a framework before building anything
    out = subprocess.run([sys.executable, "-m", "orca.core.horovod_install", "torch", "jax"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "invalid choice: 'jax'" in out.stderr


def test_the_wheel_cache_is_keyed_by_framework_version_and_python(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ORCA_HOROVOD_CACHE", str(tmp_path))
    torch_dir = horovod_install.cache_dir("torch", "2.13.0")
    assert torch_dir.parent == tmp_path
    assert len({torch_dir, horovod_install.cache_dir("torch", "2.14.1"), horovod_install.cache_dir("torch", "2.13.0", "cuda"),
                horovod_install.cache_dir("tensorflow", "2.15.1"),
                horovod_install.cache_dir(("torch", "tensorflow"), ("2.13.0", "2.15.1"))}) == 5
    both = horovod_install.cache_dir(("torch", "tensorflow"), ("2.13.0", "2.15.1")).name
    assert "torch-2.13.0-tensorflow-2.15.1-cpu" in both
    with pytest.raises(ValueError, match="one version per framework"):
        horovod_install.cache_dir(("torch", "tensorflow"), "2.13.0")
    monkeypatch.delenv("ORCA_HOROVOD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # a run's own cache home (.ci/run sets one)
    assert horovod_install.cache_dir("torch", "2.13.0").parent == tmp_path / "xdg" / "orca" / "horovod"
    assert f"py{sys.version_info[0]}{sys.version_info[1]}" in torch_dir.name


LOCK_HOLDER = """
import sys, time
from pathlib import Path
from orca.core.horovod_install import build_lock
wheels, gate = Path(sys.argv[1]), Path(sys.argv[2])
with build_lock(wheels):
    print("entered", flush=True)
    while not gate.exists():  # holds the lock until the test opens the gate
        time.sleep(0.05)
    wheels.mkdir(parents=True, exist_ok=True)
    (wheels / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"built by the first")
print("released", flush=True)
"""
LOCK_TAKER = """
import sys
from pathlib import Path
from orca.core.horovod_install import build_lock
wheels = Path(sys.argv[1])
with build_lock(wheels):
    print("entered; wheels:", len(list(wheels.glob("horovod-*.whl"))), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_second_installer_of_the_same_wheel_waits_for_the_first_and_finds_its_wheel(tmp_path) -> None:
    """Two real processes take the cache entry's lock (nox -t test's background build and the horovod
    session, or two environments of a user's): the second enters only after the first has released it,
    and then sees the wheel the first wrote, so the wheel is built once."""
    wheels, gate = tmp_path / "cache" / "horovod-0.28.1-torch-2.13.0-cpu-py311", tmp_path / "gate"
    first = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(wheels), str(gate)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "entered"
        second = subprocess.Popen([sys.executable, "-c", LOCK_TAKER, str(wheels)], stdout=subprocess.PIPE, text=True)
        try:
            assert second.stdout is not None
            waiting = second.stdout.readline()
            assert "Another installer is building this wheel" in waiting and str(wheels) in waiting, waiting
            assert second.poll() is None  # still waiting while the first holds the lock
            gate.touch()
            assert first.stdout.readline().strip() == "released"
            assert second.stdout.readline().strip() == "entered; wheels: 1"  # only now, with the first's wheel there
            assert second.wait(timeout=30) == 0
        finally:
            second.kill()
    finally:
        first.kill()
    assert first.wait(timeout=30) == 0
    assert [w.read_bytes() for w in wheels.glob("*.whl")] == [b"built by the first"]


def test_the_installer_refuses_a_missing_framework_naming_the_command() -> None:
    # orca-core's test environment has no TensorFlow
    out = subprocess.run([sys.executable, "-m", "orca.core.horovod_install", "tensorflow"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert 'pip install "tensorflow-cpu==2.15.1"' in out.stderr


def test_the_install_hint_names_both_commands() -> None:
    assert "python -m orca.core.horovod_install torch" in horovod_install.install_hint("torch")
    assert "tensorflow-cpu==2.15.1" in horovod_install.install_hint("tensorflow")


def test_a_planned_backend_and_a_missing_extension_are_refused_naming_the_way_out() -> None:
    """(Every backend users know from the reference is built now; the mechanism stays for the next.)"""
    from orca.core.engine.backend import Backend, declare, resolve_backend

    backends = declare(Backend("a", "ray", object), Backend("b", "spark", object),
                       Backend("later", "ray", object, planned="tracked in #99"),
                       Backend("ext", "ray", object, requires=("json.no_such_part",), install="pip install ext"))
    with pytest.raises(ValueError, match=r"backend='later' is not available yet in Toy \(tracked in #99\); "
                                         r"use 'a', 'b' or 'ext'"):
        resolve_backend(backends, "later", "Toy")
    # a dotted requirement is looked up whole: json is installed, json.no_such_part is not
    with pytest.raises(ImportError, match=r"needs json\.no_such_part.*Install it with: pip install ext"):
        resolve_backend(backends, "ext", "Toy")
    assert resolve_backend(backends, "a", "Toy").name == "a"


def test_a_missing_horovod_module_is_an_import_error_naming_the_build_command() -> None:
    with pytest.raises(ImportError, match=r"needs Horovod built for torch \(orca_no_such_horovod\.torch is missing.*"
                                          r"python -m orca\.core\.horovod_install torch"):
        horovod.framework_module("orca_no_such_horovod.torch", "torch")
    assert horovod.framework_module("json", "torch").__name__ == "json"  # an installed module comes back


#: a project shaped like Horovod 0.28.1's CMake: a bundled subproject with gloo's old
#: cmake_minimum_required (CMake 4 refuses it), Horovod's CUDA probe (check_language, then CUDAToolkit)
_HOROVOD_LIKE = {
    "CMakeLists.txt": """cmake_minimum_required(VERSION 3.13 FATAL_ERROR)
project(like_horovod CXX)
add_subdirectory(third_party/gloo)
include(frameworks.cmake)
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
    if(CUDAToolkit_BIN_DIR)
        set(CMAKE_CUDA_COMPILER "${CUDAToolkit_BIN_DIR}/nvcc")
    endif()
endif()
if(CMAKE_CUDA_COMPILER)
    message(STATUS "ORCA-PROBE cuda=on ${CMAKE_CUDA_COMPILER}")
else()
    message(STATUS "ORCA-PROBE cuda=off")
endif()
""",
    "third_party/gloo/CMakeLists.txt": "cmake_minimum_required(VERSION 2.8.12 FATAL_ERROR)\nproject(gloo CXX)\n"
                                       "add_library(gloo STATIC unlinked.cc)\n",
    # the copy of gloo no framework links: in the default target, and it does not compile
    "third_party/gloo/unlinked.cc": "#error this gloo copy is linked by no framework: it must not be built\n",
    # the frameworks' libraries (Horovod's target names) and the copy of gloo they link
    "frameworks.cmake": """add_library(compatible17_gloo STATIC gloo17.cc)
add_library(pytorch SHARED framework.cc)
target_link_libraries(pytorch compatible17_gloo)
add_library(tensorflow SHARED framework.cc)
target_link_libraries(tensorflow compatible17_gloo)
message(STATUS "ORCA-FLAGS ${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
""",
    "gloo17.cc": "int gloo17() { return 17; }\n",
    "framework.cc": "int gloo17();\nint framework() { return gloo17(); }\n",
}


def _configure(cmake: str, tree: Path) -> subprocess.CompletedProcess[str]:
    for name, text in _HOROVOD_LIKE.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    build = tree / "build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    return subprocess.run([cmake, str(tree), "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], cwd=build, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.timeout(600)
def test_the_cpu_build_configures_horovods_tree_without_cuda_even_with_nvcc_installed(tmp_path) -> None:
    """The CMake of the build (the pinned 3.x, installed in this session as the installer installs it
    for its build) through the wrapper the installer hands Horovod: the old minimum of the bundled
    gloo is accepted and CUDA stays off though this machine's image has a CUDA toolkit (nvcc on
    PATH, no GPU). Without the wrapper's options the same CMake finds that toolkit: the probe works."""
    cmake = shutil.which("cmake")
    assert cmake, "the core session installs the installer's CMake (noxfile: HOROVOD_CMAKE)"
    version = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=True).stdout.split()[2]
    assert f"cmake=={version}" == horovod_install.CMAKE, "the noxfile's CMake pin and the installer's differ"
    wrapper = horovod_install.write_cmake_wrapper(Path(cmake), "cpu", tmp_path)
    out = _configure(str(wrapper), tmp_path / "cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ORCA-PROBE cuda=off" in out.stdout
    if shutil.which("nvcc") and not horovod_install.gpu_visible():  # this machine's image: a toolkit, no GPU
        plain = _configure(cmake, tmp_path / "plain")
        assert "ORCA-PROBE cuda=on" in plain.stdout, plain.stdout + plain.stderr
    # the build itself (`--build`) gets no configure options
    (tmp_path / "e").mkdir()
    echo = horovod_install.write_cmake_wrapper(Path(shutil.which("echo") or "/bin/echo"), "cpu", tmp_path / "e")
    assert subprocess.run([echo, "--build", "."], capture_output=True, text=True).stdout.split() == ["--build", "."]
    # for the frameworks asked for, their libraries are the targets (what setup.py's arguments follow)
    both = horovod_install.write_cmake_wrapper(Path("/bin/echo"), "cpu", tmp_path / "e", ("tensorflow", "torch"))
    assert subprocess.run([both, "--build", ".", "--config", "RelWithDebInfo"], capture_output=True,
                          text=True).stdout.split() == ["--build", ".", "--target", "pytorch", "tensorflow",
                                                        "--config", "RelWithDebInfo"]
    assert "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE" in subprocess.run(
        [echo, "src"], capture_output=True, text=True).stdout.split()
    assert "CUDAToolkit" not in horovod_install.write_cmake_wrapper(Path("/bin/echo"), "cuda", tmp_path).read_text()


@pytest.mark.timeout(600)
def test_the_build_compiles_the_frameworks_libraries_without_debug_info_and_skips_the_unlinked_gloo(tmp_path) -> None:
    """Horovod's tree compiles a copy of gloo per C++ ABI/standard, also one no framework links, and
    builds RelWithDebInfo (-g). Through the installer's wrapper a configure + build as setup.py runs
    them (``cmake SRC -DCMAKE_BUILD_TYPE=RelWithDebInfo``, then ``cmake --build . --config
    RelWithDebInfo``) compiles the frameworks' libraries and the gloo they link, without -g, and never
    the unlinked copy (its source does not compile: the plain build fails on it, the control)."""
    cmake = shutil.which("cmake")
    assert cmake, "the core session installs the installer's CMake (noxfile: HOROVOD_CMAKE)"
    wrapper = horovod_install.write_cmake_wrapper(Path(cmake), "cpu", tmp_path, ("torch", "tensorflow"))
    tree = tmp_path / "tree"
    configured = _configure(str(wrapper), tree)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    flags = next(line for line in configured.stdout.splitlines() if "ORCA-FLAGS" in line)
    assert "-O2" in flags and "-g" not in flags.split(), flags
    build = tree / "build"
    built = subprocess.run([str(wrapper), "--build", ".", "--config", "RelWithDebInfo"], cwd=build,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert sorted(p.name for p in build.glob("*.so")) == ["libpytorch.so", "libtensorflow.so"]
    plain = subprocess.run([cmake, "--build", "."], cwd=build, capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "must not be built" in plain.stdout + plain.stderr


def test_the_build_environment_sets_the_variant_and_drops_the_shells_gpu_settings(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOROVOD_GPU_OPERATIONS", "NCCL")  # left over in a user's shell
    monkeypatch.delenv("HOROVOD_CMAKE", raising=False)
    env = horovod_install.build_env("torch", tmp_path, "cpu", Path("/opt/cmake/bin/cmake"))
    assert "HOROVOD_GPU_OPERATIONS" not in env
    assert env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"  # a CMake 4 given by hand configures the tree too
    wrapper = Path(env["HOROVOD_CMAKE"]).read_text()
    assert wrapper.count("/opt/cmake/bin/cmake") == 3 and "--target pytorch" in wrapper
    assert horovod_install.build_env("torch", tmp_path, "cuda")["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    monkeypatch.setenv("HOROVOD_CMAKE", "/usr/local/bin/my-cmake")  # the user's choice wins
    assert horovod_install.build_env("torch", tmp_path, "cpu", Path("/x"))["HOROVOD_CMAKE"] == "/usr/local/bin/my-cmake"


def test_the_variant_is_cpu_without_a_gpu_and_cuda_is_refused_for_a_framework_without_cuda() -> None:
    if horovod_install.gpu_visible():
        pytest.fail("this test runs on machines without a GPU (CI's): no nvidia-smi GPU expected")
    # orca-core's session has no torch: the framework probe says "no CUDA"
    assert horovod_install.choose_variant("torch", "auto") == "cpu"
    assert horovod_install.choose_variant("tensorflow", "cpu") == "cpu"
    with pytest.raises(SystemExit, match=r"--gpu cuda: the installed torch is not a CUDA build.*`--gpu cpu`"):
        horovod_install.choose_variant("torch", "cuda")
    with pytest.raises(SystemExit, match="not one of"):
        horovod_install.choose_variant("torch", "rocm")


@pytest.mark.parametrize(("log", "names"), [
    ("CMake Error at third_party/gloo/CMakeLists.txt:1 (cmake_minimum_required):\n  Compatibility with CMake < 3.5 "
     "has been removed from CMake.", ("CMake 4", horovod_install.CMAKE)),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_35'", ("--gpu cpu",)),
    ("OSError: [Errno 28] No space left on device", ("disk", "TMPDIR")),
    ("ERROR: No matching distribution found for horovod==0.28.1", ("package index",)),
    ("fatal error: Python.h: No such file or directory", ("python3-dev",)),
])
def test_a_failed_build_is_diagnosed_naming_the_cause_and_the_fix(log, names) -> None:
    message = horovod_install.diagnose("...\n" + log + "\n...")
    assert message is not None
    for name in names:
        assert name in message
    assert horovod_install.diagnose("error: something nobody has seen") is None
