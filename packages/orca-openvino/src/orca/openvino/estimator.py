"""The OpenVINO Estimator: ``Estimator.from_openvino(model_path=...)``, inference only."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

import openvino as ov
from orca.core.plugin import (
    ArraySource,
    Backend,
    BaseEstimator,
    DataSource,
    check_part,
    check_positive_int,
    check_writable,
    declare,
    is_xshards,
    reading_model_file,
    require_model_file,
    shard_to_part,
)
from orca.openvino._model import IRModel, check_inputs, input_order, read_ir
from orca.openvino.runner import OpenVINORunner


class Estimator(BaseEstimator):
    """Distributed inference of an OpenVINO model on Spark executors or Ray actors.

    Create it with :meth:`from_openvino`, then call :meth:`predict`. The model is shipped to
    every worker as IR bytes, compiled there once and reused for every batch and partition.
    ``fit`` and ``evaluate`` raise ``NotImplementedError``: OpenVINO runs trained models.
    """

    backends = declare(
        Backend("spark", "spark", OpenVINORunner, "Spark tasks, each compiling the model once"),
        Backend("ray", "ray", OpenVINORunner, "long-lived Ray actors, each compiling the model once"),
    )
    inference_only = True

    @classmethod
    def from_openvino(
        cls,
        *,
        model_path: str | os.PathLike[str] | ov.Model,
        backend: str = "spark",
        workers_per_node: int = 1,
        config: dict[str, Any] | None = None,
    ) -> Estimator:
        """Build an inference Estimator from an OpenVINO model.

        Args:
            model_path: an OpenVINO IR ``.xml`` (its ``.bin`` beside it), an ONNX file, or an
                ``ov.Model`` (e.g. from ``ov.convert_model``). Read once, on the driver.
            backend: who runs numpy and Ray/local XShards inputs: ``"spark"`` (Spark tasks) or
                ``"ray"`` (long-lived Ray actors). Spark DataFrames and Spark XShards are always
                predicted on the Spark executors, where their rows are.
            workers_per_node: Ray actors (or Spark task slots) per node; the node's CPUs are
                shared among them.
            config: default inference settings, overridable per ``predict`` call:
                ``num_requests`` (requests in flight per worker; default OpenVINO's optimal
                number), ``num_streams`` (CPU streams; default ``num_requests``), ``device``
                (default ``"CPU"``), and any ``compile_model`` property such as
                ``"PERFORMANCE_HINT"`` or ``"INFERENCE_NUM_THREADS"``.

        Returns:
            The Estimator. No worker starts until the first ``predict``.

        Raises:
            FileNotFoundError: ``model_path`` (or an IR's ``.bin``) does not exist.
            ValueError: OpenVINO cannot read the file, or an unknown backend.
            TypeError: ``model_path`` is neither a path nor an ``ov.Model``.

        Examples:
            >>> est = Estimator.from_openvino(model_path="model.xml")  # doctest: +SKIP
            >>> est.predict(np.zeros((10, 3, 224, 224), np.float32), batch_size=8)  # doctest: +SKIP
        """
        _check_config(config)
        ir = read_ir(model_path)
        spec = {"model": ir, "config": dict(config or {}), "order": None}
        return cls(spec=spec, backend=backend, workers_per_node=workers_per_node, use_tqdm=False)

    @property
    def model(self) -> IRModel:
        """The model as shipped to the workers: IR bytes and its input/output ports."""
        return self.spec["model"]

    # ------------------------------------------------------------ predict
    def extra_adapters(self) -> Sequence[Any]:
        """Accept a list of arrays (one per model input) as in-process data."""

        def list_adapter(data: Any) -> DataSource | None:
            if not (isinstance(data, list) and data and all(isinstance(a, np.ndarray) for a in data)):
                return None
            part = {"x": list(data), "y": []}
            check_part(part, False, "data")
            return ArraySource([part], num_rows=len(data[0]))

        return (list_adapter,)

    def predict(  # type: ignore[override]
        self,
        data: Any,
        batch_size: int = 4,
        feature_cols: str | Sequence[str] | None = None,
        input_cols: Sequence[str] | None = None,
        output_cols: Sequence[str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> Any:
        """Run the model over ``data``; the result has the input's container type.

        Args:
            data: a numpy array (one model input) or a list of arrays (one per input);
                an XShards of ``{"x": array or [arrays]}`` dicts (or of pandas DataFrames with
                ``feature_cols``); or a Spark DataFrame with ``feature_cols``. Arrays with one
                dimension more than their input are batches of rows, as the reference took
                them (``[20, 4, 3, 224, 224]`` for an input ``[4, 3, 224, 224]``): their rows are
                predicted and the result keeps the batches (``[20, 4, ...]``).
            batch_size: rows per inference request on a worker (a model with a fixed batch
                dimension is fed that many rows per request, the last request zero-padded).
            feature_cols: DataFrame (or pandas shard) columns, one per model input.
            input_cols: the model inputs fed by the arrays / ``feature_cols``, in their order
                (default: feature columns named like the inputs feed them, else model order).
            output_cols: DataFrame columns (or shard keys) for the outputs, one per output;
                default ``prediction`` (on a DataFrame an ``(n, k)`` output is an ml
                ``DenseVector`` a row, as the reference wrote it; several outputs: one
                ``prediction`` column of each row's outputs, a list of arrays; ``prediction_<i>`` columns
                where an output has more than one dimension per row; a list under ``prediction`` in
                a shard).
            config: overrides of the ``from_openvino`` config for this call (see there). A
                change recompiles the model on the workers.

        Returns:
            An array (a list of arrays for several outputs), an XShards whose shards gain the
            prediction key(s), or a DataFrame with the prediction column(s) added.

        Raises:
            ValueError: a missing column, a wrong number of inputs, a shape the model cannot
                take, an unknown input name, or an empty input.
            TypeError: an unsupported data type or a dtype the model cannot take.
            OrcaWorkerError: a worker failed; carries its traceback.
        """
        if config is not None:
            _check_config(config)
        fcols = [feature_cols] if isinstance(feature_cols, str) else (list(feature_cols) if feature_cols else None)
        order = input_order(self.model.inputs, list(input_cols) if input_cols is not None else None, fcols)
        spec = dict(self.spec, config={**self.spec["config"], **(config or {})}, order=order)
        if spec["config"] != self.spec["config"] or spec["order"] != self.spec["order"]:
            self._replace_spec(spec)  # workers compiled the old settings
        again = functools.partial(self.predict, batch_size=batch_size, feature_cols=feature_cols,
                                  input_cols=input_cols, output_cols=output_cols)
        arrays = [data] if isinstance(data, np.ndarray) else data
        if isinstance(arrays, list) and arrays and all(isinstance(a, np.ndarray) for a in arrays):
            lead = batches_of_rows(arrays, self.model.inputs, order)
            if lead is not None:  # the reference's [batches, rows, ...] arrays: rows in, the same batches out
                flat = [a.reshape(-1, *a.shape[2:]) for a in arrays]
                return _regroup(again(flat[0] if isinstance(data, np.ndarray) else flat), lead)
        elif is_xshards(data) and _xshards_lead(data, self.model.inputs, order) is not None:
            flat = data.transform_shard(_flatten_shard)
            return again(flat).transform_shard(_regroup_shard)
        self._check_first_rows(data, fcols, order)
        return super().predict(data, batch_size=batch_size, feature_cols=feature_cols, output_cols=output_cols)

    def _check_first_rows(self, data: Any, fcols: list[str] | None, order: list[int]) -> None:
        """Check shapes and dtypes on the driver before any worker starts (DataFrames are checked by
        the engine's one-row probe, which runs this model on the driver)."""
        inputs = self.model.inputs
        if isinstance(data, np.ndarray):
            check_inputs([data], inputs, order, cast=False)
        elif isinstance(data, list) and data and all(isinstance(a, np.ndarray) for a in data):
            check_inputs(data, inputs, order, cast=False)
        elif is_xshards(data):
            def verdict(shard: Any) -> tuple[str, str] | None:
                try:
                    x = [a[:1] for a in shard_to_part(shard, fcols, None)["x"]]
                    check_inputs(x, inputs, order, cast=False)
                except (TypeError, ValueError) as exc:
                    return type(exc).__name__, str(exc)
                except KeyError:  # the engine's own check names it
                    return None
                return None

            try:
                found = data._first_map(verdict)
            except IndexError:
                return
            if found is not None:
                raise (TypeError if found[0] == "TypeError" else ValueError)(f"data: {found[1]}")

    # ------------------------------------------------------------ model I/O
    def get_model(self) -> ov.Model:
        """The model as an ``ov.Model`` rebuilt on the driver."""
        return self.model.build(ov.Core())

    def save(self, path: str) -> str:
        """Write the model as OpenVINO IR (``path`` ends in ``.xml``; the ``.bin`` goes beside it).

        Returns:
            ``path``.
        """
        check_writable(path)
        ov.save_model(self.get_model(), path, compress_to_fp16=False)
        return path

    def load(self, path: str) -> None:
        """Replace the model with the one at ``path`` (IR ``.xml`` or ONNX); live workers are stopped.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: OpenVINO cannot read the file (a damaged or foreign one, or an IR without its ``.bin``).
        """
        require_model_file(path, os.path.isfile(path))
        with reading_model_file(path):
            model = read_ir(path)
        self._replace_spec(dict(self.spec, model=model, order=None))


#: a flattened shard's ``(batches, rows per batch)`` (see :func:`_flatten_shard`)
_LEAD = "__orca_batches"


def batches_of_rows(arrays: Sequence[np.ndarray], inputs: Sequence[Any], order: Sequence[int]) -> tuple[int, int] | None:
    """``(batches, rows)`` when every array has one dimension more than its model input: the
    reference's batches of rows (``[20, 4, 3, 224, 224]`` for an input ``[?, 3, 224, 224]``)."""
    leads = set()
    for arr, idx in zip(arrays, order, strict=False):
        dims = inputs[idx].dims
        if dims is None or arr.ndim != len(dims) + 1:
            return None
        leads.add(tuple(int(d) for d in arr.shape[:2]))
    return leads.pop() if len(leads) == 1 else None  # type: ignore[return-value]


def _regroup(out: Any, lead: tuple[int, int]) -> Any:
    """Predictions of the flattened rows back in ``lead`` batches of rows."""
    if isinstance(out, list):
        return [_regroup(o, lead) for o in out]
    return np.asarray(out).reshape(*lead, *np.shape(out)[1:])


def _shard_arrays(shard: Any) -> list[np.ndarray] | None:
    x = shard.get("x") if isinstance(shard, dict) else None
    arrays = [x] if isinstance(x, np.ndarray) else x
    return arrays if isinstance(arrays, list) and arrays and all(isinstance(a, np.ndarray) for a in arrays) else None


def _shard_lead(inputs: Sequence[Any], order: Sequence[int], shard: Any) -> tuple[int, int] | None:
    arrays = _shard_arrays(shard)
    return None if arrays is None else batches_of_rows(arrays, inputs, order)


def _xshards_lead(data: Any, inputs: Sequence[Any], order: Sequence[int]) -> tuple[int, int] | None:
    try:
        return data._first_map(functools.partial(_shard_lead, inputs, order))  # type: ignore[no-any-return]
    except IndexError:  # no shards: the engine names it
        return None


def _flatten_shard(shard: dict[str, Any]) -> dict[str, Any]:
    x = shard["x"]
    arrays = [x] if isinstance(x, np.ndarray) else list(x)
    flat = [a.reshape(-1, *a.shape[2:]) for a in arrays]
    return {**shard, "x": flat[0] if isinstance(x, np.ndarray) else flat, _LEAD: (arrays[0].shape[:2], list(shard))}


def _regroup_shard(shard: dict[str, Any]) -> dict[str, Any]:
    lead, before = shard[_LEAD]
    out = {k: v for k, v in shard.items() if k != _LEAD}
    for key in ["x", *(k for k in out if k not in before)]:  # the inputs and the predictions
        out[key] = _regroup(out[key], tuple(lead))
    return out


def _check_config(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict of inference settings, got {type(config).__name__}.")
    for key in ("num_requests", "num_streams"):
        value = config.get(key)
        if value is not None:
            check_positive_int(f"config[{key!r}]", value)
