"""MXNetRunner: one worker's Gluon model, loss, trainer and metrics.

Each step runs the forward and backward pass of the local share of the global batch, then
all-reduces the flat gradient through :mod:`orca.core.sync` and lets a local
``gluon.Trainer`` apply it, so every replica takes the same step and ends it with the same
weights. The trainer is built without a kvstore: the sync layer is the transport (no DMLC
scheduler or parameter servers to start, and a lost worker fails its peers within the
timeout instead of blocking them forever, as ``dist_sync`` would).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from orca.core.plugin import Batch, Rendezvous, Runner, check_class_indices, pack, unpack


@dataclass(frozen=True)
class KVInfo:
    """What a data creator ``f(config, kv)`` learns of its worker, as the reference's kvstore told it:
    ``kv.num_workers`` and ``kv.rank`` (read your shard: ``ImageRecordIter(num_parts=kv.num_workers,
    part_index=kv.rank)``)."""

    num_workers: int
    rank: int


def named_params(model: gluon.Block) -> dict[str, Any]:
    """The model's parameters under structural names (``"0.weight"``), as ``save_parameters`` writes
    them: unlike ``collect_params()``'s keys, they do not change from one model instance to the next."""
    return dict(model._collect_params_with_prefix())


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _metric_list(metric: Any) -> list[Any]:
    """The leaves of a metric spec: an EvalMetric, a CompositeEvalMetric, a list of them, or None."""
    if metric is None:
        return []
    if isinstance(metric, (list, tuple)):
        return [m for item in metric for m in _metric_list(item)]
    if isinstance(metric, mx.metric.CompositeEvalMetric):
        return list(metric.metrics)
    if isinstance(metric, mx.metric.EvalMetric):
        return [metric]
    if isinstance(metric, str):
        return [mx.metric.create(metric)]
    raise TypeError(f"metrics must be mxnet.metric.EvalMetric objects or names, got {type(metric).__name__}.")


class MXNetRunner(Runner):
    """Runs a Gluon ``Block`` in one Orca worker."""

    can_skip_steps = True
    #: the float type batches reach the model in (:meth:`_dtype`), found on first use
    _input_dtype: np.dtype | None = None

    def __init__(self, spec: dict[str, Any]) -> None:
        # the same initial weights on every rank: the config's seed (create_config), else 0
        config = spec.get("config") or {}
        super().__init__(dict(spec, seed=config.get("seed", spec.get("seed", 0))))

    def seed_framework(self, seed: int) -> None:
        mx.random.seed(seed)

    def setup(self, rendezvous: Rendezvous) -> None:
        threads = str(max(1, self.threads))
        os.environ["OMP_NUM_THREADS"] = threads  # read by MXNet's engine for new operators
        os.environ["MXNET_CPU_WORKER_NTHREADS"] = threads
        super().setup(rendezvous)
        creator = self.spec["model_creator"]
        self.model = creator(self.config)
        if not isinstance(self.model, gluon.Block):
            raise TypeError(f"model_creator returned {type(self.model).__name__}; return a mxnet.gluon.Block "
                            "(e.g. a gluon.nn.HybridSequential).")
        params = self.model.collect_params()
        if any(p._data is None and not p._deferred_init for p in params.values()):
            # parameters the creator did not initialize (shapes may still be deferred to the first batch)
            params.initialize(mx.init.Xavier(), ctx=mx.cpu())
        loss_creator = self.spec.get("loss_creator")
        self.loss_fn = loss_creator(self.config) if loss_creator is not None else None
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise TypeError(f"loss_creator returned {type(self.loss_fn).__name__}; return a gluon loss (e.g. "
                            "gluon.loss.L2Loss()) or a function f(output, label).")
        self.train_metrics = _metric_list(self._create(self.spec.get("eval_metrics_creator")))
        self.val_metrics = _metric_list(self._create(self.spec.get("validation_metrics_creator"))) \
            or _metric_list(self._create(self.spec.get("eval_metrics_creator")))
        self.trainer: gluon.Trainer | None = None
        self._synced = False
        self._input_dtype = None

    def _create(self, creator: Any) -> Any:
        return creator(self.config) if callable(creator) else creator

    # ------------------------------------------------------------ sync
    def _params(self) -> list[Any]:
        return list(named_params(self.model).values())

    def _ensure_ready(self, x: list[Any]) -> None:
        """Finish deferred initialization with a forward pass, then give every rank rank 0's weights."""
        if any(p._data is None for p in self._params()):
            self.model(*x)
        if self._synced:
            return
        self._synced = True
        if self.group is None:
            return
        params = self._params()
        for p, value in zip(params, self.broadcast_arrays([p.data().asnumpy() for p in params]), strict=True):
            p.set_data(mx.nd.array(value, dtype=p.dtype))

    def _trainer(self) -> gluon.Trainer:
        if self.trainer is None:
            optimizer = self.config.get("optimizer", "sgd")
            opt_params = dict(self.config.get("optimizer_params") or {"learning_rate": 0.01})
            self.trainer = gluon.Trainer(self.model.collect_params(), optimizer, opt_params, kvstore=None)
        return self.trainer

    def _inputs(self, arrays: list[np.ndarray]) -> list[Any]:
        """The batch's features or labels as NDArrays of the model's float type (see :meth:`_dtype`)."""
        dtype = self._dtype()
        return [mx.nd.array(a, dtype=dtype) for a in arrays]

    def _dtype(self) -> np.dtype:
        """The float type batches reach the model in: that of its parameters, float32 unless the
        creator cast the model. The reference's ``mx.nd.array`` made every array float32, so float64
        or integer data reaches a float32 model as float32, as it did there; a model cast to float64
        (or float16) gets its own type."""
        if self._input_dtype is None:
            floats = [np.dtype(p.dtype) for p in self._params() if np.dtype(p.dtype).kind == "f"]
            self._input_dtype = floats[0] if floats else np.dtype(np.float32)
        return self._input_dtype

    def _loss(self, out: Any, y: list[Any]) -> Any:
        if self.loss_fn is None:
            raise ValueError("no loss_creator was given to from_mxnet; it is needed to train and evaluate.")
        target = y[0] if len(y) == 1 else y
        first = _outputs(out)[0]
        if len(y) == 1 and first.ndim == target.ndim + 1 and first.shape[-1] == 1:
            target = target.reshape((-1, 1))  # (n, 1) outputs against (n,) targets
        if isinstance(self.loss_fn, gluon.loss.SoftmaxCrossEntropyLoss) and getattr(self.loss_fn, "_sparse_label", True) \
                and len(y) == 1 and first.ndim >= 2:
            # its `pick` clips a label out of range to the last class and trains on it without a word
            check_class_indices(y[0].asnumpy(), int(first.shape[getattr(self.loss_fn, "_axis", -1)]),
                                type(self.loss_fn).__name__)
        try:
            return self.loss_fn(out, target)
        except mx.base.MXNetError as exc:
            raise ValueError(f"the loss {type(self.loss_fn).__name__} failed on outputs of shape "
                             f"{[o.shape for o in _outputs(out)]} and labels of shape "
                             f"{[t.shape for t in y]}: {str(exc).splitlines()[0]}") from None

    def _forward(self, x: list[Any]) -> Any:
        try:
            return self.model(*x)
        except mx.base.MXNetError as exc:
            raise ValueError(f"the model's forward failed on input shape(s) {[a.shape for a in x]}: "
                             f"{str(exc).splitlines()[0]}") from None

    # ------------------------------------------------------------ steps
    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        params = self._params()
        value = 0.0
        if batch.size > 0:
            x, y = self._inputs(batch.x), self._inputs(batch.y)
            self._ensure_ready(x)
            with autograd.record():
                out = self._forward(x)
                loss = self._loss(out, y)
                scaled = loss.mean() * float(batch.weight)
            scaled.backward()
            value = float(loss.mean().asscalar())
            for m in self.train_metrics:
                m.update(y, _outputs(out))
        else:
            self._ensure_ready_without_data()
            for p in params:
                if p.grad_req != "null":
                    p.zero_grad()  # no rows this step: contribute nothing to the mean
        trainer = self._trainer()
        if self.group is not None:
            grads = [p.grad() for p in params if p.grad_req != "null"]
            arrays = [g.asnumpy() for g in grads]
            reduced = self.allreduce_mean_(pack(arrays, np.float32))
            if skip_non_finite and not np.isfinite(reduced).all():
                return None  # the same reduced gradient on every rank: every rank skips this step
            for g, mean in zip(grads, unpack(reduced, arrays), strict=True):
                g[:] = mx.nd.array(mean, dtype=g.dtype)
        elif skip_non_finite and not all(np.isfinite(p.grad().asnumpy()).all() for p in params if p.grad_req != "null"):
            return None
        for p in params:  # written by the all-reduce (or zeroed), not by this rank's backward: still fresh
            if p.grad_req != "null":
                p.data()._fresh_grad = True
        trainer.step(1)
        return value

    def _ensure_ready_without_data(self) -> None:
        """A rank whose first step has no rows still takes part in the weight broadcast; its
        parameters must have shapes, so the creator's model must not defer them then."""
        if any(p._data is None for p in self._params()):
            raise ValueError("this worker got no rows before the model's parameter shapes were known; give the "
                             "first layers explicit in_units/in_channels, or more rows per worker.")
        if not self._synced:
            self._ensure_ready([])

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        x, y = self._inputs(batch.x), self._inputs(batch.y)
        if any(p._data is None for p in self._params()):
            self.model(*x)
        out = self._forward(x)
        loss = float(self._loss(out, y).mean().asscalar()) if self.loss_fn is not None else float("nan")
        for m in self.val_metrics:
            m.update(y, _outputs(out))
        return loss, [o.asnumpy() for o in _outputs(out)]

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        x = self._inputs(batch.x)
        if any(p._data is None for p in self._params()):
            self.model(*x)
        return [o.asnumpy() for o in _outputs(self._forward(x))]

    # ------------------------------------------------------------ metrics
    def metric_states(self) -> Any:
        """Sum and count of every Gluon metric since the last call (train and validation), then reset."""
        metrics = self.train_metrics + [m for m in self.val_metrics if m not in self.train_metrics]
        if not metrics:
            return None
        states = []
        for m in metrics:
            names, _ = m.get()
            states.append((m.name, float(m.sum_metric), int(m.num_inst)))
            m.reset()
        return states

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        totals: dict[str, list[float]] = {}
        for worker in states:
            for name, total, count in worker or []:
                acc = totals.setdefault(name, [0.0, 0.0])
                acc[0] += total
                acc[1] += count
        return {name: (s / c if c else float("nan")) for name, (s, c) in totals.items()}

    # ------------------------------------------------------------ native loaders
    def native_batches(self, creator: Any, batch_size: int, training: bool,
                       steps: int | None = None) -> Iterable[Batch]:
        """Batches of ``creator(config, kv)``: an ``mx.io.DataIter`` or a ``gluon.data.DataLoader``
        (or any iterable of ``(x, y)``), read for this rank as the creator shards it (the engine
        keeps the ranks in lock-step: a rank with fewer batches takes empty steps).

        ``config["batch_size"]`` is this worker's share of the global batch, as in the reference.
        """
        config = dict(self.config, batch_size=batch_size)
        for i, batch in enumerate(self._iterate(creator(config, KVInfo(self.world, self.rank)))):
            if steps is not None and i >= steps:
                return
            yield batch

    def _iterate(self, data: Any) -> Iterator[Batch]:
        if data is None or isinstance(data, (str, bytes, dict)) or not hasattr(data, "__iter__"):
            raise TypeError(f"the data creator returned {type(data).__name__}; return an mx.io.DataIter, a "
                            "gluon.data.DataLoader or another iterable of (x, y) batches.")
        if isinstance(data, mx.io.DataIter):
            data.reset()
            for db in data:
                n = db.data[0].shape[0] - int(db.pad or 0)
                x = [a.asnumpy()[:n] for a in db.data]
                y = [a.asnumpy()[:n] for a in (db.label or [])]
                yield Batch(x=x, y=y, size=n, weight=1.0, global_size=n)
            return
        for item in data:
            items = list(item) if isinstance(item, (list, tuple)) else [item]
            arrays = [a.asnumpy() if isinstance(a, mx.nd.NDArray) else np.asarray(a) for a in items]
            x, y = (arrays[:-1], arrays[-1:]) if len(arrays) > 1 else (arrays, [])
            yield Batch(x=x, y=y, size=len(arrays[0]), weight=1.0, global_size=len(arrays[0]))

    def optimizer_params(self) -> dict[str, Any]:
        """The trainer's optimizer and its parameters (``create_config``'s ``optimizer`` and
        ``optimizer_params``, as :meth:`_trainer` builds it), for MLflow's run parameters."""
        opt_params = dict(self.config.get("optimizer_params") or {"learning_rate": 0.01})
        return {"optimizer": str(self.config.get("optimizer", "sgd")), **opt_params}

    # ------------------------------------------------------------ state
    def weights(self) -> list[np.ndarray]:
        return [p.data().asnumpy() for p in self._params() if p._data is not None]

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"params": {name: p.data().asnumpy() for name, p in named_params(self.model).items()
                                            if p._data is not None}}
        if self.trainer is not None and self.trainer._optimizer is not None:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trainer.states")
                self.trainer.save_states(path)
                with open(path, "rb") as fh:
                    state["trainer"] = fh.read()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        params = named_params(self.model)
        saved = state.get("params") or {}
        unknown = sorted(set(saved) - set(params))
        missing = sorted(set(params) - set(saved))
        if unknown or missing:
            raise ValueError(f"the saved parameters do not fit the model: not in the model {unknown[:5]}, "
                             f"not in the file {missing[:5]}; load them into the same architecture.")
        for name, value in saved.items():
            p = params[name]
            if p._data is None:  # a deferred shape: take the saved one
                p.shape = value.shape
                if p._deferred_init:
                    p._finish_deferred_init()
                else:
                    p.initialize(ctx=mx.cpu())
            if tuple(p.shape) != tuple(value.shape):
                raise ValueError(f"parameter {name!r} has shape {tuple(p.shape)} in the model and "
                                 f"{tuple(value.shape)} in the saved state.")
            p.set_data(mx.nd.array(value, dtype=value.dtype))
        self._synced = True  # every rank gets the same state: nothing to broadcast
        if state.get("trainer"):
            trainer = self._trainer()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trainer.states")
                with open(path, "wb") as fh:
                    fh.write(state["trainer"])
                trainer.load_states(path)


def params_bytes(params: dict[str, np.ndarray]) -> bytes:
    """The MXNet ``.params`` file of ``params`` (what ``net.save_parameters`` writes)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.params")
        mx.nd.save(path, {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()})
        with open(path, "rb") as fh:
            return fh.read()


def params_from_bytes(blob: bytes) -> dict[str, np.ndarray]:
    """The parameters of an MXNet ``.params`` file (from ``save_parameters`` or :func:`params_bytes`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.params")
        with open(path, "wb") as fh:
            fh.write(blob)
        try:
            loaded = mx.nd.load(path)
        except mx.base.MXNetError as exc:
            raise ValueError(f"not an MXNet parameters file: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, dict):
        raise ValueError("the file holds a list of arrays, not named parameters; write it with save_parameters.")
    # files of the older save_params carry "arg:" / "aux:" prefixes
    return {k.split(":", 1)[-1]: v.asnumpy() for k, v in loaded.items()}
