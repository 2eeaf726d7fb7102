"""The per-worker loops, the same for every framework and every backend.

``run_fit`` feeds batches in lock-step (see :mod:`orca.core.engine.feed`), merges the
epoch's loss and validation metrics over all workers through a :class:`Collective`, and
runs callbacks with the merged stats. ``run_evaluate`` and ``run_predict`` need no
collective: their per-worker results are merged by the caller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core.engine.callbacks import Callback
from orca.core.engine.feed import Rows, steps_per_epoch
from orca.core.engine.liveness import beat
from orca.core.engine.metrics import Mean, Metric, make_metrics, merge_states
from orca.core.engine.runner import Runner
from orca.core.sync.collective import Collective, SoloCollective


@dataclass
class FitArgs:
    """What ``fit`` asks of each worker (picklable)."""

    epochs: int = 1
    batch_size: int = 32
    #: ``True``, ``False``, ``"full"`` or ``"window"`` (:func:`orca.core.engine.feed.check_shuffle`)
    shuffle: bool | str = True
    #: bytes of rows in one window of the window shuffle (what the worker's memory setting allows)
    window_bytes: int = 1 << 20
    seed: int = 0
    max_steps: int | None = None
    metrics: Any = None
    start_epoch: int = 0
    creator: Any = None
    val_creator: Any = None
    #: validate after epochs whose 1-based number is a multiple of this (the same epochs on every rank)
    validation_freq: int = 1
    callbacks: list[Callback] = field(default_factory=list)
    #: where rank 0 sends progress (the driver's ProgressServer: host, port, token), if anywhere
    progress_address: tuple[str, int, str] | None = None
    #: where every rank sends heartbeats (see orca.core.engine.liveness), if anywhere
    beat_to: tuple[str, int, str] | None = None
    #: batches of one epoch of a data creator (``None``: the loader's own length)
    steps_per_epoch: int | None = None
    #: batches of one validation pass of a data creator
    validation_steps: int | None = None
    #: a step whose reduced gradient holds NaN/Inf is left out (not applied) instead of failing the fit
    skip_non_finite_steps: bool = False
    #: what the fit's checkpoints (``ModelCheckpoint``) carry besides the state: the MLflow run it logs to
    checkpoint_meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalArgs:
    """What ``evaluate`` asks of each worker besides the rows (picklable)."""

    metrics: Any = None
    #: evaluate at most this many (non-empty) batches on each worker (``None``: all of them)
    num_steps: int | None = None
    #: also time the pass: the states get ``__profile__`` (``validation_s``, ``eval_fwd_s``, ``batches``)
    profile: bool = False
    #: callbacks bound to the worker's runner for the pass (a framework's may customise its evaluation step)
    callbacks: list[Callback] = field(default_factory=list)


def evaluate_feed(
    runner: Runner, batches: Any, metrics: list[Metric], num_steps: int | None = None, profile: bool = False,
) -> dict[str, Any]:
    """Accumulate loss and metrics over ``batches`` (at most ``num_steps`` non-empty ones); return
    per-worker mergeable states (with ``profile``, also the pass's timing under ``__profile__``)."""
    loss = Mean("val_loss")
    for m in metrics:
        m.reset()
    runner.metric_states()  # start the framework's own metrics afresh
    start, forward, steps = time.perf_counter(), 0.0, 0
    for batch in batches:
        if batch.size == 0:
            continue
        if num_steps is not None and steps >= num_steps:
            break
        steps += 1
        t0 = time.perf_counter()
        value, outputs = runner.eval_batch(batch)
        forward += time.perf_counter() - t0
        loss.update_value(value, batch.size)
        beat("evaluating")
        if metrics and outputs:
            runner.update_metrics(metrics, outputs, batch)
    states = {m.name: m.state for m in metrics}
    states["__loss__"] = loss.state
    states["__framework__"] = runner.metric_states()
    if profile:
        states["__profile__"] = {"validation_s": time.perf_counter() - start, "eval_fwd_s": forward, "batches": steps}
    return states


def merge_eval_states(metric_spec: Any, states: Sequence[dict[str, Any]], prefix: str = "",
                      runner: Runner | None = None) -> dict[str, float]:
    """Merge the ``evaluate_feed`` states of all workers into ``{name: value}``.

    ``runner`` merges the framework's own metric states (see :meth:`Runner.metric_states`).
    """
    metrics = make_metrics(metric_spec)
    loss = Mean()
    for s in states:
        loss.merge(s["__loss__"])
    out = {f"{prefix}loss": loss.result()}
    out.update({f"{prefix}{k}": v for k, v in merge_states(metrics, list(states)).items()})
    own = [s.get("__framework__") for s in states]
    if runner is not None and any(o is not None for o in own):
        out.update({f"{prefix}{k}": v for k, v in runner.merge_metric_states([o for o in own if o is not None]).items()})
    out["num_samples"] = int(loss.state["count"])
    return out


class _Progress(Callback):
    """Rank 0's progress reports to the driver's bar, as an ordinary worker-side callback."""

    def __init__(self, address: tuple[str, int, str], total_steps: int | None) -> None:
        from orca.core.engine.progress import Reporter

        self.reporter = Reporter(address)
        self.total_steps = total_steps
        self.epoch = 0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        from orca.core.engine.tracking import hyperparameters

        try:  # the optimizer as rank 0 built it (MLflow's run parameters); never fails the fit
            optimizer = hyperparameters(self.runner.optimizer_params())
        except Exception:  # noqa: BLE001 - reporting is best effort
            optimizer = {}
        self.reporter({"event": "begin", "total_steps": self.total_steps, "optimizer": optimizer})

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        self.reporter({"event": "step", "epoch": self.epoch + 1, "loss": (logs or {}).get("loss", 0.0)})

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.reporter({"event": "epoch", **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}})

    def close(self) -> None:
        self.reporter.close()


class CallbackList:
    """Fans every hook out to the worker's callbacks; :meth:`close` releases what they hold."""

    def __init__(self, callbacks: Sequence[Callback], runner: Runner, rank: int, world: int) -> None:
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            cb.bind(runner, rank, world)

    def __getattr__(self, hook: str) -> Callable[..., None]:
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def fan_out(*args: Any) -> None:
            for cb in self.callbacks:
                getattr(cb, hook)(*args)

        return fan_out

    def close(self) -> None:
        for cb in self.callbacks:
            close = getattr(cb, "close", None)
            if close is not None:
                close()


def _total_steps(counts: Sequence[int], feed: Rows | None, args: FitArgs) -> int | None:
    if feed is None:
        return args.steps_per_epoch * args.epochs if args.steps_per_epoch else None
    total = steps_per_epoch(int(sum(counts)), args.batch_size) * args.epochs
    return min(total, args.max_steps) if args.max_steps is not None else total


def run_fit(
    runner: Runner,
    feed: Rows | None,
    val_feed: Rows | None,
    counts: Sequence[int],
    rank: int,
    args: FitArgs,
) -> list[dict[str, Any]]:
    """Train for ``args.epochs`` epochs and return the merged per-epoch stats (same on all ranks).

    Args:
        runner: this worker's framework runner (already set up).
        feed: this worker's training rows (``None`` with a data creator).
        val_feed: this worker's validation rows, if any.
        counts: training rows on every rank (for the lock-step plan).
        rank: this worker's rank.
        args: what fit asked for.
    """
    world = runner.world
    collective = runner.collective() if world > 1 else SoloCollective()
    if collective is None:
        raise RuntimeError(f"{type(runner).__name__} has no collective in a group of {world}; call "
                           "Runner.setup() from the subclass' setup.")
    extra: list[Callback] = []
    if rank == 0 and args.progress_address is not None:
        extra.append(_Progress(args.progress_address, _total_steps(counts, feed, args)))
    for cb in args.callbacks:  # (ModelCheckpoint writes it into each checkpoint)
        cb.checkpoint_meta = dict(args.checkpoint_meta)
    callbacks = CallbackList([*args.callbacks, *extra], runner, rank, world)
    try:
        return _fit_epochs(runner, feed, val_feed, counts, rank, collective, args, callbacks)
    finally:
        callbacks.close()


def _fit_epochs(runner: Runner, feed: Rows | None, val_feed: Rows | None, counts: Sequence[int], rank: int,
                collective: Collective, args: FitArgs, callbacks: CallbackList) -> list[dict[str, Any]]:
    runner.stop_training = False
    metrics = make_metrics(args.metrics)
    history: list[dict[str, Any]] = []
    ranks: list[list[dict[str, Any]]] = []  # each epoch's per-rank training stats
    local_bs = max(1, args.batch_size // runner.world)
    callbacks.on_train_begin()
    steps_done = 0
    for epoch in range(args.start_epoch, args.start_epoch + args.epochs):
        callbacks.on_epoch_begin(epoch)
        t0 = time.perf_counter()
        loss = Mean()
        runner.metric_states()  # start the framework's own metrics afresh
        if feed is not None:
            batches: Any = feed.train_batches(
                counts, rank, args.batch_size, epoch=epoch, shuffle=args.shuffle, seed=args.seed,
                window_bytes=args.window_bytes,
            )
        else:
            batches = runner.lockstep(runner.native_batches(args.creator, local_bs, True, args.steps_per_epoch))
        steps = skipped = 0
        it = iter(batches)
        while args.max_steps is None or steps_done < args.max_steps:
            # a step (and, with native loaders, the lock-step exchange before it) waits for every
            # rank: the driver blames a silent rank in here only when no rank makes progress
            beat("in a training step" if steps_done else "in the first training step", epoch=epoch + 1, step=steps + 1)
            batch = next(it, None)
            if batch is None:
                break
            taken = runner.train_batch(batch, True) if args.skip_non_finite_steps else runner.train_batch(batch)
            if taken is None:  # skip_non_finite_steps, and the reduced gradient held NaN/Inf: no rank applied it
                skipped += 1
                steps += 1
                steps_done += 1
                beat("training", epoch=epoch + 1, step=steps)
                callbacks.on_batch_end(steps - 1, {"loss": float("nan"), "skipped": True})
                continue
            value = taken
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"the training loss became {value} at epoch {epoch + 1}, step {steps + 1} (rank {rank}); the "
                    "fit stopped. The Estimator keeps the state of its last completed fit (or epoch, with "
                    "max_failures). Check the data for NaN/Inf values and try a lower learning rate.")
            loss.update_value(value, batch.size)
            steps += 1
            steps_done += 1
            beat("training", epoch=epoch + 1, step=steps)
            callbacks.on_batch_end(steps - 1, {"loss": value})
        runner.on_epoch_end(epoch)
        local: dict[str, Any] = {"train": loss.state, "steps": steps, "skipped": skipped,
                                 "own": runner.metric_states()}
        validate = (epoch + 1) % max(1, args.validation_freq) == 0
        if validate and (val_feed is not None or args.val_creator is not None):
            vbatches = (
                val_feed.batches(local_bs)
                if val_feed is not None
                else runner.native_batches(args.val_creator, local_bs, False, args.validation_steps)
            )
            local["val"] = evaluate_feed(runner, vbatches, metrics)
        beat("merging the epoch", force=True, epoch=epoch + 1)
        gathered = collective.allgather(local)
        train = Mean()
        for g in gathered:
            train.merge(g["train"])
        stats: dict[str, Any] = {
            "epoch": epoch + 1,
            "batch_count": int(max(g["steps"] for g in gathered)),
            "num_samples": int(train.state["count"]),
            "train_loss": train.result(),
            "loss": train.result(),
            "epoch_time_s": time.perf_counter() - t0,
        }
        ranks.append([_rank_stats(g) for g in gathered])
        if args.skip_non_finite_steps:  # the same steps on every rank (the decision is the reduced gradient's)
            stats["skipped_steps"] = int(max(g["skipped"] for g in gathered))
        if local["own"] is not None:
            stats.update(runner.merge_metric_states([g["own"] for g in gathered]))
        if "val" in local:
            merged = merge_eval_states(args.metrics, [g["val"] for g in gathered], prefix="val_", runner=runner)
            merged.pop("num_samples", None)
            stats.update(merged)
        history.append(stats)
        beat("ending an epoch", force=True, epoch=epoch + 1)
        callbacks.on_epoch_end(epoch, stats)
        if runner.stop_training:
            stats["stopped_early"] = True  # a callback stopped the fit (a resumed fit stops too)
        if runner.stop_training or (args.max_steps is not None and steps_done >= args.max_steps):
            break
    callbacks.on_train_end(history[-1] if history else {})
    # each rank's own training stats, for fit(reduce_results=False) without sync_stats (the Estimator
    # pops them; callbacks never see them)
    for stats, own in zip(history, ranks, strict=True):
        stats["_ranks"] = own
    return history


def _rank_stats(local: dict[str, Any]) -> dict[str, Any]:
    """One rank's own training stats of an epoch (``batch_count``, ``num_samples``, ``train_loss``)."""
    own = Mean()
    own.merge(local["train"])
    return {"batch_count": int(local["steps"]), "num_samples": int(own.state["count"]),
            "train_loss": own.result(), "loss": own.result()}


def run_predict(runner: Runner, feed: Rows, batch_size: int,
                callbacks: Sequence[Callback] = ()) -> list[np.ndarray]:
    """Predict every row of ``feed``; returns one array per model output (a dict output as one
    structured array, see :func:`orca.core.engine.convert.records`). ``callbacks`` are bound to
    ``runner`` for the pass (a framework's may customise its prediction step)."""
    outs: list[list[np.ndarray]] = []
    bound = CallbackList(callbacks, runner, runner.rank, runner.world) if callbacks else None
    try:
        for out in runner.predict_batches(feed.batches(batch_size)):
            outs.append([np.asarray(o) for o in out])
            beat("predicting")
    finally:
        if bound is not None:
            bound.close()
    if not outs:
        return []
    return [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]
