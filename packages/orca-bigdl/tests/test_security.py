"""A local-mode BigDL fit listens on 127.0.0.1 only.

BigDL trains inside Spark's JVM (its all-reduce goes through Spark's block manager): every
listening socket of this process and its children (the JVM, Spark's Python workers) is sampled
while a fit runs. The sampler must have seen Spark's own listeners, so an empty sample cannot
pass.
"""

import numpy as np
import pytest
from conftest import linear

from orca.bigdl import Estimator
from orca.core.testing.listeners import ListenerSampler


@pytest.mark.timeout(300)
def test_a_local_fit_listens_on_loopback_only(spark, regression):
    from bigdl.dllib.nn.criterion import MSECriterion
    from bigdl.dllib.optim.optimizer import SGD

    x, y = regression
    est = Estimator.from_bigdl(model=linear(), loss=MSECriterion(), optimizer=SGD(learningrate=0.1))
    with ListenerSampler() as sampler:
        est.fit((x, y[:, None]), epochs=4, batch_size=32)
    pred = np.asarray(est.predict(x, batch_size=32)).reshape(-1)
    assert float(np.mean((pred - y) ** 2)) < float(np.var(y)) / 10  # it trained while we looked
    assert len(sampler.seen) >= 2, f"the sampler saw too few listeners to prove anything: {sorted(sampler.seen)}"
    assert not sampler.exposed(), f"listening beyond loopback: {sampler.exposed()}"
