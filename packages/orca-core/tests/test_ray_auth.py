"""Ray token authentication: kept on with a token per context; ``ray_auth=False`` turns it off;
a process without the context's token is refused. Each driver runs in its own interpreter."""

import pytest

from orca.core import init_orca_context
from orca.core.testing.clusters import run_python

DRIVER = r'''
import json, os, subprocess, sys
from orca.core import init_orca_context, stop_orca_context

PROBE = "import ray; ray.init(address=%r, log_to_driver=False); print(len(ray.nodes()))"
def joins(address, env):
    out = subprocess.run([sys.executable, "-c", PROBE % address], env=dict(os.environ, **env), capture_output=True,
                         text=True, timeout=120)
    return out.returncode == 0 if not env.get("WHY") else ("InvalidAuthToken" in out.stderr)

report = {"env_before": os.environ.get("RAY_AUTH_MODE")}
ctx = init_orca_context(runtime="ray", cores=1)
rt, env = ctx.ray_runtime(), ctx.ray_join_env()
report["first"] = {"auth": rt.auth, "mode": env["RAY_AUTH_MODE"], "token_len": len(env.get("RAY_AUTH_TOKEN", "")),
                   "with_token": joins(rt.address, env),
                   # Ray retries a refused connection for 20 s unless told: 2 tries are enough here
                   "wrong_token": joins(rt.address, dict(env, RAY_AUTH_TOKEN="0" * 64,
                                                         RAY_gcs_server_port_wait_time_s="2")),
                   "refused_for_the_token": joins(rt.address, dict(env, RAY_AUTH_TOKEN="0" * 64, WHY="1",
                                                                   RAY_gcs_server_port_wait_time_s="2"))}
first_token = env["RAY_AUTH_TOKEN"]
stop_orca_context()
report["env_after"] = [os.environ.get("RAY_AUTH_MODE"), os.environ.get("RAY_AUTH_TOKEN")]
ctx = init_orca_context(runtime="ray", cores=1)
report["new_token"] = ctx.ray_join_env()["RAY_AUTH_TOKEN"] != first_token
stop_orca_context()
ctx = init_orca_context(runtime="ray", cores=1, ray_auth=False)
rt = ctx.ray_runtime()
report["off"] = {"auth": rt.auth, "env": ctx.ray_join_env(), "no_token": joins(rt.address, {"RAY_AUTH_MODE": "disabled"})}
stop_orca_context()
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def auth_report():
    return run_python(DRIVER, env={"RAY_AUTH_MODE": "", "RAY_AUTH_TOKEN": ""}, timeout_s=500)


@pytest.mark.timeout(600)
def test_a_context_ray_has_token_auth_on_and_refuses_a_wrong_token(auth_report):
    first = auth_report["first"]
    assert first["auth"] is True and first["mode"] == "token" and first["token_len"] == 64
    assert first["with_token"] is True
    assert first["wrong_token"] is False
    assert first["refused_for_the_token"] is True  # Ray said InvalidAuthToken, not some other failure


@pytest.mark.timeout(600)
def test_each_context_gets_its_own_token_and_stop_restores_the_environment(auth_report):
    assert auth_report["new_token"] is True
    assert auth_report["env_after"] == ["", ""]  # what the driver had before (empty here)


@pytest.mark.timeout(600)
def test_ray_auth_false_turns_token_auth_off(auth_report):
    off = auth_report["off"]
    assert off["auth"] is False and off["env"] == {"RAY_AUTH_MODE": "disabled"}
    assert off["no_token"] is True


@pytest.mark.parametrize("kwargs", [
    {"address": "127.0.0.1:1", "init_ray_on_spark": True},
    {"address": "127.0.0.1:1", "ray_on_driver": True},
    {"init_ray_on_spark": True, "ray_on_driver": True},
])
def test_two_ways_to_run_ray_at_once_are_refused_before_anything_starts(kwargs):
    with pytest.raises(ValueError, match="choose one way to run Ray"):
        init_orca_context(cluster_mode="local", **kwargs)
