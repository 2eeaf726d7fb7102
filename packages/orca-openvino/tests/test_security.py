"""A local-mode OpenVINO prediction listens on 127.0.0.1 only, on both backends.

Every listening socket of this process and its children (Spark, Ray, the workers, the driver's
progress server) is sampled while predictions run. Orca's OpenVINO workers open no socket of
their own; what must hold is that nothing the prediction starts (Ray actors, Spark Python
workers) listens beyond loopback. The sampler must have seen the engines' own listeners, so an
empty sample cannot pass.
"""

import numpy as np
import pytest
from conftest import F32

from orca.core.testing.listeners import ListenerSampler
from orca.openvino import Estimator


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["ray", "spark"])
def test_a_local_prediction_listens_on_loopback_only(orca_context, linear_ir, backend):
    x = np.random.default_rng(0).normal(size=(4096, 4)).astype(np.float32)
    est = Estimator.from_openvino(model_path=linear_ir, config=F32, backend=backend, workers_per_node=2)
    try:
        with ListenerSampler() as sampler:
            for _ in range(3):
                out = est.predict(x, batch_size=64)
    finally:
        est.shutdown()
    np.testing.assert_allclose(np.asarray(out).reshape(-1), x @ np.array([1.5, -2.0, 0.5, 3.0], np.float32) + 0.25,
                               rtol=1e-5, atol=1e-5)
    assert len(sampler.seen) >= 2, f"the sampler saw too few listeners to prove anything: {sorted(sampler.seen)}"
    assert not sampler.exposed(), f"listening beyond loopback: {sampler.exposed()}"
