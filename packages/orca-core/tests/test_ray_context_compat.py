"""The reference's ``OrcaRayContext`` (``bigdl.orca.ray``) as its callers read it: ``get()`` answers
``address_info``, ``num_ray_nodes``, ``ray_node_cpu_cores`` from the running context's own Ray
(checked against Ray's ``ray.get_runtime_context()`` and ``ray.nodes()``); ``stop()`` and a later
``get()`` stop and restart that Ray, in a fresh interpreter so the session's shared Ray stays up.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from orca.core import OrcaContext, OrcaRayContext
from orca.core.testing.clusters import run_python

#: the keys the reference's callers read from ``address_info`` (the result of its ``ray.init()``)
REFERENCE_KEYS = {"node_ip_address", "redis_address", "object_store_address", "raylet_socket_name"}


def _alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


@pytest.mark.timeout(300)
def test_get_starts_the_contexts_ray_and_reports_its_gcs_address(orca_context: Any) -> None:
    import ray

    ray_ctx = OrcaRayContext.get()
    assert ray.is_initialized() and ray_ctx.initialized
    gcs = ray.get_runtime_context().gcs_address
    assert gcs == OrcaContext.get_ray_context().address
    assert ray_ctx.redis_address == gcs
    info = ray_ctx.address_info
    assert info["address"] == info["gcs_address"] == info["redis_address"] == gcs
    assert ray_ctx.redis_password is None


@pytest.mark.timeout(300)
def test_node_count_and_cpus_are_those_ray_reports(orca_context: Any) -> None:
    ray_ctx = OrcaRayContext.get()
    nodes = _alive_nodes()
    assert ray_ctx.num_ray_nodes == len(nodes) == 1
    # the shared context asks for 2 cores: its embedded Ray has 2 CPUs
    assert ray_ctx.ray_node_cpu_cores == int(nodes[0]["Resources"]["CPU"]) == 2
    assert ray_ctx.total_cores == 2
    assert ray_ctx.is_local is True
    assert ray_ctx.runtime == "spark"


@pytest.mark.timeout(300)
def test_address_info_has_the_reference_keys_with_this_nodes_values(orca_context: Any) -> None:
    import ray

    info = OrcaRayContext.get().address_info
    assert REFERENCE_KEYS <= set(info)
    node_id = ray.get_runtime_context().get_node_id()
    (node,) = [n for n in _alive_nodes() if n["NodeID"] == node_id]
    assert info["node_id"] == node_id
    assert info["node_ip_address"] == info["raylet_ip_address"] == node["NodeManagerAddress"] == "127.0.0.1"
    assert info["object_store_address"] == node["ObjectStoreSocketName"] and info["object_store_address"]
    assert info["raylet_socket_name"] == node["RayletSocketName"] and info["raylet_socket_name"]


@pytest.mark.timeout(300)
def test_get_returns_one_object_per_context_and_its_spark_context(orca_context: Any) -> None:
    first = OrcaRayContext.get()
    assert OrcaRayContext.get() is first
    assert OrcaRayContext.get(initialize=False) is first
    assert OrcaRayContext._active_ray_context is first
    assert first.sc is orca_context  # the SparkContext init_orca_context returned
    assert "1 node(s) x 2 CPUs" in repr(first)


@pytest.mark.timeout(300)
def test_init_with_driver_cores_warns_once_and_changes_nothing(orca_context: Any) -> None:
    ray_ctx = OrcaRayContext.get()
    before = ray_ctx.redis_address
    with pytest.warns(UserWarning, match=r"driver_cores=2\) has no effect"):
        info = ray_ctx.init(driver_cores=2)
    assert info["redis_address"] == before == ray_ctx.redis_address
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        ray_ctx.init(driver_cores=2)  # once per process
        ray_ctx.init()
    assert not [w for w in later if "driver_cores" in str(w.message)]


def test_constructing_it_as_the_reference_did_is_refused_naming_init_orca_context() -> None:
    with pytest.raises(TypeError, match=r"init_orca_context\(cores=.*OrcaRayContext\.get\(\)"):
        OrcaRayContext("ray", cores=2, num_nodes=1)
    with pytest.raises(TypeError, match="init_orca_context"):
        OrcaRayContext(sc=None, object_store_memory="1g")


LIFECYCLE = """
import json
import ray
from orca.core import OrcaRayContext, init_orca_context, stop_orca_context

sc = init_orca_context(cluster_mode="local", cores=2, memory="1g")
out = {}
lazy = OrcaRayContext.get(initialize=False)
out["lazy_initialized"] = lazy.initialized
out["lazy_ray"] = ray.is_initialized()
try:
    lazy.num_ray_nodes
    out["lazy_error"] = None
except RuntimeError as exc:
    out["lazy_error"] = str(exc)
ray_ctx = OrcaRayContext.get()
out["same"] = ray_ctx is lazy
out["started"] = [ray_ctx.initialized, ray.is_initialized(), ray_ctx.num_ray_nodes, ray_ctx.ray_node_cpu_cores]
out["address"] = ray_ctx.redis_address
out["gcs"] = ray.get_runtime_context().gcs_address
ray_ctx.stop()
out["stopped"] = [ray_ctx.initialized, ray.is_initialized(), OrcaRayContext._active_ray_context is None]
out["spark_after_stop"] = sc.parallelize(range(10), 2).sum()
again = OrcaRayContext.get()
out["again"] = [again.initialized, ray.is_initialized(), again.num_ray_nodes,
                again.redis_address == ray.get_runtime_context().gcs_address]
stop_orca_context()
try:
    OrcaRayContext.get(initialize=False)
    out["after_context_stop"] = None
except RuntimeError as exc:
    out["after_context_stop"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_initialize_false_stop_and_get_again_follow_the_contexts_ray() -> None:
    out = run_python(LIFECYCLE, timeout_s=280)
    # get(initialize=False) starts nothing; what needs Ray says how to start it
    assert out["lazy_initialized"] is False and out["lazy_ray"] is False
    assert "OrcaRayContext.get()" in out["lazy_error"]
    assert out["same"] is True
    assert out["started"] == [True, True, 1, 2]
    assert out["address"] == out["gcs"]
    # stop() ends Ray alone: the context's Spark still computes, and get() starts Ray again
    assert out["stopped"] == [False, False, True]
    assert out["spark_after_stop"] == 45
    assert out["again"] == [True, True, 1, True]
    assert "init_orca_context" in out["after_context_stop"]
