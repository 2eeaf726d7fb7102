"""Engine hooks for inference-only frameworks: a runner that keeps several batches in flight, and
an Estimator flag that refuses fit/evaluate before any worker starts."""

import numpy as np
import pytest

from orca.core.engine.backend import Backend, declare
from orca.core.engine.estimator import BaseEstimator
from orca.core.engine.feed import Feed
from orca.core.engine.loop import run_predict
from orca.core.engine.runner import Runner


class _Doubler(Runner):
    def train_batch(self, batch):
        raise NotImplementedError

    def eval_batch(self, batch):
        raise NotImplementedError

    def predict_batch(self, batch):
        return [batch.x[0] * 2]

    def get_state(self):
        return {}

    def set_state(self, state):
        pass


class _AllAtOnce(_Doubler):
    """Sees every batch before answering any (as an asynchronous queue does)."""

    def predict_batches(self, batches):
        pending = list(batches)
        self.seen = len(pending)
        return iter([[b.x[0] * 2] for b in pending])


def test_run_predict_keeps_row_order_through_the_default_and_an_overridden_predict_batches():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    for runner in (_Doubler({}), _AllAtOnce({})):
        (out,) = run_predict(runner, Feed([x]), batch_size=3)
        np.testing.assert_array_equal(out, x * 2)
    assert runner.seen == 4  # ceil(10 / 3) batches, the last one partial


class _InferenceOnly(BaseEstimator):
    backends = declare(Backend("spark", "spark", _Doubler))
    inference_only = True


@pytest.mark.parametrize("method", ["fit", "evaluate"])
def test_inference_only_estimator_refuses_training_calls_before_any_work(method):
    est = _InferenceOnly(spec={}, backend="spark")
    with pytest.raises(NotImplementedError, match=f"inference-only: {method}\\(\\)"):
        getattr(est, method)(np.zeros((4, 1), np.float32))
