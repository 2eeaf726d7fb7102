"""A local-mode mxnet fit listens on 127.0.0.1 only, on both backends: the sync group's rendezvous
listener (held open by a late rank 1 and seen), the driver's progress server, Spark's and Ray's own
ports: every listening socket of this process and its children, sampled while the fit runs."""

import numpy as np
import pytest
from conftest import l2_loss, linear_creator

from orca.core.testing.listeners import listeners_of_a_fit, with_straggler
from orca.mxnet import Estimator, create_config

StragglerEstimator = with_straggler(Estimator)


@pytest.mark.timeout(300)
def test_a_local_fit_listens_on_loopback_only(orca_context, backend, tmp_path):
    rdv_file = tmp_path / "rdv.json"
    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
    config = create_config(optimizer="sgd", optimizer_params={"learning_rate": 0.1}, seed=0,
                           extra_config={"rdv_file": str(rdv_file)})
    est = StragglerEstimator.from_mxnet(config=config, model_creator=linear_creator(), loss_creator=l2_loss,
                                        backend=backend, workers_per_node=2)
    sampler, _ = listeners_of_a_fit(est, lambda: est.fit((x, y), epochs=2, batch_size=16), rdv_file)
    assert not sampler.exposed(), f"listening beyond loopback in local mode: {sampler.exposed()}"
