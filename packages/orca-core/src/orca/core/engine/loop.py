"""The per-worker loops, the same for every framework and every backend.

``run_fit`` feeds batches in lock-step (see :mod:`orca.core.engine.feed`), merges the
epoch's loss and validation metrics over all workers through a :class:`Collective`, and
runs callbacks with the merged stats. ``run_evaluate`` and ``run_predict`` need no
collective: their per-worker results are merged by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orca.core.engine.callbacks import Callback
from orca.core.engine.feed import Feed, steps_per_epoch
from orca.core.engine.metrics import Mean, Metric, make_metrics, merge_states
from orca.core.engine.runner import Collective, Runner, SoloCollective

Reporter = Callable[[dict[str, Any]], None]


@dataclass
class FitArgs:
    """What ``fit`` asks of each worker (picklable)."""

    epochs: int = 1
    batch_size: int = 32
    shuffle: bool = True
    seed: int = 0
    max_steps: int | None = None
    metrics: Any = None
    start_epoch: int = 0
    creator: Any = None
    val_creator: Any = None
    #: validate after epochs whose 1-based number is a multiple of this (the same epochs on every rank)
    validation_freq: int = 1
    callbacks: list[Callback] = field(default_factory=list)
    #: where rank 0 sends progress (the driver's ProgressServer), if anywhere
    progress_address: tuple[str, int] | None = None


def evaluate_feed(
    runner: Runner, batches: Any, metrics: list[Metric]
) -> dict[str, Any]:
    """Accumulate loss and metrics over ``batches``; return per-worker mergeable states."""
    loss = Mean("val_loss")
    for m in metrics:
        m.reset()
    runner.metric_states()  # start the framework's own metrics afresh
    for batch in batches:
        if batch.size == 0:
            continue
        value, outputs = runner.eval_batch(batch)
        loss.update_value(value, batch.size)
        if metrics and outputs:
            target = batch.y[0] if batch.y else None
            if target is None:
                continue
            target = np.asarray(target)
            for m in metrics:
                m.update(np.asarray(outputs[0]), target)
    states = {m.name: m.state for m in metrics}
    states["__loss__"] = loss.state
    states["__framework__"] = runner.metric_states()
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


def run_fit(
    runner: Runner,
    feed: Feed | None,
    val_feed: Feed | None,
    counts: Sequence[int],
    rank: int,
    collective: Collective,
    args: FitArgs,
    report: Reporter | None = None,
) -> list[dict[str, Any]]:
    """Train for ``args.epochs`` epochs and return the merged per-epoch stats (same on all ranks).

    Args:
        runner: this worker's framework runner (already set up).
        feed: this worker's training rows (``None`` with a data creator).
        val_feed: this worker's validation rows, if any.
        counts: training rows on every rank (for the lock-step plan).
        rank: this worker's rank.
        collective: small-object collective of the group.
        args: what fit asked for.
        report: progress sink (rank 0 reports; others may pass ``None``).
    """
    world = len(counts) if counts else 1
    collective = SoloCollective() if world == 1 else (runner.collective() or collective)
    own_reporter = None
    if report is None and rank == 0 and args.progress_address is not None:
        from orca.core.engine.progress import Reporter

        report = own_reporter = Reporter(args.progress_address)
    if report is not None:
        per_epoch = steps_per_epoch(int(sum(counts)), args.batch_size) if feed is not None else None
        total = per_epoch * args.epochs if per_epoch is not None else None
        if total is not None and args.max_steps is not None:
            total = min(total, args.max_steps)
        report({"event": "begin", "total_steps": total})
    callbacks = list(args.callbacks)
    for cb in callbacks:
        cb.bind(runner, rank, world)
    runner.stop_training = False
    metrics = make_metrics(args.metrics)
    history: list[dict[str, Any]] = []
    local_bs = max(1, args.batch_size // world)
    for cb in callbacks:
        cb.on_train_begin()
    steps_done = 0
    for epoch in range(args.start_epoch, args.start_epoch + args.epochs):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        t0 = time.perf_counter()
        loss = Mean()
        runner.metric_states()  # start the framework's own metrics afresh
        if feed is not None:
            batches: Any = feed.train_batches(
                counts, rank, args.batch_size, epoch=epoch, shuffle=args.shuffle, seed=args.seed
            )
        else:
            batches = runner.native_batches(args.creator, local_bs, training=True)
        step = 0
        for step, batch in enumerate(batches):
            if args.max_steps is not None and steps_done >= args.max_steps:
                break
            value = runner.train_batch(batch)
            loss.update_value(value, batch.size)
            steps_done += 1
            for cb in callbacks:
                cb.on_batch_end(step, {"loss": value})
            if report is not None:
                report({"event": "step", "epoch": epoch + 1, "loss": value})
        runner.on_epoch_end(epoch)
        local: dict[str, Any] = {"train": loss.state, "steps": step + 1, "own": runner.metric_states()}
        validate = (epoch + 1) % max(1, args.validation_freq) == 0
        if validate and (val_feed is not None or args.val_creator is not None):
            vbatches = (
                val_feed.batches(local_bs)
                if val_feed is not None
                else runner.native_batches(args.val_creator, local_bs, training=False)
            )
            local["val"] = evaluate_feed(runner, vbatches, metrics)
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
        if local["own"] is not None:
            stats.update(runner.merge_metric_states([g["own"] for g in gathered]))
        if "val" in local:
            merged = merge_eval_states(args.metrics, [g["val"] for g in gathered], prefix="val_", runner=runner)
            merged.pop("num_samples", None)
            stats.update(merged)
        history.append(stats)
        for cb in callbacks:
            cb.on_epoch_end(epoch, stats)
        if report is not None:
            report({"event": "epoch", **{k: v for k, v in stats.items() if isinstance(v, (int, float))}})
        if runner.stop_training or (args.max_steps is not None and steps_done >= args.max_steps):
            break
    for cb in callbacks:
        cb.on_train_end(history[-1] if history else {})
    if own_reporter is not None:
        own_reporter.close()
    return history


def run_predict(runner: Runner, feed: Feed, batch_size: int) -> list[np.ndarray]:
    """Predict every row of ``feed``; returns one array per model output."""
    outs: list[list[np.ndarray]] = []
    for out in runner.predict_batches(feed.batches(batch_size)):
        outs.append([np.asarray(o) for o in out])
    if not outs:
        return []
    return [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]
