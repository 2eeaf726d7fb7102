"""TorchRunner: one worker's model, optimizer and loss, kept in step with torch.distributed.

Every parameter's gradient is a view of one flat buffer. The buffer is cut into buckets of
consecutive parameters, last layers first (DDP's sizes: 1 MB for the first, 25 MB after), and
each bucket's all-reduce (gloo, SUM, asynchronous) starts from a gradient hook as soon as the
backward pass has filled it, while the backward goes on with the layers before (DDP's overlap
of communication with computation). Buckets start in bucket order on every rank, and a rank
with no rows in a step, or with parameters the step did not use, starts the rest in that order
after its (empty) backward, so the collectives always match. After the last bucket the buffer is
divided by the world size; each batch's loss was first scaled by its share of the global batch,
so the averaged gradient is exactly the global batch's gradient — also when a worker's share
is uneven or empty (see :mod:`orca.core.engine.feed`).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np

import torch
import torch.distributed as dist
from orca.core.plugin import (
    Batch,
    Rendezvous,
    Runner,
    check_class_indices,
    horovod_module,
    join_horovod,
    leave_horovod,
    records,
)
from orca.torch import _codec  # noqa: F401 - registers torch tensors for checkpoints
from orca.torch._spec import build_loss, build_model, build_optimizer
from torch import nn


def _target(a: Any, float_dtype: torch.dtype) -> Any:
    """A label array as the loss gets it: a tensor, or ``{key: tensor}`` for the structured array of a
    ``map<string, ...>`` label column (:func:`orca.core.engine.convert.records`)."""
    if isinstance(a, (list, tuple)):  # a data creator's target of several tensors
        return type(a)(_target(v, float_dtype) for v in a)
    if isinstance(a, dict):
        return {k: _target(v, float_dtype) for k, v in a.items()}
    names = getattr(getattr(a, "dtype", None), "names", None)
    if names is None:
        return _tensor(a, float_dtype)
    return {k: _target(a[k], float_dtype) for k in names}


def _target_list(y: list[Any]) -> list[Any]:
    """A batch's targets as the reference's loss and metrics take them: a data creator's target of
    several tensors (``(x, [y1, y2])``) and several label columns are several targets."""
    return list(y[0]) if len(y) == 1 and isinstance(y[0], (list, tuple)) else list(y)


def _tensors(value: Any, float_dtype: torch.dtype) -> Any:
    """A model input as the model gets it: arrays and tensors as tensors (floats in the model's float
    type), inside lists, tuples and dicts as deep as a data creator's Dataset nests them (the
    reference's ``([x1, x2], {"x3": x3}, x4)`` inputs); anything else as it is."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return _tensor(value, float_dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_tensors(v, float_dtype) for v in value)
    if isinstance(value, dict):
        return {k: _tensors(v, float_dtype) for k, v in value.items()}
    return value


def _rows(value: Any) -> int:
    """Rows of a (nested) batch: the first dimension of its first tensor or array (0 if it has none)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return int(value.shape[0]) if value.ndim else 1
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return next((n for n in (_rows(v) for v in items) if n), 0)


def _tensor(a: Any, float_dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(a, torch.Tensor):
        a = np.ascontiguousarray(a)
        if not a.flags.writeable:  # Arrow and Ray hand out read-only buffers
            a = a.copy()
    t = a if isinstance(a, torch.Tensor) else torch.from_numpy(a)
    if t.is_floating_point() and t.dtype != float_dtype:
        return t.to(float_dtype)
    if t.dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
        return t.long()
    return t


#: the first bucket's and the later buckets' sizes (DDP's defaults: a small first bucket starts
#: communicating early in the backward pass)
FIRST_BUCKET_BYTES = 2**20
BUCKET_BYTES = 25 * 2**20


class _Buckets:
    """The flat gradient buffer's buckets and their all-reduces for one step (see the module's doc).

    ``ready(param)`` is called by a hook once backward has accumulated ``param``'s gradient; when
    a bucket's last parameter is ready, it and every ready bucket after it start, in bucket order.
    ``finish()`` starts the buckets the backward left (no rows, unused parameters) and waits for all.
    """

    def __init__(self, flat: torch.Tensor, params: list[torch.Tensor], start: Any) -> None:
        self.start = start
        offsets, offset = [], 0
        for p in params:
            offsets.append(offset)
            offset += p.numel()
        self.slices: list[torch.Tensor] = []
        self.sizes: list[int] = []
        self.of_param: dict[int, int] = {}
        end, count, cap = offset, 0, FIRST_BUCKET_BYTES
        for i in reversed(range(len(params))):  # last layers first: backward fills them first
            self.of_param[id(params[i])] = len(self.slices)
            count += 1
            lo = offsets[i]
            if (end - lo) * flat.element_size() >= cap or i == 0:
                self.slices.append(flat[lo:end])
                self.sizes.append(count)
                end, count, cap = lo, 0, BUCKET_BYTES
        self.reset()

    def reset(self) -> None:
        self.pending = list(self.sizes)
        self.next = 0
        self.works: list[Any] = []

    def ready(self, param: torch.Tensor) -> None:
        i = self.of_param.get(id(param))
        if i is None or self.pending[i] <= 0:
            return
        self.pending[i] -= 1
        self._start_ready()

    def _start_ready(self) -> None:
        while self.next < len(self.slices) and self.pending[self.next] == 0:
            self.works.append(self.start(self.slices[self.next]))
            self.next += 1

    def finish(self) -> None:
        for i in range(self.next, len(self.slices)):
            self.pending[i] = 0
        self._start_ready()
        for work in self.works:
            work.wait()
        self.reset()


def _describe(value: Any) -> str:
    """``tuple(ndarray (4,), dict{'y': Tensor (4, 1)})``: what a forward or a hook returned, for errors."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} {tuple(value.shape)}"
    if isinstance(value, dict):
        return "dict{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}(" + ", ".join(_describe(v) for v in value) + ")"
    return type(value).__name__


def _as_numpy(value: Any) -> Any:
    """Tensors in ``value`` (a tensor, an array, or a dict of them) as numpy arrays."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: _as_numpy(v) for k, v in value.items() if v is not None}
    return value


def _prediction_arrays(out: Any, rows: int, where: str) -> list[np.ndarray]:
    """A prediction step's ``out`` as the engine's outputs, one array per top-level output: a tensor
    or array is one, a dict one structured array (a field per key), a tuple or list one per element
    (``None`` elements left out).

    Args:
        out: what the model's forward or a ``MainCallback.on_pred_forward`` gave.
        rows: the batch's rows: every output must have as many.
        where: who gave ``out`` (``the model's forward``, ``MyCallback.on_pred_forward``), for errors.

    Raises:
        ValueError: no output, a 0-d output, or an output whose rows are not the batch's.
        TypeError: an output that is neither a tensor, an array, a dict nor a tuple/list of those.
    """
    items = [o for o in out if o is not None] if isinstance(out, (list, tuple)) else [out]
    arrays: list[np.ndarray] = []
    for item in items:
        if isinstance(item, dict):
            arrays.append(records(_as_numpy(item), where))
        elif isinstance(item, (torch.Tensor, np.ndarray)):
            arrays.append(np.asarray(_as_numpy(item)))
        else:
            raise TypeError(f"{where} gave {_describe(out)}; give a tensor or numpy array per output, a dict of "
                            "them, or a tuple/list of those.")
    if not arrays:
        raise ValueError(f"{where} gave no output ({_describe(out)}); give the batch's predictions.")
    for arr in arrays:
        if arr.ndim == 0 or len(arr) != rows:
            raise ValueError(f"{where} gave {_describe(out)} for a batch of {rows} rows; every output needs one "
                             f"row per input row (its first dimension {rows}).")
    return arrays


def _own_call(metric: Any) -> bool:
    """True for a metric whose ``__call__`` is defined outside Orca (a user's subclass of an
    ``orca.torch.metrics`` class, called with the model's output and target as they came)."""
    owner = next((c for c in type(metric).__mro__ if "__call__" in c.__dict__), None)
    return owner is not None and owner is not object and not owner.__module__.startswith("orca.")


def _outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for o in out if isinstance(o, torch.Tensor)]
    if isinstance(out, dict):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    raise TypeError(f"the model returned {type(out).__name__}; return a tensor or a tuple of tensors.")


class TorchRunner(Runner):
    """Runs a torch model in one Orca worker."""

    can_skip_steps = True
    #: the fit's (or evaluate's) MainCallback while one is bound (orca.torch.callbacks): it runs the steps
    main_callback: Any = None
    reuses_process = True  # setup rebuilds the model, re-seeds and re-forms the process group
    #: all-reduce the gradient in buckets from backward hooks (torch.distributed's async
    #: collectives); a subclass whose transport has none all-reduces the whole buffer after backward
    overlaps_allreduce = True

    def seed_framework(self, seed: int) -> None:
        torch.manual_seed(seed)

    def setup(self, rendezvous: Rendezvous) -> None:
        torch.set_num_threads(self.threads)
        super().setup(rendezvous)
        self.model: nn.Module = build_model(self.spec["model"], self.config)
        self.model.train()
        self.optimizer = build_optimizer(self.spec.get("optimizer"), self.model, self.config)
        self.loss_fn = build_loss(self.spec.get("loss"), self.config)
        creator = self.spec.get("scheduler_creator")
        self.scheduler = creator(self.optimizer, self.config) if creator and self.optimizer else None
        self.float_dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), torch.float32)
        self.epoch = 0
        if self.world > 1:
            self._join_group(rendezvous)
            with torch.no_grad():
                for t in list(self.model.parameters()) + list(self.model.buffers()):
                    self._broadcast_(t.data)

    # ---------------------------------------------------------------- the group (gloo here; see BigDLTorchRunner)
    def _join_group(self, rendezvous: Rendezvous) -> None:
        """Join the workers' gloo process group (only called when there are several workers)."""
        if dist.is_initialized():
            dist.destroy_process_group()
        timeout = datetime.timedelta(seconds=self.timeout_s)
        if rendezvous.master_addr.startswith("127."):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on loopback
        store = _tcp_store(rendezvous, timeout)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world, timeout=timeout)

    def _allreduce_mean_(self, t: torch.Tensor) -> None:
        """Replace ``t`` (contiguous) in place by its mean over all workers."""
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t.div_(self.world)

    def _broadcast_(self, t: torch.Tensor) -> None:
        """Overwrite ``t`` in place with rank 0's ``t``."""
        dist.broadcast(t, src=0)

    def shutdown(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
        super().shutdown()

    # ---------------------------------------------------------------- steps
    def _loss(self, out: Any, y: list[torch.Tensor]) -> torch.Tensor:
        if self.loss_fn is None:
            raise ValueError("no loss was given to from_torch(loss=...); it is needed to train and evaluate.")
        # the reference's call: loss(*outputs, *targets); a model's tuple or list output is several outputs
        targets = _target_list(y)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != 1 or len(targets) != 1:
            try:
                return self.loss_fn(*outs, *targets)
            except TypeError as exc:
                raise TypeError(f"the loss {type(self.loss_fn).__name__} is called as the reference called it, "
                                f"loss(*outputs, *targets): here with {len(outs)} output(s) "
                                f"({_describe(out)}) and {len(targets)} target(s) ({_describe(targets)}), and it "
                                f"failed: {exc}. Give a loss taking those arguments.") from None
        out, target = outs[0], targets[0]
        first = out if isinstance(out, torch.Tensor) else None
        if (first is not None and isinstance(target, torch.Tensor) and target.is_floating_point()
                and first.dim() == target.dim() + 1 and first.shape[-1] == 1):
            target = target.unsqueeze(-1)  # (n, 1) outputs against (n,) scalar targets
        if (isinstance(self.loss_fn, (nn.CrossEntropyLoss, nn.NLLLoss)) and first is not None and first.dim() >= 2
                and isinstance(target, torch.Tensor) and not target.is_floating_point() and target.numel()):
            classes, ignore = int(first.shape[1]), self.loss_fn.ignore_index
            lo, hi = torch.aminmax(target)  # one pass on the labels' device; the full check only when it fails
            if (int(lo) < 0 or int(hi) >= classes) and bool((((target < 0) | (target >= classes))
                                                            & (target != ignore)).any()):
                check_class_indices(target.detach().cpu().numpy(), classes, type(self.loss_fn).__name__, ignore)
        try:
            return self.loss_fn(out, target)
        except RuntimeError as exc:
            msg = str(exc)
            if "scalar type" in msg or "not implemented for" in msg or "expected" in msg.lower() and "type" in msg:
                dtypes = [str(t.dtype) if isinstance(t, torch.Tensor) else _describe(t) for t in y]
                raise TypeError(f"the loss {type(self.loss_fn).__name__} rejected labels of dtype {dtypes}: {msg}. "
                                "Cast the label column (e.g. to long for class indices, to float for regression)."
                                ) from None
            raise

    def _forward(self, x: list[Any]) -> Any:
        inputs = [_tensors(a, self.float_dtype) for a in x]
        try:
            return self.model(*inputs)
        except RuntimeError as exc:
            shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else _describe(t) for t in inputs]
            raise ValueError(f"the model's forward failed on input shape(s) {shapes}: {exc}") from None

    def _grad_buffer(self) -> torch.Tensor:
        """One flat buffer that every parameter's ``.grad`` is a view of (built once).

        Backward accumulates straight into it and the all-reduce works on it in place, so a
        step copies no gradient (DDP's ``gradient_as_bucket_view`` idea, in one bucket).
        """
        flat = getattr(self, "_flat_grad", None)
        params = self._grad_params if flat is not None else [p for p in self.model.parameters() if p.requires_grad]
        if flat is None or any(p.grad is None or p.grad.data_ptr() != v.data_ptr()
                               for p, v in zip(params, self._grad_views, strict=True)):
            flat = torch.zeros(sum(p.numel() for p in params), dtype=self.float_dtype)
            views, offset = [], 0
            for p in params:
                view = flat[offset:offset + p.numel()].view_as(p)
                p.grad = view
                views.append(view)
                offset += p.numel()
            self._flat_grad, self._grad_views, self._grad_params = flat, views, params
            if self.overlaps_allreduce and self.world > 1:
                self._hook_buckets(flat, params)
        return flat

    def _hook_buckets(self, flat: torch.Tensor, params: list[torch.Tensor]) -> None:
        """Cut ``flat`` into buckets whose all-reduces start from gradient hooks (see :class:`_Buckets`)."""
        for handle in getattr(self, "_bucket_hooks", ()):
            handle.remove()
        buckets = _Buckets(flat, params, lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True))
        self._buckets = buckets
        self._bucket_hooks = [p.register_post_accumulate_grad_hook(buckets.ready) for p in params]

    def _sync_gradients(self, flat: torch.Tensor) -> None:
        if self.world == 1:
            return
        buckets = getattr(self, "_buckets", None)
        if buckets is None:
            self._allreduce_mean_(flat)
            return
        buckets.finish()
        flat.div_(self.world)

    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        if self.optimizer is None:
            raise ValueError("no optimizer was given to from_torch(optimizer=...); it is needed to train.")
        if not self.model.training:  # (not every step: train() walks every module)
            self.model.train()
        if self.main_callback is not None:
            return self._train_batch_by_hooks(batch, skip_non_finite)
        alone = self.world == 1  # nothing to all-reduce: no flat buffer to zero, fresh gradients as plain torch
        if alone:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            flat = self._grad_buffer()
            flat.zero_()
        value = 0.0
        if batch.size > 0:
            out = self._forward(batch.x)
            loss = self._loss(out, [_target(a, self.float_dtype) for a in batch.y])
            (loss if batch.weight == 1.0 else loss * batch.weight).backward()
            value = float(loss.detach())
        if not alone:
            self._sync_gradients(flat)
        if skip_non_finite and not self._finite_gradients(None if alone else flat):
            return None  # the same reduced gradient on every rank: every rank skips this step
        self.optimizer.step()
        return value

    def _hook_view(self, batch: Batch) -> Any:
        """The main callback's runner view holding ``batch`` as the reference's ``runner.batch``."""
        view = self.main_callback._runner_view()
        view.batch = [*(_tensors(a, self.float_dtype) for a in batch.x), *(_target(a, self.float_dtype) for a in batch.y)]
        view.output = view.loss = view.target = None
        return view

    def _train_batch_by_hooks(self, batch: Batch, skip_non_finite: bool) -> float | None:
        """One step through the bound MainCallback's ``on_train_forward``/``on_iter_backward`` (see
        :mod:`orca.torch._main_callback`): its optimizer averages the gradient over the workers first."""
        flat = None if self.world == 1 else self._grad_buffer()
        optimizer = _SyncedOptimizer(self, flat, skip_non_finite)
        optimizer.zero_grad()
        value = 0.0
        if batch.size > 0:
            view = self._hook_view(batch)
            view.optimizer = optimizer
            self.main_callback.on_train_forward(view)
            if not isinstance(view.loss, torch.Tensor):
                raise TypeError(f"{type(self.main_callback).__name__}.on_train_forward must set runner.loss to a tensor, "
                                f"got {type(view.loss).__name__}.")
            value = float(view.loss.detach())
            if batch.weight != 1.0:  # the batch's share of the global batch, as the runner's own step
                view.loss = view.loss * batch.weight
            self.main_callback.on_iter_backward(view)
            view.batch = view.output = view.loss = view.target = None
            del view.optimizer  # (other hooks see the runner's optimizer)
        if not optimizer.stepped:  # an empty share (or a hook that applied nothing): the group's sync still runs
            optimizer.step()
        return None if optimizer.skipped else value

    def _finite_gradients(self, flat: torch.Tensor | None) -> bool:
        if flat is not None:
            return bool(torch.isfinite(flat).all())
        return all(bool(torch.isfinite(p.grad).all()) for p in self.model.parameters() if p.grad is not None)

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        self.model.eval()
        with torch.no_grad():
            if self.main_callback is not None:
                view = self._hook_view(batch)
                self.main_callback.on_val_forward(view)
                out, loss = view.output, view.loss
                view.batch = view.output = view.loss = view.target = None
            else:
                out = self._forward(batch.x)
                loss = self._loss(out, [_target(a, self.float_dtype) for a in batch.y]) if self.loss_fn else None
        self.model.train()
        self._evaluated = (batch, out)  # for update_metrics: the output as the model gave it
        outs = [o.detach().cpu().numpy() for o in _outputs(out)]
        return (float(loss) if loss is not None else float("nan")), outs

    def update_metrics(self, metrics: Any, outputs: list[np.ndarray], batch: Batch) -> None:
        """Fold one evaluated batch into ``metrics``. A metric whose call is the user's own (a subclass of
        an :mod:`orca.torch.metrics` class overriding ``__call__``, as the reference's custom
        ``get_pytorch_metric()`` metrics do) is called as the reference called it,
        ``metric(output, target)``, with the model's output and the batch's target as they came
        (tensors, or tuples and lists of them: a model of several outputs, a data creator's
        ``(x, [y1, y2])``); every other metric is updated with the first output and the first
        target, as numpy arrays (a dict target, of a ``map`` label column, as a dict of them).
        """
        evaluated, self._evaluated = getattr(self, "_evaluated", None), None
        y = batch.y
        if not y or y[0] is None:
            return
        targets = _target_list(y)
        own = [_own_call(m) for m in metrics]
        if any(own) and evaluated is not None and evaluated[0] is batch:
            converted = [_target(t, self.float_dtype) for t in targets]
            target = converted[0] if len(converted) == 1 and not isinstance(y[0], (list, tuple)) else converted
            for m, is_own in zip(metrics, own, strict=True):
                if is_own:
                    m(evaluated[1], target)
        pred, first = np.asarray(outputs[0]), _as_numpy(targets[0])
        for m, is_own in zip(metrics, own, strict=True):
            if not is_own:
                m.update(pred, first if isinstance(first, dict) else np.asarray(first))

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        """The batch's outputs (see :func:`_prediction_arrays`), from the model's forward or, while a
        MainCallback is bound (``predict(callbacks=[...])``), its ``on_pred_forward``."""
        self.model.eval()
        with torch.no_grad():
            if self.main_callback is None:
                return _prediction_arrays(self._forward(batch.x), batch.size, "the model's forward")
            view = self._hook_view(batch)
            hook = f"{type(self.main_callback).__name__}.on_pred_forward"
            try:
                self.main_callback.on_pred_forward(view)
                out = view.output
            finally:
                view.batch = view.output = view.loss = view.target = None
        if out is None:
            raise ValueError(f"{hook} set no runner.output (it is None after the hook); set runner.output to the "
                             "batch's predictions: a tensor or numpy array, a dict of them, or a tuple/list of those.")
        return _prediction_arrays(out, batch.size, hook)

    def on_epoch_end(self, epoch: int) -> None:
        self.epoch = epoch + 1
        if self.main_callback is not None:
            self.main_callback.on_lr_adjust(self.main_callback._runner_view())
        elif self.scheduler is not None:
            self.scheduler.step()
        if self.world > 1:  # keep running statistics (BatchNorm) identical on every worker
            with torch.no_grad():
                for b in self.model.buffers():
                    if b.is_floating_point():
                        self._allreduce_mean_(b.data)

    def native_batches(self, creator: Any, batch_size: int, training: bool,
                       steps: int | None = None) -> Iterator[Batch]:
        """This rank's batches of the creator's DataLoader: rows ``rank, rank + world, ...`` of the
        dataset (of one permutation shared by every rank, when the loader shuffles), no row padded
        or repeated; the engine keeps the ranks in lock-step."""
        from torch.utils.data import DataLoader, RandomSampler, Subset

        loader = creator(self.config, batch_size)
        if not isinstance(loader, DataLoader):
            raise TypeError(f"the data creator returned {type(loader).__name__}; return a torch DataLoader.")
        if self.world > 1:
            n = len(loader.dataset)  # type: ignore[arg-type]
            order = np.arange(n)
            if training and isinstance(loader.sampler, RandomSampler):
                order = np.random.default_rng([int(self.spec.get("seed") or 0), self.epoch]).permutation(n)
            loader = DataLoader(Subset(loader.dataset, order[self.rank::self.world].tolist()),
                                batch_size=loader.batch_size, collate_fn=loader.collate_fn,
                                num_workers=loader.num_workers, drop_last=loader.drop_last)
        for i, item in enumerate(loader):
            if steps is not None and i >= steps:
                return
            if isinstance(item, dict):
                raise TypeError("a DataLoader of dicts is not supported yet; yield (inputs..., target) tuples.")
            # the reference's `*features, target = batch`: every element but the last is an input (a
            # tensor, or a list/tuple/dict of them), the last the target (a tensor or several)
            items = list(item) if isinstance(item, (list, tuple)) else [item]
            x, y = (items[:-1], items[-1:]) if len(items) > 1 else (items, [])
            yield Batch(x=x, y=y, size=_rows(items[0]))

    def optimizer_params(self) -> dict[str, Any]:
        """The optimizer's class and its first param group's hyper-parameters (``lr``, ``momentum``,
        ``weight_decay``...: its defaults, as a scheduler left them), for MLflow's run parameters."""
        if self.optimizer is None:
            return {}
        group = self.optimizer.param_groups[0] if self.optimizer.param_groups else self.optimizer.defaults
        return {"optimizer": type(self.optimizer).__name__, **{k: v for k, v in group.items() if k != "params"}}

    # ---------------------------------------------------------------- state
    def weights(self) -> list[np.ndarray]:
        return [p.detach().cpu().numpy() for p in self.model.parameters()]

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state.get("optimizer"):
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler"):
            self.scheduler.load_state_dict(state["scheduler"])


class _SyncedOptimizer:
    """The optimizer a MainCallback's hooks see: ``step()`` first averages the gradient over the
    workers (the runner's sync), ``zero_grad()`` zeroes the flat gradient buffer in place (its
    views must stay the parameters' ``.grad``); anything else is the real optimizer's."""

    def __init__(self, runner: TorchRunner, flat: torch.Tensor | None, skip_non_finite: bool) -> None:
        self._runner, self._flat, self._skip = runner, flat, skip_non_finite
        self.stepped = self.skipped = False

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._flat is None:
            self._runner.optimizer.zero_grad(set_to_none=set_to_none)
        else:
            self._flat.zero_()

    def step(self, closure: Any = None) -> None:
        if self.stepped:
            raise RuntimeError("runner.optimizer.step() was called twice in one step; each step applies one "
                               "gradient averaged over the workers.")
        self.stepped = True
        if self._flat is not None:
            self._runner._sync_gradients(self._flat)
        if self._skip and not self._runner._finite_gradients(self._flat):
            self.skipped = True
            return
        self._runner.optimizer.step()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner.optimizer, name)


def _tcp_store(rendezvous: Rendezvous, timeout: datetime.timedelta) -> dist.TCPStore:
    """The gloo group's key-value store; rank 0 serves it on ``master_addr`` only.

    torch's TCPStore listens on every interface when it opens its own socket; rank 0 hands it
    one bound to ``master_addr`` (127.0.0.1 in local mode, the node's address in a cluster).
    """
    addr, port = rendezvous.master_addr, int(rendezvous.master_port)
    if rendezvous.rank != 0:
        return dist.TCPStore(addr, port, rendezvous.world_size, False, timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(max(128, rendezvous.world_size))
    except OSError:
        sock.close()
        raise
    return dist.TCPStore(addr, port, rendezvous.world_size, True, timeout, master_listen_fd=sock.detach())


class BigDLTorchRunner(TorchRunner):
    """The ``bigdl`` backend's runner: the same steps, kept in step by :mod:`orca.core.sync`
    (BigDL's reduce-scatter + all-gather parameter sync) instead of torch.distributed.

    Each step: local forward and backward into the flat gradient buffer, an allreduce-mean of
    that buffer through the sync group, then the local optimizer step; every replica ends the
    step with identical weights.
    """

    overlaps_allreduce = False  # orca.core.sync's allreduce is a blocking call

    def _join_group(self, rendezvous: Rendezvous) -> None:
        """Nothing to join: the base Runner's sync group is the transport."""

    def _allreduce_mean_(self, t: torch.Tensor) -> None:
        if t.dtype in (torch.float32, torch.float64) and t.is_contiguous():
            self.group.allreduce(t.numpy(), op="mean")  # a view: reduced in place
            return
        tmp = t.detach().to(torch.float64 if t.dtype == torch.float64 else torch.float32).contiguous().numpy()
        self.group.allreduce(tmp, op="mean")
        t.copy_(torch.from_numpy(tmp))

    def _broadcast_(self, t: torch.Tensor) -> None:
        if t.is_contiguous() and t.dtype != torch.bfloat16:  # numpy has no bfloat16
            self.group.broadcast(t.numpy())
            return
        tmp = t.detach().to(torch.float32 if t.dtype == torch.bfloat16 else t.dtype).contiguous().numpy()
        self.group.broadcast(tmp)
        t.copy_(torch.from_numpy(tmp))


def _hvd() -> Any:
    """``horovod.torch`` (an ImportError naming the command that builds it when missing)."""
    return horovod_module("horovod.torch", "torch")


class HorovodTorchRunner(TorchRunner):
    """The ``horovod`` backend's runner: the same steps, the flat gradient all-reduced by Horovod
    (its gloo controller, no MPI) instead of torch.distributed.

    The group is started from Orca's rendezvous (:mod:`orca.core.horovod`): rank 0 serves
    Horovod's rendezvous store, every rank sets its place and calls ``hvd.init()``. Each step
    all-reduces the one flat gradient buffer with ``hvd.allreduce_`` (what
    ``hvd.DistributedOptimizer`` does per tensor), so the exact global-batch rule and the
    empty-share steps stay as on the other backends; ``setup`` broadcasts rank 0's parameters
    and buffers (``hvd.broadcast_parameters``).
    """

    _store: Any = None
    reuses_process = False  # hvd.init after hvd.shutdown in one process is not relied on
    overlaps_allreduce = False  # one hvd.allreduce_ of the whole buffer, after backward

    def _join_group(self, rendezvous: Rendezvous) -> None:
        self._store = join_horovod(_hvd(), rendezvous, self.group, self.timeout_s)

    def _allreduce_mean_(self, t: torch.Tensor) -> None:
        hvd = _hvd()
        hvd.allreduce_(t, op=hvd.Sum)
        t.div_(self.world)  # as the gloo backend: the sum, then one division (same numbers on every backend)

    def _broadcast_(self, t: torch.Tensor) -> None:
        _hvd().broadcast_(t, root_rank=0)

    def shutdown(self) -> None:
        if self.world > 1:
            leave_horovod(_hvd(), self._store)
            self._store = None
        super().shutdown()
