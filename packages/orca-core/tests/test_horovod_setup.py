"""What orca-core does for a Horovod backend without Horovod itself: each rank's place (as
``horovodrun`` computes it), the environment ``hvd.init()`` reads, and the installer's build set-up
(the C++17 wrapper really run, the keyed wheel cache, the refusals). The backends themselves run in
the torch_horovod and tf_horovod sessions, where Horovod is built."""

from __future__ import annotations

import subprocess
import sys

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
    assert horovod_install.build_env("tensorflow", tmp_path)["HOROVOD_WITH_TENSORFLOW"] == "1"


def test_the_wheel_cache_is_keyed_by_framework_version_and_python(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ORCA_HOROVOD_CACHE", str(tmp_path))
    torch_dir = horovod_install.cache_dir("torch", "2.13.0")
    assert torch_dir.parent == tmp_path
    assert len({torch_dir, horovod_install.cache_dir("torch", "2.14.1"),
                horovod_install.cache_dir("tensorflow", "2.15.1")}) == 3
    assert f"py{sys.version_info[0]}{sys.version_info[1]}" in torch_dir.name


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
