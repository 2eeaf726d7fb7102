"""A local-mode Keras fit listens on 127.0.0.1 only, but for TensorFlow's own gRPC server.

Every listening socket of this process and its children (Spark, Ray, the workers, the driver's
progress server) is sampled while a fit runs, with rank 1 joining late so that the sync group's
rendezvous listener is open long enough to be seen. On the ``bigdl`` backend (orca.core.sync
only) all are on loopback. On ``ray`` and ``spark`` the MultiWorkerMirroredStrategy's gRPC server binds every
interface (TensorFlow hard-codes ``0.0.0.0``, docs/security.md says so): those, and only those,
are allowed beyond loopback, on exactly the ports of the workers' ``TF_CONFIG``.
"""

import pytest
from conftest import linear_creator, regression

from orca.core.testing.listeners import listeners_of_a_fit, still_listening, with_straggler
from orca.tf import Estimator

StragglerEstimator = with_straggler(Estimator)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["ray", "spark", "bigdl"])
def test_a_local_fit_listens_on_loopback_only_but_for_tfs_grpc_server(orca_context, backend, tmp_path):
    rdv_file = tmp_path / "rdv.json"
    x, y = regression(64)
    est = StragglerEstimator.from_keras(model_creator=linear_creator(), backend=backend, workers_per_node=2,
                                        config={"rdv_file": str(rdv_file)}, verbose=0)
    sampler, facts = listeners_of_a_fit(est, lambda: est.fit((x, y), epochs=2, batch_size=16), rdv_file)
    strategy = backend in ("ray", "spark")  # MultiWorkerMirroredStrategy: TensorFlow's gRPC servers
    tf_ports = {int(a.rsplit(":", 1)[1]) for a in facts["worker_addresses"]} if strategy else set()
    if strategy:
        assert tf_ports <= sampler.ports, f"TF's gRPC servers were not seen: {sorted(sampler.seen)}"
        left = still_listening(tf_ports, timeout_s=30)
        assert not left, f"TF's gRPC servers outlived the Estimator's shutdown: {sorted(left)}"
    assert not sampler.exposed(except_ports=tf_ports), f"listening beyond loopback: {sampler.exposed(tf_ports)}"
