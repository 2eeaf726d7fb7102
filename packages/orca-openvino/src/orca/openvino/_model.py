"""The model as it travels: IR bytes plus what its inputs and outputs accept.

An ``ov.Model`` and a ``CompiledModel`` do not pickle, so the driver reads the model once
(IR, ONNX or an ``ov.Model``), writes it as IR bytes (full precision) and describes its
ports; the workers rebuild it from the bytes. The port description lets the driver and the
workers check inputs without compiling anything.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import openvino as ov


@dataclass(frozen=True)
class Port:
    """One model input or output.

    Attributes:
        name: the port's name (its first tensor name, or ``input_<i>`` when it has none).
        dtype: the numpy dtype of its element type.
        dims: its shape, ``None`` for a dynamic dimension (``None`` for the whole shape if
            the rank is dynamic).
    """

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...] | None

    def shape_text(self) -> str:
        return "[...]" if self.dims is None else "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class IRModel:
    """A model as IR bytes (``xml``, ``weights``) with its ports."""

    xml: bytes
    weights: bytes
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]

    @property
    def static_batch(self) -> int | None:
        """The inputs' fixed first dimension, when every input has the same fixed one."""
        firsts = {p.dims[0] if p.dims else None for p in self.inputs}
        only = firsts.pop() if len(firsts) == 1 else None
        return only if isinstance(only, int) else None

    def build(self, core: ov.Core) -> ov.Model:
        """Rebuild the ``ov.Model`` from the bytes (on a worker)."""
        return core.read_model(model=self.xml, weights=ov.Tensor(np.frombuffer(self.weights, np.uint8)))


def _ports(nodes: Any, kind: str) -> tuple[Port, ...]:
    ports = []
    for i, node in enumerate(nodes):
        names = sorted(node.get_names())
        name = node.get_any_name() if names else f"{kind}_{i}"
        pshape = node.get_partial_shape()
        dims = None if pshape.rank.is_dynamic else tuple(
            d.get_length() if d.is_static else None for d in pshape)
        ports.append(Port(name, np.dtype(node.get_element_type().to_dtype()), dims))
    return tuple(ports)


def read_ir(model: str | os.PathLike[str] | ov.Model) -> IRModel:
    """Read an IR ``.xml`` (with its ``.bin``), an ONNX file or an ``ov.Model`` into an :class:`IRModel`.

    Raises:
        FileNotFoundError: the path, or an IR's ``.bin`` beside it, does not exist.
        TypeError: ``model`` is neither a path nor an ``ov.Model``.
        ValueError: OpenVINO cannot read the file.
    """
    core = ov.Core()
    if isinstance(model, ov.Model):
        ov_model = model
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"model_path={str(model)!r}: no such file; pass an OpenVINO IR .xml (with its "
                                    ".bin beside it), an ONNX file or an ov.Model.")
        if path.suffix.lower() == ".xml" and not path.with_suffix(".bin").is_file():
            raise FileNotFoundError(f"model_path={str(model)!r}: the IR weights {str(path.with_suffix('.bin'))!r} "
                                    "are missing; keep the .bin next to the .xml.")
        try:
            ov_model = core.read_model(str(path))
        except RuntimeError as exc:
            raise ValueError(f"model_path={str(model)!r}: OpenVINO cannot read it ({str(exc).strip()[:500]}).") from None
    else:
        raise TypeError(f"model_path must be a path to an IR .xml / ONNX file or an ov.Model, "
                        f"got {type(model).__name__}.")
    with tempfile.TemporaryDirectory(prefix="orca-ov-") as tmp:
        xml = Path(tmp) / "model.xml"
        ov.save_model(ov_model, str(xml), compress_to_fp16=False)  # keep the weights exact
        return IRModel(xml.read_bytes(), xml.with_suffix(".bin").read_bytes(),
                       _ports(ov_model.inputs, "input"), _ports(ov_model.outputs, "output"))


def input_order(inputs: tuple[Port, ...], given: list[str] | None, feature_cols: list[str] | None) -> list[int]:
    """For each array the user gives, the index of the model input it feeds.

    ``input_cols`` names the model inputs in the order of the arrays (or of ``feature_cols``); without
    it, feature columns named like the model's inputs feed those inputs, anything else goes in order.

    Raises:
        ValueError: an unknown or repeated input name, or a count that does not match the model.
    """
    names = [p.name for p in inputs]
    if given is None:
        if feature_cols and sorted(feature_cols) == sorted(names):
            given = list(feature_cols)
        else:
            return list(range(len(names)))
    unknown = [g for g in given if g not in names]
    if unknown or len(set(given)) != len(given) or len(given) != len(names):
        raise ValueError(f"input_cols={given!r} must name each model input once; the model's inputs are {names}.")
    return [names.index(g) for g in given]


def check_inputs(x: list[np.ndarray], inputs: tuple[Port, ...], order: list[int], cast: bool = True) -> list[np.ndarray]:
    """Check the user's arrays against the model inputs; return them in model order, in model dtypes.

    A float64 array feeds a float32 input (a same-kind cast); an array of another kind (floats
    for an integer input, strings, objects) or of another per-row shape is refused. Rows stored
    flat (``(n, 3*32*32)`` for an input of static rows ``(3, 32, 32)``, as a DataFrame array
    column holds them) are reshaped to the input's rows.

    Raises:
        ValueError: a wrong number of arrays, or a shape the input cannot take.
        TypeError: a dtype the input cannot take.
    """
    if len(x) != len(inputs):
        raise ValueError(f"the model takes {len(inputs)} input(s) {[p.name for p in inputs]}, got {len(x)} array(s); "
                         "pass a list of arrays (or feature_cols) with one per input.")
    out: list[np.ndarray] = [np.empty(0)] * len(inputs)
    for arr, idx in zip(x, order, strict=True):
        port = inputs[idx]
        arr = np.asarray(arr)
        kind_ok = arr.dtype.kind in "biuf" and (
            np.can_cast(arr.dtype, port.dtype, "same_kind") or (arr.dtype.kind in "biu" and port.dtype.kind in "biu"))
        if not kind_ok:
            raise TypeError(f"input {port.name!r} takes {port.dtype} values, got an array of {arr.dtype}; "
                            f"convert it first (e.g. arr.astype(np.{port.dtype.name})).")
        if port.dims is not None:
            row = tuple(port.dims[1:])
            if arr.ndim == 2 and len(row) > 1 and None not in row and arr.shape[1] == int(np.prod(row)):
                arr = arr.reshape(len(arr), *row)  # rows stored flat (a DataFrame array column)
            if arr.ndim != len(port.dims) or any(d is not None and d != a for d, a in zip(row, arr.shape[1:],
                                                                                             strict=True)):
                raise ValueError(f"input {port.name!r} takes rows of shape {Port('', port.dtype, row).shape_text()} "
                                 f"(model shape {port.shape_text()}), got rows of shape {list(arr.shape[1:])} "
                                 f"(array shape {list(arr.shape)}).")
        out[idx] = np.ascontiguousarray(arr, dtype=port.dtype) if cast else arr
    return out
