"""The ``horovod`` backend: Horovod's gloo controller started from Orca's rendezvous on Ray actors.

The pinned-number tests of the other modules (exact SGD, the multi-tensor and BatchNorm models,
the CNN, skewed shares, the conformance suite with its failure tests, the guide's sample, the
loopback check) run on horovod too where Horovod is built: the ``horovod`` nox session runs
``-m horovod``. This module holds what only this backend has. Where Horovod is not built (the
``torch`` session) its one test checks the error that names the install command.
"""

from __future__ import annotations

import http.client
import socket

import numpy as np
import pytest
from conftest import HOROVOD, sgd
from test_training import expected_sgd_weight, one_weight_model
from torch import nn

from orca.core.plugin import Rendezvous
from orca.torch import Estimator

pytestmark = pytest.mark.timeout(300)

if not HOROVOD:

    def test_the_horovod_backend_without_horovod_names_the_install_command() -> None:
        with pytest.raises(ImportError, match=r"python -m orca\.core\.horovod_install torch") as err:
            Estimator.from_torch(model=nn.Linear(1, 1), optimizer=sgd(0.1), loss=nn.MSELoss(), backend="horovod")
        assert "horovod.torch" in str(err.value)

else:
    from orca.core.horovod import RendezvousStore

    pytestmark = [pytestmark, pytest.mark.horovod]

    def _rendezvous(port: int) -> Rendezvous:
        return Rendezvous(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port,
                          extra={"worker_addresses": ["127.0.0.1:1", "127.0.0.1:2"]})

    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def _get(port: int, source: str) -> int | None:
        """The status of a GET of the store's ``global/rank_0`` key from ``source``; None if refused."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
        try:
            conn.request("GET", "/global/rank_0")
            return conn.getresponse().status
        except (ConnectionError, http.client.RemoteDisconnected):
            return None
        finally:
            conn.close()

    def test_the_rendezvous_store_answers_the_jobs_hosts_only() -> None:
        """Horovod's store has no authentication: Orca's binds to rank 0's address and drops any host
        that runs none of the job's ranks (127.0.0.2 here), while a worker's host is answered."""
        store = RendezvousStore(_rendezvous(_free_port()))
        try:
            host, port = store.address
            assert host == "127.0.0.1"
            assert _get(port, "127.0.0.1") == 404  # answered: nothing stored under that key yet
            assert _get(port, "127.0.0.2") is None  # a stranger's connection is closed unanswered
        finally:
            store.close()
        with pytest.raises(ConnectionRefusedError):  # closed: nothing listens there any more
            socket.create_connection(("127.0.0.1", port), timeout=5).close()

    def test_a_second_fit_on_warm_workers_continues_exactly(orca_context) -> None:
        """Two fits on the same (warm) actors and their Horovod group: the second continues from the
        first's weights: the SGD of both fits' global batches, to 1e-6."""
        x = (np.arange(1, 9, dtype=np.float64) / 8).reshape(-1, 1).astype(np.float32)
        y = (2 * x).astype(np.float32)
        est = Estimator.from_torch(model=one_weight_model(), optimizer=sgd(0.1), loss=nn.MSELoss(),
                                   backend="horovod", workers_per_node=2)
        try:
            est.fit({"x": x, "y": y}, epochs=1, batch_size=4, shuffle=False)
            first = float(est.get_model().weight.item())
            est.fit({"x": x, "y": y}, epochs=1, batch_size=4, shuffle=False)
            second = float(est.get_model().weight.item())
        finally:
            est.shutdown()
        batches = [[0, 1, 4, 5], [2, 3, 6, 7]]
        xs, ys = x[:, 0].astype(np.float64), y[:, 0].astype(np.float64)
        want_first = expected_sgd_weight(xs, ys, 0.5, 0.1, batches)
        assert first == pytest.approx(want_first, abs=1e-6)
        assert second == pytest.approx(expected_sgd_weight(xs, ys, want_first, 0.1, batches), abs=1e-6)
