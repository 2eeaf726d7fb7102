"""Shared models and helpers for the orca-openvino tests: small OpenVINO models built with
opset13 and written as IR, and the plain ``ov.Core().compile_model`` reference."""

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

pytest_plugins = ["orca.core.testing.fixtures"]

#: OpenVINO runs float32 models in bfloat16 on CPUs that have it (its default precision hint), and
#: then results move with the batch composition by ~1e-2; the exact comparisons pin float32.
F32 = {"INFERENCE_PRECISION_HINT": "f32"}

W4 = np.array([[1.5], [-2.0], [0.5], [3.0]], np.float32)


def linear_model(batch=-1):
    """``x[?, 4] @ W4 + 0.25`` -> ``[?, 1]`` (the conformance suite's task)."""
    x = ops.parameter([batch, 4], np.float32, name="x")
    y = ops.add(ops.matmul(x, ops.constant(W4), False, False), ops.constant(np.float32(0.25)))
    return ov.Model([y], [x], "linear")


def two_in_two_out_model():
    """Inputs ``a[?, 3]``, ``b[?, 2, 3]``; outputs ``sum = a + reduce_sum(b, 1)`` and ``prod = tanh(a) * b[:, 0]``."""
    a = ops.parameter([-1, 3], np.float32, name="a")
    b = ops.parameter([-1, 2, 3], np.float32, name="b")
    s = ops.add(a, ops.reduce_sum(b, ops.constant(np.array([1], np.int64)), False))
    first = ops.squeeze(ops.gather(b, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(1))),
                        ops.constant(np.array([1], np.int64)))
    p = ops.multiply(ops.tanh(a), first)
    s.output(0).get_tensor().set_names({"sum"})
    p.output(0).get_tensor().set_names({"prod"})
    return ov.Model([s, p], [a, b], "two_in_two_out")


def save_ir(model, directory, name="model"):
    path = str(directory / f"{name}.xml")
    ov.save_model(model, path, compress_to_fp16=False)
    return path


def reference(model, inputs):
    """Outputs of the plain OpenVINO runtime, one array per output."""
    compiled = ov.Core().compile_model(model, "CPU", F32)
    res = compiled(inputs, share_inputs=False)
    return [np.asarray(res[o]) for o in compiled.outputs]


@pytest.fixture(scope="session")
def linear_ir(tmp_path_factory):
    return save_ir(linear_model(), tmp_path_factory.mktemp("linear"))


@pytest.fixture(scope="session")
def two_io_ir(tmp_path_factory):
    return save_ir(two_in_two_out_model(), tmp_path_factory.mktemp("two_io"))


@pytest.fixture(params=["spark", "ray"])
def backend(request):
    """Every behaviour is checked on both backends."""
    return request.param


def pytest_collection_modifyitems(session, config, items):
    """Functions defined in test modules travel to the workers by value."""
    import sys

    import cloudpickle

    for name in {item.module.__name__ for item in items} | {__name__}:
        cloudpickle.register_pickle_by_value(sys.modules[name])
