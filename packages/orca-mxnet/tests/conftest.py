import numpy as np
import pytest

pytest_plugins = ["orca.core.testing.fixtures"]


@pytest.fixture(params=["ray", "spark"])
def backend(request):
    """Every behaviour is checked on both backends."""
    return request.param


def linear_creator(n_in=4, init_w=None, deferred=False, n_out=1):
    """A Gluon linear model ``Dense(n_out)``; with ``init_w`` its weight is set to those values, bias 0."""

    def create(config):
        import mxnet as mx
        from mxnet import gluon

        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(n_out, in_units=0 if deferred else n_in))
        if init_w is not None:
            net.initialize(mx.init.Constant(0.0))
            net[0].weight.set_data(mx.nd.array(np.asarray(init_w, np.float32).reshape(1, n_in)))
        return net

    return create


def l2_loss(config):
    from mxnet import gluon

    return gluon.loss.L2Loss()


def classifier_creator(hidden):
    """Dense(hidden, relu) -> Dense(2) logits, shapes deferred to the first batch."""

    def create(config):
        from mxnet import gluon

        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(hidden, activation="relu"), gluon.nn.Dense(2))
        return net

    return create


def softmax_loss(config):
    from mxnet import gluon

    return gluon.loss.SoftmaxCrossEntropyLoss()


def accuracy(config):
    import mxnet as mx

    return mx.metric.Accuracy()


def plain_predict(net, x):
    import mxnet as mx

    return net(mx.nd.array(np.asarray(x, np.float32))).asnumpy()


def pytest_collection_modifyitems(session, config, items):
    """Creators defined in test modules travel to the workers by value."""
    import sys

    import cloudpickle

    for name in {item.module.__name__ for item in items} | {__name__}:
        cloudpickle.register_pickle_by_value(sys.modules[name])
