"""One group whose ranks are hosted differently: a reused Spark Python worker that already ran TF
cannot join a new strategy and hosts its runner in a child process, a fresh worker hosts it in
place. Both must wait on their peers in one order (the strategy, then the sync group): the
opposite orders deadlocked a fit (CI, a Spark fit after earlier TF jobs in the same workers)."""

import multiprocessing as mp
import queue

import numpy as np
import pytest

from orca.core._net import find_free_ports
from orca.core.sync import job_token


def make_model(config):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def rows(rank):
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(4, 4)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True).astype(np.float32)


def run_rank(rank, ports, sync_port, token, warm, out):
    """One worker process: with ``warm``, TF's context has started here, so the runner needs a child."""
    import tensorflow as tf

    from orca.core.engine.child import ChildRunner, host_runner
    from orca.core.engine.feed import Batch
    from orca.core.engine.runner import make_rendezvous
    from orca.tf.estimator import Estimator

    try:
        if warm:
            float(tf.reduce_sum(tf.ones(3)))
        est = Estimator.from_keras(model_creator=make_model, backend="spark")
        spec = dict(est.spec, threads=1, timeout_s=60.0, sync_token=token)
        rendezvous = make_rendezvous(rank, ["127.0.0.1"] * 2, ports, sync_port, counts=(4, 4))
        runner = host_runner(est.runner_cls, spec, rendezvous)
        start = runner.weights_digest()
        x, y = rows(rank)
        runner.train_batch(Batch(x=[x], y=[y], size=4, weight=1.0, global_size=8))
        out.put((rank, isinstance(runner, ChildRunner), start, runner.weights_digest()))
        runner.shutdown()
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put((rank, "error", repr(exc), None))


@pytest.mark.timeout(240)
def test_a_child_hosted_rank_and_an_in_place_rank_train_together():
    *ports, sync_port = find_free_ports(3)
    token = job_token()  # one job's token, handed to every rank as a launcher does
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=run_rank, args=(rank, ports, sync_port, token, rank == 0, out))
             for rank in range(2)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in range(2):
            rank, hosted, start, after = out.get(timeout=90)
            got[rank] = (hosted, start, after)
    except queue.Empty:
        pytest.fail(f"the ranks did not finish setup and one step within 90 s (got {got}): a deadlock")
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert got[0][0] is True and got[1][0] is False, got  # rank 0 in a child, rank 1 in place
    assert got[0][1] == got[1][1]  # rank 0's initial weights reached rank 1 (no seed: they differed)
    assert got[0][2] == got[1][2] != got[0][1]  # one all-reduced step kept the replicas equal
