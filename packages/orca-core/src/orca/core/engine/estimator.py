"""BaseEstimator: the fit/evaluate/predict/save flow every framework shares.

A framework's Estimator subclasses it, names its :class:`Runner` and backends, and adds
only what is framework-specific (``get_model``, the file format of ``save``/``load``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from orca.core.engine.adapters import DataSource, get_data_source
from orca.core.engine.callbacks import Callback, latest_checkpoint
from orca.core.engine.errors import check_positive_int
from orca.core.engine.history import History
from orca.core.engine.loop import FitArgs, merge_eval_states
from orca.core.engine.predict import add_predictions, predict_dataframe, predict_spark_shards
from orca.core.engine.ray_backend import RayWorkerGroup
from orca.core.engine.runner import Runner
from orca.core.engine.spark_backend import SparkWorkerGroup

log = logging.getLogger("orca")


class BaseEstimator:
    """The shared Estimator flow. Subclasses set ``runner_cls`` and ``launchers``.

    Args:
        spec: picklable description the runner builds the model from.
        backend: the user's backend name.
        workers_per_node: workers on each node.
        metrics: metric spec (see :func:`orca.core.engine.metrics.make_metrics`).
        model_dir: where checkpoints go by default.
        sync_stats: report the merged stats for every worker (``reduce_results=False``).
        use_tqdm: show a progress bar on the driver.
    """

    runner_cls: type[Runner]
    #: backend name -> launcher: "ray" (actors) or "spark" (barrier tasks)
    launchers: dict[str, str] = {}
    #: an Estimator that can only predict (e.g. a compiled inference runtime): fit/evaluate raise
    inference_only: bool = False

    def __init__(self, *, spec: dict[str, Any], backend: str, workers_per_node: int = 1, metrics: Any = None,
                 model_dir: str | None = None, sync_stats: bool = False, use_tqdm: bool = True) -> None:
        if backend not in self.launchers:
            raise ValueError(f"backend={backend!r} is not supported by {type(self).__module__}.Estimator; "
                             f"use one of {sorted(self.launchers)}.")
        check_positive_int("workers_per_node", workers_per_node)
        from orca.core.engine.metrics import make_metrics

        make_metrics(metrics)  # validate now, on the driver
        self.spec = spec
        self.backend = backend
        self.workers_per_node = workers_per_node
        self.metrics = metrics
        self.model_dir = model_dir
        self.sync_stats = sync_stats
        self.use_tqdm = use_tqdm
        self._state: Any = None
        self._ray: RayWorkerGroup | None = None
        self._epoch = 0

    # ------------------------------------------------------------- workers
    @property
    def launcher(self) -> str:
        """``ray`` or ``spark``: who starts this estimator's workers."""
        return self.launchers[self.backend]

    def _ctx(self) -> Any:
        from orca.core.context import OrcaContext

        return OrcaContext.current()

    @property
    def num_workers(self) -> int:
        """Workers in the group: nodes x ``workers_per_node``."""
        ctx = self._ctx()
        if self.launcher == "ray":
            nodes = ctx.ray_runtime().num_nodes if ctx.has_ray or ctx.runtime == "ray" else ctx.num_nodes
            return max(1, nodes) * self.workers_per_node
        return max(1, ctx.num_nodes) * self.workers_per_node

    def _threads(self) -> int:
        """CPUs (and intra-op threads) per worker: a node's CPUs shared by its workers."""
        ctx = self._ctx()
        if self.launcher == "ray" and (ctx.has_ray or ctx.runtime == "ray"):
            cpus = [c for c in ctx.ray_runtime().cpus_per_node if c > 0] or [ctx.cores]
            return max(1, min(cpus) // self.workers_per_node)
        return max(1, ctx.cores // self.workers_per_node)

    def _ray_group(self) -> RayWorkerGroup:
        if self._ray is None:
            ctx = self._ctx()
            self._ray = RayWorkerGroup(self.runner_cls, self.spec, self.num_workers, self._threads(),
                                       ctx.settings.worker_timeout_s)
        if not self._ray.started:
            # the actors start while the call that needs them stages its data; the group's
            # methods wait for them (and load this state) before they use them
            self._ray.launch(self._state)
        return self._ray

    def _prepare_ray_sources(self, *sources: DataSource | None) -> None:
        """Run a Ray Dataset's pending transforms now: its tasks need CPUs that the actors hold,
        so the actors step aside (state kept on the driver) while it materializes."""
        pending = [s for s in sources if s is not None and s.kind == "ray_dataset"
                   and type(s.obj).__name__ != "MaterializedDataset"]
        if not pending:
            return
        if self._ray is not None and self._ray.started:
            self._state = self._ray.get_state()
            self._ray.shutdown()
        for s in pending:
            cols = list(s.feature_cols or []) + [c for c in (s.label_cols or []) if c not in (s.feature_cols or [])]
            s.obj = s.obj.select_columns(cols).materialize()

    def _spark_group(self) -> SparkWorkerGroup:
        return SparkWorkerGroup(self.runner_cls, self.spec, self.num_workers, self._threads())

    def extra_adapters(self) -> Sequence[Any]:
        """Framework hooks for native loader objects (see ``get_data_source``)."""
        return ()

    def _source(self, data: Any, feature_cols: Any, label_cols: Any, need_labels: bool, arg: str) -> DataSource:
        return get_data_source(data, feature_cols=feature_cols, label_cols=label_cols, need_labels=need_labels,
                               arg=arg, extra_adapters=self.extra_adapters())

    def _check_batch_size(self, batch_size: int) -> None:
        check_positive_int("batch_size", batch_size)
        if batch_size < self.num_workers:
            raise ValueError(f"batch_size={batch_size} is smaller than the {self.num_workers} workers it is "
                             "split across; use batch_size >= number of workers.")

    # ------------------------------------------------------------- API
    def fit(self, data: Any, epochs: int = 1, batch_size: int = 32, feature_cols: Any = None,
            label_cols: Any = None, validation_data: Any = None, callbacks: list[Callback] | None = None,
            max_steps: int | None = None, shuffle: bool = True, reduce_results: bool = True,
            validation_freq: int = 1) -> History:
        """Train on ``data`` for ``epochs`` epochs, data-parallel over the workers.

        Args:
            data: a Spark DataFrame, an XShards, numpy data, a data creator
                ``f(config, batch_size)`` or a framework loader (see the framework's docs).
            epochs: passes over the data.
            batch_size: the global batch size, split evenly across workers.
            feature_cols: input columns (DataFrame / pandas XShards).
            label_cols: target columns.
            validation_data: data of the same kind, evaluated after each epoch.
            callbacks: :class:`~orca.core.engine.callbacks.Callback` objects, run in the workers.
            max_steps: stop after this many steps in total.
            shuffle: shuffle each worker's rows every epoch.
            reduce_results: ``False`` returns per-worker stats (identical here: stats are merged).
            validation_freq: validate only after epochs whose (1-based) number is a multiple of
                this; the other epochs skip the validation pass on every rank.

        Returns:
            A :class:`History`: per-epoch ``epoch``, ``num_samples``, ``batch_count``,
            ``train_loss`` (also as ``loss``), ``val_loss`` and ``val_<metric>``.

        Raises:
            ValueError / TypeError: bad input, named on the driver before any work starts.
            OrcaWorkerError: a worker failed; carries its traceback.
        """
        self._refuse_if_inference_only("fit")
        check_positive_int("epochs", epochs)
        check_positive_int("validation_freq", validation_freq)
        self._check_batch_size(batch_size)
        src = self._source(data, feature_cols, label_cols, True, "data")
        val = None
        if validation_data is not None:
            val = self._source(validation_data, feature_cols, label_cols, True, "validation_data")
            if "dataframe" in (src.kind, val.kind) and src.kind != val.kind:
                raise ValueError(f"data is {src.kind} but validation_data is {val.kind}; pass both as Spark "
                                 "DataFrames or convert one (XShards.from_spark_df / xshards.to_spark_df()).")
        for cb in callbacks or []:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks: {cb!r} is not an orca Callback.")
        args = FitArgs(epochs=epochs, batch_size=batch_size, shuffle=shuffle, seed=int(self.spec.get("seed", 0)),
                       max_steps=max_steps, metrics=self.metrics, start_epoch=self._epoch,
                       callbacks=list(callbacks or []), validation_freq=validation_freq)
        progress = None
        if self.use_tqdm:
            from orca.core.engine.progress import ProgressServer, driver_host

            progress = ProgressServer(driver_host())
            args.progress_address = progress.address
        try:
            if self.launcher == "ray":
                self._prepare_ray_sources(src, val)
                history = self._ray_group().fit(src, val, args)
            else:
                group = self._spark_group()
                history, self._state = group.fit(self._state, src, val, args)
                self._spark_digests = group.last_digests
        finally:
            if progress is not None:
                progress.close()
                #: what rank 0 reported during the last fit (what the bar showed)
                self.progress_events = list(progress.events)
        self._epoch += len(history)
        if not reduce_results:
            return History([[dict(h) for _ in range(self.num_workers)] for h in history])
        return History(history)

    def evaluate(self, data: Any, batch_size: int = 32, feature_cols: Any = None,
                 label_cols: Any = None) -> dict[str, float]:
        """Evaluate the loss and metrics over ``data`` exactly (merged over all workers).

        Returns:
            ``{"val_loss": ..., "val_<metric>": ..., "num_samples": N}``.
        """
        self._refuse_if_inference_only("evaluate")
        self._check_batch_size(batch_size)
        src = self._source(data, feature_cols, label_cols, True, "data")
        if self.launcher == "ray":
            self._prepare_ray_sources(src)
            states = self._ray_group().evaluate(src, batch_size, self.metrics)
        else:
            states = self._spark_group().evaluate(self._state, src, batch_size, self.metrics)
        return merge_eval_states(self.metrics, states, prefix="val_", runner=self._metric_runner())

    def _metric_runner(self) -> Runner | None:
        """A driver-side runner that merges the framework's own metric states (frameworks that keep some)."""
        return None

    def _refuse_if_inference_only(self, method: str) -> None:
        if self.inference_only:
            raise NotImplementedError(
                f"{type(self).__module__}.Estimator is inference-only: {method}() is not available; "
                "train the model with its own framework (or another Orca Estimator), then predict() here.")

    def _require_model(self) -> None:
        """Raise NotFittedError when there is no model to run (frameworks override)."""

    def predict(self, data: Any, batch_size: int = 32, feature_cols: Any = None,
                output_cols: Sequence[str] | None = None) -> Any:
        """Predict ``data``; the result has the input's container type.

        Spark DataFrame -> DataFrame with a ``prediction`` column (or ``output_cols``);
        XShards -> XShards whose shards gain ``prediction``; ndarray (or list/dict) ->
        ndarray (a list of arrays for several outputs).
        """
        self._require_model()
        self._check_batch_size(batch_size)
        src = self._source(data, feature_cols, None, False, "data")
        if src.kind == "creator":
            raise TypeError("predict takes data, not a data-creator function.")
        state = self.get_state()
        if src.kind == "dataframe":
            return predict_dataframe(self.runner_cls, self.spec, state, src.obj, list(src.feature_cols or []),
                                     batch_size, output_cols, self._threads())
        if src.kind == "xshards" and hasattr(src.obj, "rdd"):
            return predict_spark_shards(self.runner_cls, self.spec, state, src.obj, src.feature_cols,
                                        batch_size, output_cols, self._threads())
        if self.launcher == "ray":
            self._prepare_ray_sources(src)
            outs = self._ray_group().predict(src, batch_size)
        else:
            outs = self._spark_group().predict_local(state, src, batch_size)
        if src.kind == "xshards":
            return self._shards_with_predictions(src, outs, output_cols)
        return outs[0] if len(outs) == 1 else outs

    def _shards_with_predictions(self, src: DataSource, outs: list[np.ndarray], output_cols: Any) -> Any:
        from orca.core.data import XShards
        from orca.core.engine.convert import part_rows, shard_to_part

        result, start = [], 0
        for shard in src.obj.collect():
            n = part_rows(shard_to_part(shard, src.feature_cols, None))
            result.append(add_predictions(shard, [o[start:start + n] for o in outs], output_cols))
            start += n
        return XShards.from_list(result, backend="ray" if hasattr(src.obj, "refs") else "local")

    def worker_weight_digests(self) -> list[str]:
        """Digests of every worker's weights (after the last ``fit`` for the spark backend).

        All equal means every replica holds bit-identical weights.
        """
        if self.launcher == "ray":
            return self._ray_group().weight_digests()
        return list(getattr(self, "_spark_digests", []))

    # ------------------------------------------------------------- state
    def get_state(self) -> Any:
        """The current training state (rank 0's), fetched from the workers if they hold it."""
        if self.launcher == "ray" and self._ray is not None and self._ray.started:
            return self._ray.get_state()
        return self._state

    def set_state(self, state: Any) -> None:
        """Replace the training state on the driver and on any live workers."""
        self._state = state
        if self.launcher == "ray" and self._ray is not None and self._ray.started:
            self._ray.set_state(state)

    def save_checkpoint(self, path: str) -> str:
        """Write model, optimizer and epoch to ``path`` (local or fsspec URL); returns the path."""
        import cloudpickle
        import fsspec

        with fsspec.open(path, "wb") as fh:
            cloudpickle.dump({"epoch": self._epoch, "state": self.get_state()}, fh)
        return path

    def load_checkpoint(self, path: str) -> None:
        """Restore a checkpoint written by ``save_checkpoint`` or ``ModelCheckpoint``; ``fit`` continues."""
        import cloudpickle
        import fsspec

        with fsspec.open(path, "rb") as fh:
            ckpt = cloudpickle.load(fh)
        self._epoch = int(ckpt.get("epoch", 0))
        self.set_state(ckpt["state"])

    @staticmethod
    def latest_checkpoint(directory: str) -> str:
        """The newest checkpoint file in ``directory``."""
        return latest_checkpoint(directory)

    def shutdown(self) -> None:
        """Stop this estimator's workers (Ray actors); the state stays on the driver."""
        if self._ray is not None:
            if self._ray.started:
                try:
                    self._state = self._ray.get_state()
                except Exception:  # noqa: BLE001 - a dead group has nothing to give back
                    log.debug("could not fetch state at shutdown", exc_info=True)
            self._ray.shutdown()

    def __del__(self) -> None:  # pragma: no cover - best effort at GC
        try:
            if self._ray is not None and self._ray.started:
                self._ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
