"""OpenVINORunner: one worker's compiled model and its asynchronous request queue.

The model is rebuilt from IR bytes and compiled once, when the worker builds its runner
(a Ray actor keeps it for its life; a Spark Python worker caches it across partitions).
Batches go through an ``AsyncInferQueue`` so several are in flight at once; outputs are
copied out of the request tensors and returned in input order.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

import openvino as ov
from orca.core.plugin import Batch, Rendezvous, Runner
from orca.openvino._model import IRModel, check_inputs

#: predict(config=...) keys Orca reads itself; every other key goes to compile_model as is
ORCA_KEYS = ("num_requests", "num_streams", "device")


def compile_config(config: dict[str, Any], threads: int) -> dict[str, str]:
    """The ``compile_model`` properties for ``config``: streams and threads for this worker.

    ``num_streams`` defaults to ``num_requests`` (one stream per request in flight), and the
    threads default to the worker's share of its node's CPUs. CPU pinning is off unless asked
    for: each worker process pins its own threads from the first core up, so the workers of
    one node would all run on the same cores (measured: two Spark workers on two cores ran a
    conv net at half the speed with pinning on).
    """
    props = {str(k): str(v) for k, v in config.items() if k not in ORCA_KEYS}
    props.setdefault("ENABLE_CPU_PINNING", "NO")
    streams = config.get("num_streams") or config.get("num_requests")
    if streams:
        props.setdefault("NUM_STREAMS", str(streams))
    props.setdefault("INFERENCE_NUM_THREADS", str(max(1, threads)))
    return props


def _task_cpus() -> int | None:
    """CPUs of the Spark task this runs in (None outside Spark): concurrent tasks share a node."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark ships with orca-core[spark]
        return None
    ctx = TaskContext.get()
    return int(ctx.cpus()) if ctx is not None else None


class OpenVINORunner(Runner):
    """Runs a compiled OpenVINO model in one Orca worker (inference only)."""

    trains = False

    def setup(self, rendezvous: Rendezvous) -> None:
        super().setup(rendezvous)
        ir: IRModel = self.spec["model"]
        self.ir = ir
        self.order: list[int] = list(self.spec.get("order") or range(len(ir.inputs)))
        threads = _task_cpus() or int(self.spec.get("threads", 1))
        self.core = ov.Core()
        self.compiled = self.core.compile_model(ir.build(self.core), self.config.get("device", "CPU"),
                                                compile_config(self.config, threads))
        requests = int(self.config.get("num_requests") or 0)
        if requests < 1:
            requests = int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self.queue = ov.AsyncInferQueue(self.compiled, max(1, requests))
        self.pid = os.getpid()  # which process compiled it (tests check reuse)

    def shutdown(self) -> None:
        self.queue = None  # type: ignore[assignment]
        self.compiled = None  # type: ignore[assignment]

    # ------------------------------------------------------------ inference
    def _chunks(self, batch: Batch) -> Iterator[tuple[list[np.ndarray], int]]:
        """Model-ordered inputs of ``batch``, cut (and the last piece zero-padded) to a static batch size."""
        x = check_inputs(batch.x, self.ir.inputs, self.order)
        fixed = self.ir.static_batch
        if fixed is None:
            yield x, batch.size
            return
        for start in range(0, batch.size, fixed):
            piece = [a[start:start + fixed] for a in x]
            n = len(piece[0])
            if n < fixed:
                piece = [np.concatenate([p, np.zeros((fixed - n, *p.shape[1:]), p.dtype)]) for p in piece]
            yield piece, n

    def predict_batches(self, batches: Iterable[Batch]) -> Iterator[list[np.ndarray]]:
        """Every batch's outputs, in order, with up to ``num_requests`` batches in flight."""
        results: dict[int, list[np.ndarray]] = {}
        failures: list[BaseException] = []
        n_out = len(self.compiled.outputs)

        def done(request: ov.InferRequest, userdata: tuple[int, int]) -> None:
            key, rows = userdata
            try:
                results[key] = [request.get_output_tensor(i).data[:rows].copy() for i in range(n_out)]
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                failures.append(exc)

        self.queue.set_callback(done)
        pieces_per_batch: list[int] = []
        key = 0
        for batch in batches:
            if batch.size == 0:
                pieces_per_batch.append(0)
                continue
            count = 0
            for x, rows in self._chunks(batch):
                self.queue.start_async(dict(enumerate(x)), userdata=(key, rows), share_inputs=False)
                key, count = key + 1, count + 1
            pieces_per_batch.append(count)
        self.queue.wait_all()
        if failures:
            raise failures[0]
        key = 0
        for count in pieces_per_batch:
            if count == 0:
                yield [np.zeros((0, *(d or 0 for d in (p.dims or (0,))[1:])), p.dtype) for p in self.ir.outputs]
                continue
            parts = [results.pop(k) for k in range(key, key + count)]
            key += count
            yield parts[0] if count == 1 else [np.concatenate([p[i] for p in parts]) for i in range(n_out)]

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        return next(iter(self.predict_batches([batch])))

    # ------------------------------------------------------------ no training
    def train_batch(self, batch: Batch) -> float:
        raise NotImplementedError("the OpenVINO runner is inference-only.")

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        raise NotImplementedError("the OpenVINO runner is inference-only.")

    def get_state(self) -> dict[str, Any]:
        """No training state: the model travels in the spec."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Nothing to restore (inference only)."""
