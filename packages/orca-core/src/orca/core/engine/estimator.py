"""BaseEstimator: the fit/evaluate/predict/save flow every framework shares.

A framework's Estimator subclasses it, declares its backends (:mod:`orca.core.engine.backend`)
and adds only what is framework-specific (``get_model``, the file format of ``save``/``load``).

The driver owns the model state (:class:`~orca.core.engine.group.ModelState`): every call
hands it to the worker group, ``fit`` replaces it with the state it trained, and nothing a
worker does (an error, a crash, a timeout) can take it back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from orca.core import _active
from orca.core.engine.backend import Backend, resolve_backend
from orca.core.engine.callbacks import Callback, latest_checkpoint
from orca.core.engine.convert import user_value
from orca.core.engine.errors import OrcaWorkerError, WorkerLostError, check_positive_int
from orca.core.engine.feed import check_shuffle
from orca.core.engine.group import ModelState, WorkerGroup
from orca.core.engine.history import History
from orca.core.engine.liveness import backstop_s
from orca.core.engine.loop import EvalArgs, FitArgs, merge_eval_states
from orca.core.engine.runner import Runner
from orca.core.engine.sources import DataFrameSource, DataSource
from orca.core.engine.spill import feed_memory_bytes, shuffle_window_bytes

log = logging.getLogger("orca")


def notify_listeners(listeners: list[Callable[[dict[str, Any]], None]], event: dict[str, Any]) -> None:
    """Hand ``event`` to each of ``listeners`` (an Estimator's ``fit_listeners``); a listener's
    failure is logged and never breaks the call."""
    for listener in list(listeners):
        try:
            listener(event)
        except Exception:  # noqa: BLE001 - a listener's failure never breaks the call
            log.exception("a fit listener failed on %s", event.get("event"))


class BaseEstimator:
    """The shared Estimator flow. Subclasses declare ``backends``.

    Args:
        spec: picklable description the runner builds the model from.
        backend: the user's backend name (one of the subclass' ``backends``).
        workers_per_node: workers on each node.
        metrics: metric spec (see :func:`orca.core.engine.metrics.make_metrics`).
        model_dir: where checkpoints go by default.
        sync_stats: with ``fit(reduce_results=False)``, report the merged stats for every worker;
            ``False`` (the default, as the reference): each worker's own ``train_loss``,
            ``num_samples`` and ``batch_count`` (the validation stats are merged either way).
        use_tqdm: show a progress bar on the driver.

    Raises:
        ValueError: an unknown backend (the message lists the choices) or a bad worker count.
        ImportError: the backend needs a package that is not installed (the message says how).
    """

    #: backend name -> :class:`Backend`, declared by each framework (see :func:`orca.core.engine.backend.declare`)
    backends: ClassVar[Mapping[str, Backend]] = {}
    #: an Estimator that can only predict (e.g. a compiled inference runtime): fit/evaluate raise
    inference_only: bool = False

    def __init__(self, *, spec: dict[str, Any], backend: str, workers_per_node: int = 1, metrics: Any = None,
                 model_dir: str | None = None, sync_stats: bool = False, use_tqdm: bool = True) -> None:
        self._backend = resolve_backend(self.backends, backend, f"{type(self).__module__}.Estimator")
        check_positive_int("workers_per_node", workers_per_node)
        from orca.core.engine.metrics import make_metrics

        make_metrics(metrics)  # validate now, on the driver
        self.spec = spec
        self.backend = backend
        self.runner_cls: type[Runner] = self._backend.runner_cls()
        self.workers_per_node = workers_per_node
        self.metrics = metrics
        self.model_dir = model_dir
        self.sync_stats = sync_stats
        self.use_tqdm = use_tqdm
        self._group_context: str | None = None
        #: ``f(event)`` called on the driver, during ``fit``, with rank 0's progress events in order:
        #: ``{"event": "begin", "total_steps"}``, ``{"event": "step", "n"}`` (steps since the last one)
        #: and ``{"event": "epoch", **the epoch's merged stats}`` (what the History gets). A
        #: listener must return quickly; its exceptions are logged and never fail the fit.
        self.fit_listeners: list[Callable[[dict[str, Any]], None]] = []
        #: the features of the first rows of the last ``fit``'s data, kept (only while MLflow model
        #: logging is on) as the MLflow model's input example; ``None`` otherwise
        self.input_example: list[np.ndarray] | None = None
        #: what checkpoints carry besides the state (the MLflow run the fits log to: see
        #: :mod:`orca.core.engine.tracking`), and what the checkpoint ``load_checkpoint`` read
        #: carried, which the next ``fit`` resumes (its MLflow run continues)
        self._checkpoint_meta: dict[str, Any] = {}
        self._resume_meta: dict[str, Any] = {}
        self._model = ModelState()
        self._group: WorkerGroup | None = None
        self._digests: list[str] = []
        self._epoch = 0

    # ------------------------------------------------------------- workers
    @property
    def launcher(self) -> str:
        """``ray`` or ``spark``: who starts this estimator's workers."""
        return self._backend.launcher

    def _ctx(self) -> Any:
        return _active.current()

    def _size(self) -> tuple[int, int]:
        return self._backend.group_cls().size(self._ctx(), self.workers_per_node)

    @property
    def num_workers(self) -> int:
        """Workers in the group: nodes x ``workers_per_node``."""
        return self._size()[0]

    @property
    def epochs_trained(self) -> int:
        """Epochs trained so far (over every ``fit``, and restored by ``load_checkpoint``): the next
        ``fit`` starts at epoch ``epochs_trained + 1``."""
        return self._epoch

    def _threads(self) -> int:
        """CPUs (and intra-op threads) per worker: a node's CPUs shared by its workers."""
        return self._size()[1]

    def _workers(self) -> WorkerGroup:
        """This Estimator's worker group (its workers start on the first call that needs them).

        Workers belong to the OrcaContext they started in: once that context was stopped (and
        another one is current, started by ``init_orca_context`` or on demand), they are gone
        with it, and new ones start in the current context from the driver's state.
        """
        ctx = self._ctx()
        if self._group is not None and self._group_context != ctx.context_id:
            log.info("the OrcaContext this Estimator's workers ran in was stopped: starting them in the current "
                     "one (the Estimator's state is kept on the driver).")
            self._group = None  # its actors and tasks ended with their context: nothing to stop
        if self._group is None:
            self._group_context = ctx.context_id
            workers, threads = self._size()
            settings = ctx.settings
            timeout_s = settings.worker_timeout_s
            # the driver judges silence; a worker's own waits on its peers are only a backstop
            spec = dict(self.spec, timeout_s=backstop_s(timeout_s))
            self._group = self._backend.group_cls()(self.runner_cls, spec, workers, threads, timeout_s)
            self._group.start_timeout_s = settings.worker_start_timeout_s
        return self._group

    def _replace_spec(self, spec: dict[str, Any]) -> None:
        """Build from ``spec`` from now on: workers built from the old one stop."""
        self.spec = spec
        if self._group is not None:
            self._group.shutdown()
            self._group = None

    def extra_adapters(self) -> Sequence[Any]:
        """Framework hooks for native loader objects (see ``get_data_source``)."""
        return ()

    #: a Ray Dataset's feature columns of numbers reach the model as one ``(n, k)`` input (as Ray's
    #: ``to_torch`` gave them) instead of one ``(n,)`` array per column
    stacks_ray_dataset_columns: bool = False

    def _source(self, data: Any, feature_cols: Any, label_cols: Any, need_labels: bool, arg: str) -> DataSource:
        from orca.core.engine.adapters import get_data_source

        return get_data_source(data, feature_cols=feature_cols, label_cols=label_cols, need_labels=need_labels,
                               arg=arg, extra_adapters=self.extra_adapters(),
                               stack_ray_dataset=self.stacks_ray_dataset_columns)

    def _check_batch_size(self, batch_size: int) -> None:
        check_positive_int("batch_size", batch_size)
        if batch_size < self.num_workers:
            raise ValueError(f"batch_size={batch_size} is smaller than the {self.num_workers} workers it is "
                             "split across; use batch_size >= number of workers.")

    # ------------------------------------------------------------- API
    def fit(self, data: Any, epochs: int = 1, batch_size: int = 32, feature_cols: Any = None,
            label_cols: Any = None, validation_data: Any = None, callbacks: list[Callback] | None = None,
            max_steps: int | None = None, shuffle: bool | str = True, reduce_results: bool = True,
            validation_freq: int = 1, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, max_failures: int | None = None,
            skip_non_finite_steps: bool = False) -> History:
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
            shuffle: how each worker shuffles its rows every epoch: ``True`` as its share allows
                (exactly while the share is in memory, by windows once it is on disk, see
                ``worker_data_memory_mb``), ``"full"`` exactly always (a share on disk is then read
                in the permutation's order: the in-memory fit's batches, slower), ``"window"`` by
                windows always (chunks in a random order, rows shuffled within a window of
                chunks), ``False`` not at all.
            reduce_results: ``False`` returns a list of per-worker stats for each epoch: each
                worker's own training stats, or the merged ones with the Estimator's ``sync_stats``.
            validation_freq: validate only after epochs whose (1-based) number is a multiple of
                this; the other epochs skip the validation pass on every rank.
            steps_per_epoch: batches per epoch of a data creator's loader (default: all of it).
            validation_steps: batches per validation pass of a data creator's loader.
            max_failures: how many times a lost worker (a killed or crashed process, a lost
                Ray actor or Spark executor, a worker silent for ``worker_timeout_s``) may
                restart the fit (default: the context's ``max_failures``, 0). With N > 0 the
                driver takes the state after every epoch; after a loss it starts new workers
                from the last completed epoch and goes on, with the same data order, so the
                result equals an uninterrupted run's. Exceptions in user code never restart.
            skip_non_finite_steps: leave out a step whose gradient (reduced over the workers)
                holds a NaN or an infinity: no worker applies it, the optimizer's state is
                untouched, and the History counts it per epoch (``skipped_steps``). Default
                ``False``: a non-finite loss fails the fit naming the epoch, step and rank, and
                the Estimator keeps its last completed state. The framework's own training
                metrics (Keras ``compile(metrics=)``, MXNet's) still see the skipped batch.

        Returns:
            A :class:`History`: per-epoch ``epoch``, ``num_samples``, ``batch_count``,
            ``train_loss`` (also as ``loss``), ``val_loss`` and ``val_<metric>`` (and, with
            ``max_failures``, ``restarts``: how often that epoch was restarted; with
            ``skip_non_finite_steps``, ``skipped_steps``); its
            ``restarts`` attribute lists each restart (``epoch``, ``cause``).

        Raises:
            ValueError / TypeError: bad input, named on the driver before any work starts.
            OrcaWorkerError: a worker failed; carries its traceback. The Estimator keeps the
                state of its last completed fit (``WorkerLostError`` when a worker was lost).
            TimeoutError: a worker made no progress for ``worker_timeout_s``.
        """
        self._refuse_if_inference_only("fit")
        check_positive_int("epochs", epochs)
        check_positive_int("validation_freq", validation_freq)
        for name, value in (("max_steps", max_steps), ("steps_per_epoch", steps_per_epoch),
                            ("validation_steps", validation_steps)):
            if value is not None:
                check_positive_int(name, value)
        self._check_batch_size(batch_size)
        shuffle = check_shuffle(shuffle)
        if not isinstance(skip_non_finite_steps, bool):
            raise TypeError(f"skip_non_finite_steps must be True or False, got {skip_non_finite_steps!r}.")
        if skip_non_finite_steps and not self.runner_cls.can_skip_steps:
            raise ValueError(f"{type(self).__name__} on the {self.backend!r} backend cannot skip non-finite steps "
                             f"({self.runner_cls.__name__} does not support it); fit without "
                             "skip_non_finite_steps (a non-finite loss then stops the fit).")
        src = self._source(data, feature_cols, label_cols, True, "data")
        val = None
        if validation_data is not None:
            val = self._source(validation_data, feature_cols, label_cols, True, "validation_data")
            if isinstance(src, DataFrameSource) != isinstance(val, DataFrameSource):
                raise ValueError(f"data is {src.what} but validation_data is {val.what}; pass both as Spark "
                                 "DataFrames or convert one (XShards.from_spark_df / xshards.to_spark_df()).")
        for cb in callbacks or []:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks: {cb!r} is not an orca Callback; subclass "
                                "orca.core.engine.callbacks.Callback.")
        tracker = getattr(self, "_mlflow", None)
        if tracker is not None and tracker.log_model:  # a flavoured MLflow model needs an input example
            self.input_example = src.example_features()
        args = FitArgs(epochs=epochs, batch_size=batch_size, shuffle=shuffle, seed=int(self.spec.get("seed") or 0),
                       window_bytes=shuffle_window_bytes(feed_memory_bytes()),
                       max_steps=max_steps, metrics=self.metrics, start_epoch=self._epoch,
                       callbacks=list(callbacks or []), validation_freq=validation_freq,
                       steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                       skip_non_finite_steps=skip_non_finite_steps)
        if max_failures is None:
            max_failures = self._ctx().settings.max_failures
        if not isinstance(max_failures, int) or max_failures < 0:
            raise ValueError(f"max_failures must be a non-negative int, got {max_failures!r}.")
        if self.fit_listeners:  # (the parameters cost a look at the context: only when someone listens)
            self._notify({"event": "fit_begin", "resume": dict(self._resume_meta), "params": {
                "estimator": type(self).__name__, "backend": self.backend, "num_workers": self.num_workers,
                "epochs": epochs, "batch_size": batch_size, "shuffle": shuffle, "max_failures": max_failures,
                "start_epoch": args.start_epoch, "data": src.what, **{f"config.{k}": v for k, v in
                                                                       dict(self.spec.get("config") or {}).items()}}})
        args.checkpoint_meta = dict(self._checkpoint_meta)  # (a listener may have named the fit's MLflow run)
        try:
            history, restarts = self._fit_epochs(src, val, args, epochs, max_steps, max_failures)
        except BaseException as exc:
            self._notify({"event": "fit_failed", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
            raise
        self._resume_meta = {}  # resumed: the next fit is a fit of its own
        ranks = [h.pop("_ranks", None) for h in history]
        if self.fit_listeners:
            self._notify({"event": "fit_end", "history": [dict(h) for h in history], "restarts": list(restarts)})
        if not reduce_results:  # sync_stats: the merged stats for every worker; else each worker's own training stats
            return History([[{**h, **(own[w] if own and len(own) == self.num_workers and not self.sync_stats else {})}
                             for w in range(self.num_workers)] for h, own in zip(history, ranks, strict=True)])
        out = History(history)
        out.restarts = restarts
        return out

    def _notify(self, event: dict[str, Any]) -> None:
        """Hand a driver-side event (``fit_begin``, ``fit_end``, ``fit_failed``) to the fit listeners."""
        notify_listeners(self.fit_listeners, event)

    def _fit_epochs(self, src: DataSource, val: DataSource | None, args: FitArgs, epochs: int,
                    max_steps: int | None, max_failures: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The epochs of one ``fit``: one worker call, or (with ``max_failures``) one per epoch with restarts."""
        history: list[dict[str, Any]] = []
        restarts: list[dict[str, Any]] = []
        if max_failures == 0:
            history = self._fit_call(src, val, args)
        else:  # one call per epoch: the driver holds every epoch's state, a lost worker costs one epoch
            first = args.start_epoch
            while len(history) < epochs:
                chunk = dataclasses.replace(args, epochs=1, start_epoch=first + len(history),
                                            max_steps=None if max_steps is None else max_steps - _steps(history))
                try:
                    part = self._fit_call(src, val, chunk)
                except (WorkerLostError, TimeoutError) as exc:
                    if len(restarts) >= max_failures:
                        exc.add_note(f"fit gave up after {len(restarts)} restart(s) (max_failures={max_failures}).")
                        raise
                    restarts.append({"epoch": chunk.start_epoch + 1, "cause": str(exc).splitlines()[0],
                                     "restart": len(restarts) + 1})
                    log.warning("fit: %s; restarting the workers from the state after epoch %d (restart %d of "
                                "at most %d).", str(exc).splitlines()[0], chunk.start_epoch, len(restarts),
                                max_failures)
                    if self._group is not None:
                        self._group.shutdown()
                    continue
                for h in part:
                    h["restarts"] = sum(1 for r in restarts if r["epoch"] == h["epoch"])
                history += part
                if not part or (max_steps is not None and _steps(history) >= max_steps):
                    break
                if part[-1].get("stopped_early"):
                    break
        return history, restarts

    def _fit_call(self, src: DataSource, val: DataSource | None, args: FitArgs) -> list[dict[str, Any]]:
        """One ``fit`` call of the worker group; on success the driver holds the new state."""
        group = self._workers()
        try:
            with self._watched(group, bar=self.use_tqdm, listeners=self.fit_listeners) as server:
                args.beat_to = server.endpoint
                if self.use_tqdm or self.fit_listeners:
                    args.progress_address = server.endpoint
                try:
                    group.prepare(src, val)
                    result = group.fit(self._model, src, val, args)
                finally:
                    #: what rank 0 reported during the last fit (what the bar showed)
                    self.progress_events = [e for e in server.events if e.get("event") != "beat"]
        except (OrcaWorkerError, TimeoutError, KeyboardInterrupt) as exc:
            exc.add_note(self._kept_note())
            log.warning("fit failed: %s", self._kept_note())
            raise
        self._model, self._digests = result.state, result.digests
        self._epoch += len(result.history)
        return result.history

    @contextlib.contextmanager
    def _watched(self, group: WorkerGroup, bar: bool = False,
                 listeners: Sequence[Callable[[dict[str, Any]], None]] = ()) -> Iterator[Any]:
        """A heartbeat listener for one call: ``group`` judges its workers by their progress
        (see :mod:`orca.core.engine.liveness`); with ``bar``, rank 0 also draws the progress bar."""
        from orca.core.engine.progress import ProgressServer, driver_host

        server = ProgressServer(driver_host(), use_tqdm=bar, liveness=group.new_liveness(), listeners=listeners)
        try:
            with group.watching(server):
                yield server
        finally:
            server.close()

    def _kept_note(self) -> str:
        if self._model.value is None and self._epoch == 0:
            return "The Estimator keeps its initial model (no fit has completed)."
        return (f"The Estimator keeps the state of its last completed fit (after epoch {self._epoch}); "
                "the failed call's progress is lost.")

    def evaluate(self, data: Any, batch_size: int = 32, feature_cols: Any = None,
                 label_cols: Any = None) -> dict[str, float]:
        """Evaluate the loss and metrics over ``data`` exactly (merged over all workers).

        Returns:
            ``{"val_loss": ..., "val_<metric>": ..., "num_samples": N}``.
        """
        return self._merge_evaluations(self._evaluate_states(data, batch_size, feature_cols, label_cols))

    def _merge_evaluations(self, states: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``evaluate``'s result from workers' evaluation states (all of them: exact over ``data``;
        one: that worker's own result)."""
        return merge_eval_states(self.metrics, list(states), prefix="val_", runner=self._metric_runner())

    def _evaluate_states(self, data: Any, batch_size: int, feature_cols: Any, label_cols: Any,
                         num_steps: int | None = None, profile: bool = False,
                         callbacks: Sequence[Callback] = ()) -> list[dict[str, Any]]:
        """Every worker's evaluation states over its share of ``data`` (merge them with
        :func:`~orca.core.engine.loop.merge_eval_states`; one alone is that worker's result): at most
        ``num_steps`` batches per worker; with ``profile``, each state's ``__profile__`` times the pass;
        ``callbacks`` are bound to each worker's runner for the pass."""
        self._refuse_if_inference_only("evaluate")
        self._check_batch_size(batch_size)
        if num_steps is not None:
            check_positive_int("num_steps", num_steps)
        src = self._source(data, feature_cols, label_cols, True, "data")
        group = self._workers()
        with self._watched(group):
            group.prepare(src)
            return group.evaluate(self._model, src, batch_size,
                                  EvalArgs(self.metrics, num_steps, bool(profile), list(callbacks)))

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
        ndarray (a list of arrays for several outputs). Each top-level output is one column
        (key): in a DataFrame, as the reference laid it out, an ``(n,)`` output a number per row,
        an ``(n, k)`` one (``k = 1`` too) an ml ``DenseVector`` per row, an ``(n, k, m, ...)`` one
        nested arrays (see :func:`orca.core.engine.predict.predict_dataframe`); a dict output (the runner's structured array, see
        :func:`orca.core.engine.convert.records`) is a struct column in a DataFrame (a field per
        key) and a dict of arrays elsewhere.
        """
        return self._predict_with(data, batch_size, feature_cols, output_cols, ())

    def _predict_with(self, data: Any, batch_size: int, feature_cols: Any, output_cols: Sequence[str] | None,
                      callbacks: Sequence[Callback]) -> Any:
        """:meth:`predict` with ``callbacks`` bound to every worker's runner for the pass (a framework
        whose runner has a prediction hook, such as torch's ``MainCallback.on_pred_forward``, offers
        them in its own ``predict``)."""
        self._require_model()
        self._check_batch_size(batch_size)
        src = self._source(data, feature_cols, None, False, "data")
        if src.is_creator:
            raise TypeError("predict takes data, not a data-creator function.")
        cbs = list(callbacks or [])
        if src.on_executors:
            return src.predict_on_executors(self.runner_cls, self.spec, self._model.value, batch_size, output_cols,
                                            self._threads(), callbacks=cbs)
        group = self._workers()
        with self._watched(group):
            group.prepare(src)
            outputs = group.predict(self._model, src, batch_size, callbacks=cbs)
        return user_value(src.with_predictions(outputs, output_cols))

    def worker_weight_digests(self) -> list[str]:
        """Digests of every worker's weights at the end of the last ``fit``.

        All equal means every replica held bit-identical weights.
        """
        return list(self._digests)

    # ------------------------------------------------------------- state
    def get_state(self) -> Any:
        """The training state the driver holds (``None`` before any fit, load or set_state)."""
        return self._model.value

    def set_state(self, state: Any) -> None:
        """Replace the training state; workers load it before their next call."""
        self._model = ModelState(state, self._model.version + 1)

    def save_mlflow_model(self, path: str) -> bool:
        """Write the trained model as an MLflow Model directory at ``path`` with the framework's
        own flavour (``mlflow.pytorch``, ``mlflow.tensorflow``), for :meth:`set_mlflow`'s model
        artifact, with :attr:`input_example` as its input example where there is one. Framework
        packages override it; this default writes nothing.

        Returns:
            True if a model was written; False when the framework has no MLflow flavour (the run
            then holds ``save_checkpoint``'s file alone).
        """
        return False

    def save_checkpoint(self, path: str) -> str:
        """Write model, optimizer and epoch to ``path`` (local or fsspec URL); returns the path.

        The file holds numbers and arrays only (:mod:`orca.core.engine.checkpoint`): loading it
        runs no code.
        """
        from orca.core.engine.checkpoint import write_checkpoint

        write_checkpoint(path, self._epoch, self.get_state(), meta=self._checkpoint_meta)
        return path

    def load_checkpoint(self, path: str, allow_pickle: bool = False) -> None:
        """Restore a checkpoint written by ``save_checkpoint`` or ``ModelCheckpoint``; ``fit`` continues
        (and, with :meth:`set_mlflow`, continues the MLflow run of the fit that wrote the checkpoint).

        Args:
            path: the checkpoint file (local or fsspec URL).
            allow_pickle: also read a pickled checkpoint (as older Orca versions wrote). Unpickling
                runs whatever code the file holds: pass ``True`` only for files you trust.

        Raises:
            ValueError: the file is a pickle and ``allow_pickle`` is False, or not a checkpoint.
        """
        from orca.core.engine.checkpoint import read_checkpoint_meta

        epoch, state, meta = read_checkpoint_meta(path, allow_pickle=allow_pickle)
        self._epoch = epoch
        self.set_state(state)
        self._checkpoint_meta, self._resume_meta = dict(meta), dict(meta)

    # ------------------------------------------------------------ TensorBoard
    def set_tensorboard(self, log_dir: str, app_name: str = "orca") -> None:
        """Write TensorBoard summaries of the next fits to ``log_dir/app_name/{train,validation}``.

        Each epoch's merged loss, metrics and throughput are written on the driver as the epoch
        ends (see :mod:`orca.core.engine.summaries`); a new call replaces the previous
        destination. Needs the ``tensorboard`` package (``orca-core[tensorboard]``).

        Args:
            log_dir: the folder TensorBoard reads (``tensorboard --logdir log_dir``).
            app_name: the run's subfolder (default ``"orca"``).

        Example:
            >>> est.set_tensorboard("/tmp/logs")  # then fit; tensorboard --logdir /tmp/logs

        Raises:
            TypeError: ``log_dir`` or ``app_name`` is not a string (or ``app_name`` is empty).
            ImportError: tensorboard is not installed (the message says how to install it).
        """
        from orca.core.engine.summaries import Summaries

        if not isinstance(log_dir, str) or not isinstance(app_name, str) or not app_name:
            raise TypeError("set_tensorboard(log_dir, app_name='orca') takes strings, e.g. "
                            "set_tensorboard('/tmp/logs') or set_tensorboard('/tmp/logs', 'lenet').")
        old = getattr(self, "_summaries", None)
        if old is not None:
            self.fit_listeners.remove(old)
            old.close()
        self._summaries: Any = Summaries(log_dir, app_name)
        self.fit_listeners.append(self._summaries)

    # ------------------------------------------------------------ MLflow
    def set_mlflow(self, tracking_uri: str | None = None, experiment_name: str | None = None,
                   run_name: str | None = None, log_model: bool = True) -> Any:
        """Log every following ``fit`` as an MLflow run: parameters, each epoch's merged stats,
        restart records and (``log_model``) the trained model (see :mod:`orca.core.engine.tracking`).

        A run is a child of the caller's active MLflow run, if there is one. A new call replaces
        the previous settings. Needs ``mlflow`` (``orca-core[mlflow]``).

        Args:
            tracking_uri: where runs go (``sqlite:///mlflow.db``, ``http://host:5000``);
                ``None``: MLflow's current tracking URI.
            experiment_name: the experiment (created when missing); ``None``: the default one.
            run_name: the runs' name.
            log_model: log the trained model as the run's ``model`` artifact: an MLflow Model with
                the framework's flavour where it has one (``mlflow.pytorch.load_model(
                "runs:/<run_id>/model")``), and ``save_checkpoint``'s file as ``model/orca.ckpt``.

        Returns:
            The :class:`~orca.core.engine.tracking.MLflowLogger` (its ``run_ids`` lists the runs).

        Raises:
            ImportError: mlflow is not installed (the message says how to install it).
        """
        from orca.core.engine.tracking import MLflowLogger

        return MLflowLogger.attach(self, tracking_uri=tracking_uri, experiment_name=experiment_name,
                                   run_name=run_name, log_model=log_model)

    def get_train_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of a training summary (``"Loss"``,
        ``"Throughput"`` or a metric name) written since :meth:`set_tensorboard`, one row per epoch.

        Raises:
            ValueError: :meth:`set_tensorboard` was not called.
        """
        return self._summary("train", tag)

    def get_validation_summary(self, tag: str) -> np.ndarray:
        """``[[iteration, value, wall time], ...]`` of a validation summary (``"Loss"`` or a
        metric name) written since :meth:`set_tensorboard`, one row per validated epoch.

        Raises:
            ValueError: :meth:`set_tensorboard` was not called.
        """
        return self._summary("validation", tag)

    def _summary(self, kind: str, tag: str) -> np.ndarray:
        summaries = getattr(self, "_summaries", None)
        if summaries is None:
            raise ValueError(f"no summaries: call set_tensorboard(log_dir) before fit to record {tag!r}.")
        return summaries.read(kind, tag)  # type: ignore[no-any-return]

    @staticmethod
    def latest_checkpoint(directory: str) -> str:
        """The newest checkpoint file in ``directory``."""
        return latest_checkpoint(directory)

    def shutdown(self) -> None:
        """Stop this estimator's workers; the state stays on the driver.

        On the ``ray`` backend, PyTorch workers stay warm for the next Estimator of the same
        framework and size for ``OrcaSettings.warm_workers_s`` (0 ends them here)."""
        if self._group is not None and self._group_in_live_context():
            self._group.release()

    def _group_in_live_context(self) -> bool:
        """Whether the workers' context is still the running one (a stopped context took its
        workers with it; touching them would start a fresh Ray or Spark)."""
        active = _active.active()
        if active is not None and active.context_id == self._group_context:
            return True
        self._group = None
        return False

    def __del__(self) -> None:  # pragma: no cover - best effort at GC
        try:
            if self._group is not None and self._group_in_live_context():
                self._group.shutdown()
        except Exception:  # noqa: BLE001 - best-effort cleanup at interpreter exit
            pass


def _steps(history: list[dict[str, Any]]) -> int:
    """Training steps taken over ``history``'s epochs."""
    return sum(int(h.get("batch_count", 0)) for h in history)
