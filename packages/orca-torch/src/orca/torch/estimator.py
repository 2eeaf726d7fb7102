"""The PyTorch Estimator: ``Estimator.from_torch(model=..., optimizer=..., loss=...)``."""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import torch
from orca.core.plugin import (
    Backend,
    BaseEstimator,
    Callback,
    CreatorSource,
    DataSource,
    History,
    NotFittedError,
    Trigger,
    check_positive_int,
    check_writable,
    declare,
    horovod_install_hint,
    reading_model_file,
    require_model_file,
    solo_runner,
    warn_once,
    writing_file,
)
from orca.torch._callbacks import ModelCheckpoint
from orca.torch._main_callback import MainCallback
from orca.torch._spec import build_model, check_loss, check_model, describe_optimizer
from orca.torch.metrics import add_reference_eval_keys, add_reference_fit_keys, reference_keys, torch_metrics
from orca.torch.runner import BigDLTorchRunner, HorovodTorchRunner, TorchRunner
from torch import nn

log = logging.getLogger("orca")


class _ProfileTimes(Callback):
    """``fit(profile=True)``: rank 0's timings of each epoch, added to its stats as ``profile``
    (the reference's keys: ``mean_train_epoch_s``, ``mean_validation_s``; and ``mean_train_batch_s``)."""

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.start = self.last = time.perf_counter()
        self.steps = 0

    def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
        self.steps += 1
        self.last = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is None:
            return
        train = self.last - self.start
        profile = {"mean_train_epoch_s": train, "mean_train_batch_s": train / max(1, self.steps)}
        if "val_loss" in logs:  # the validation pass and the epoch's merge, after the last step
            profile["mean_validation_s"] = time.perf_counter() - self.last
        logs["profile"] = profile  # rank 0's History entry (what fit returns)


def _worker_shares(states: Sequence[Any], workers: int) -> list[list[Any]]:
    """``states`` (one per worker, or one per partition) cut into at most ``workers`` contiguous runs."""
    bounds = [round(i * len(states) / workers) for i in range(workers + 1)]
    return [list(states[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


def _eval_profile(states: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The reference's ``profile`` of an evaluation: each worker's pass and its mean forward step, averaged."""
    times = [s["__profile__"] for s in states if s.get("__profile__")]
    if not times:
        return {}
    return {"mean_validation_s": sum(t["validation_s"] for t in times) / len(times),
            "mean_eval_fwd_s": sum(t["eval_fwd_s"] / max(1, t["batches"]) for t in times) / len(times)}


def _main_callbacks(callbacks: Sequence[Any] | None, call: str) -> list[Any]:
    mains = [cb for cb in callbacks or [] if isinstance(cb, MainCallback)]
    if len(mains) > 1:
        raise ValueError(f"{call}: at most one MainCallback runs the steps, got {len(mains)}: "
                         f"{[type(m).__name__ for m in mains]}.")
    return mains


class Estimator(BaseEstimator):
    """Distributed training and inference of a PyTorch model on Ray actors or Spark tasks.

    Create it with :meth:`from_torch`; then ``fit``, ``evaluate``, ``predict``, ``save``,
    ``load``, ``get_model``. See :class:`orca.core.engine.BaseEstimator` for the shared flow.
    """

    backends = declare(
        Backend("bigdl", "spark", BigDLTorchRunner,
                "Spark barrier tasks kept in step by Orca's parameter sync (orca.core.sync), as BigDL's"),
        Backend("ray", "ray", TorchRunner, "Ray actors, gradients all-reduced by torch.distributed (gloo)"),
        Backend("spark", "spark", TorchRunner, "Spark barrier tasks, gradients all-reduced by torch.distributed"),
        Backend("horovod", "ray", HorovodTorchRunner, "Ray actors, gradients all-reduced by Horovod (gloo)",
                requires=("horovod.torch",), install=horovod_install_hint("torch")),
    )

    @classmethod
    def from_torch(
        cls,
        *,
        model: nn.Module | Any = None,
        optimizer: torch.optim.Optimizer | Any = None,
        loss: nn.Module | Any = None,
        metrics: Any = None,
        backend: str = "bigdl",
        config: dict[str, Any] | None = None,
        workers_per_node: int = 1,
        scheduler_creator: Any = None,
        model_dir: str | None = None,
        sync_stats: bool = False,
        use_tqdm: bool = True,
        seed: int | None = 0,
        log_level: int = logging.INFO,
        log_to_driver: bool = True,
    ) -> Estimator:
        """Build an Estimator from a torch model.

        Args:
            model: an ``nn.Module`` or a creator ``f(config) -> nn.Module``. ``None`` makes an
                Estimator that can only ``load`` an entire saved model.
            optimizer: a ``torch.optim.Optimizer`` built on ``model.parameters()`` (rebuilt on each
                worker with the same class, hyper-parameters and param groups) or a creator
                ``f(model, config)``. Optional for inference.
            loss: a loss module (``nn.CrossEntropyLoss()``), a creator ``f(config)``, or a function
                ``f(output, target)``.
            metrics: metric names (``"accuracy"``, ``"top5accuracy"``, ``"binary_accuracy"``,
                ``"mse"``, ``"mae"``, ``"auc"``), Metric objects or functions ``f(pred, target)`` (called
                on torch tensors, the batch's output and its label, as the reference; a function that
                fails on tensors gets numpy arrays).
            backend: ``"bigdl"`` (the default, as in the reference: Spark barrier tasks kept in step by
                Orca's own parameter sync, :mod:`orca.core.sync`, a reduce-scatter + all-gather of the
                flat gradients as in BigDL), ``"ray"`` (Ray actors, torch.distributed gloo) or
                ``"spark"`` (Spark barrier tasks, torch.distributed gloo) or ``"horovod"`` (Ray actors,
                Horovod's gloo all-reduce; needs ``python -m orca.core.horovod_install torch``). All run
                the same steps and give the same weights.
            config: a dict handed to every creator.
            workers_per_node: workers per node; ``batch_size`` is split across all workers.
            scheduler_creator: ``f(optimizer, config)`` returning an LR scheduler, stepped per epoch.
            model_dir: where ``fit(checkpoint_trigger=...)`` writes its checkpoints
                (``load_orca_checkpoint(model_dir)`` reads the newest).
            sync_stats: what ``fit(reduce_results=False)`` gives each worker: ``False`` (the default, as
                the reference) its own ``train_loss``, ``num_samples`` and ``batch_count``; ``True`` the
                stats merged over all workers (exact sums, not per-worker means). ``fit``'s default
                ``reduce_results=True`` always returns the merged stats.
            use_tqdm: show a progress bar on the driver.
            seed: seeds model creation and shuffling on every worker (``None``: unseeded).
            log_level: accepted so the reference's calls run; has no effect (workers log through
                Python logging: set the level of the ``orca`` logger).
            log_to_driver: accepted so the reference's calls run; has no effect (worker output
                reaches the driver with ``init_orca_context(log_output=True)``).

        Returns:
            The Estimator. No worker starts until the first call that needs one.

        Raises:
            ValueError: an unknown backend, or an optimizer instance not built on ``model``.
            ImportError: ``backend="horovod"`` without Horovod built for torch (the message names the
                command that builds it).
            TypeError: a ``model``, ``optimizer`` or ``loss`` of an unsupported type.

        Examples:
            >>> est = Estimator.from_torch(model=nn.Linear(4, 1), optimizer=lambda m, c: torch.optim.SGD(
            ...     m.parameters(), lr=0.1), loss=nn.MSELoss(), backend="spark")  # doctest: +SKIP
            >>> est.fit(df, epochs=2, batch_size=64, feature_cols=["x"], label_cols=["y"])  # doctest: +SKIP
        """
        del log_level, log_to_driver  # the reference's logging switches: see the docstring
        if model is not None:
            check_model(model)
        check_loss(loss)
        spec = {
            "model": model,
            "optimizer": describe_optimizer(optimizer, model),
            "loss": loss,
            "config": dict(config or {}),
            "scheduler_creator": scheduler_creator,
            "seed": seed,
        }
        return cls(spec=spec, backend=backend, workers_per_node=workers_per_node, metrics=torch_metrics(metrics),
                   model_dir=model_dir, sync_stats=sync_stats, use_tqdm=use_tqdm)

    # ------------------------------------------------------------ adapters
    #: a Ray Dataset's feature columns of numbers reach the model as one ``(n, k)`` tensor, as the
    #: reference's (Ray's ``to_torch``) gave them
    stacks_ray_dataset_columns = True

    def extra_adapters(self) -> Sequence[Any]:
        """Accept a ``torch.utils.data.DataLoader`` instance: its dataset, batch size (as the global
        batch size), collate function and shuffle setting go to the workers."""

        def loader_adapter(data: Any) -> DataSource | None:
            from torch.utils.data import DataLoader, RandomSampler

            if not isinstance(data, DataLoader):
                return None
            dataset, bs, collate = data.dataset, data.batch_size or 1, data.collate_fn
            shuffle, drop_last = isinstance(data.sampler, RandomSampler), data.drop_last
            world = self.num_workers

            def creator(config: dict[str, Any], batch_size: int) -> DataLoader:
                return DataLoader(dataset, batch_size=max(1, bs // world), shuffle=shuffle,
                                  collate_fn=collate, drop_last=drop_last)

            return CreatorSource(creator)

        return (loader_adapter,)

    def _require_model(self) -> None:
        if self.spec.get("model") is None and self.get_state() is None:
            raise NotFittedError("this Estimator has no model: pass model=... to from_torch, or load() a saved "
                                 "entire model first.")

    # ------------------------------------------------------------ fit / evaluate / predict
    def fit(self, data: Any, epochs: int = 1, batch_size: int = 32, feature_cols: Any = None,  # type: ignore[override]
            label_cols: Any = None, validation_data: Any = None, callbacks: list[Callback] | None = None,
            max_steps: int | None = None, shuffle: bool | str = True, reduce_results: bool = True,
            validation_freq: int = 1, steps_per_epoch: int | None = None, validation_steps: int | None = None,
            max_failures: int | None = None, skip_non_finite_steps: bool = False, profile: bool = False,
            checkpoint_trigger: Trigger | None = None) -> History:
        """Train on ``data`` for ``epochs`` epochs, data-parallel over the workers; see
        :meth:`orca.core.engine.BaseEstimator.fit` for the arguments Orca shares with every framework.

        Args:
            data: a Spark DataFrame, an XShards, numpy data, a ``DataLoader`` or a data creator
                ``f(config, batch_size)`` returning one.
            callbacks: orca Callbacks (:mod:`orca.torch.callbacks`: the reference's ``before_*``/
                ``after_*`` hooks and ``self.model`` too), at most one :class:`MainCallback` (a custom step).
            max_steps: train this many steps in total over as many epochs as that takes, ``epochs``
                ignored (as the reference): 40 steps of 25-step epochs run 2 epochs, the second 15 steps.
            profile: add each epoch's timings as ``stats["profile"]`` (rank 0's ``mean_train_epoch_s``,
                ``mean_train_batch_s`` and, when it validated, ``mean_validation_s``), as the reference.
            checkpoint_trigger: ``EveryEpoch()`` or ``SeveralIteration(n)``: write a checkpoint into
                ``model_dir`` then (``load_orca_checkpoint(model_dir)`` reads the newest; without
                ``model_dir`` nothing is written, as in the reference, and a warning says so).

        Returns:
            A :class:`History`, one dict per epoch (per-worker lists with ``reduce_results=False``): Orca's
            stats (``train_loss``, ``val_loss``, ``val_<metric>``...) and the reference's validation
            keys (``val_`` + its metric name in lower case, e.g. ``val_top5accuracy``).

        Raises:
            ValueError: more than one MainCallback.
            TypeError: a ``checkpoint_trigger`` that is not an Orca trigger.
        """
        cbs = list(callbacks or [])
        _main_callbacks(cbs, "fit")
        if checkpoint_trigger is not None:
            cbs += self._trigger_checkpoint(checkpoint_trigger)
        if profile:
            cbs.insert(0, _ProfileTimes())
        if max_steps is not None:  # every epoch takes at least one step: the fit stops at max_steps
            check_positive_int("max_steps", max_steps)
            epochs = max_steps
        history = super().fit(data, epochs=epochs, batch_size=batch_size, feature_cols=feature_cols,
                              label_cols=label_cols, validation_data=validation_data, callbacks=cbs,
                              max_steps=max_steps, shuffle=shuffle, reduce_results=reduce_results,
                              validation_freq=validation_freq, steps_per_epoch=steps_per_epoch,
                              validation_steps=validation_steps, max_failures=max_failures,
                              skip_non_finite_steps=skip_non_finite_steps)
        keys = reference_keys(self.metrics)
        for epoch in history:
            for stats in (epoch if isinstance(epoch, list) else [epoch]):
                add_reference_fit_keys(stats, keys)
        return history

    def _trigger_checkpoint(self, trigger: Trigger) -> list[Callback]:
        """The ModelCheckpoint a ``checkpoint_trigger`` stands for, writing into ``model_dir``."""
        if not isinstance(trigger, Trigger):
            raise TypeError(f"checkpoint_trigger must be orca's EveryEpoch() or SeveralIteration(n) "
                            f"(orca.core.engine.callbacks), got {type(trigger).__name__}.")
        if not self.model_dir:
            warn_once("torch.fit(checkpoint_trigger)", f"fit(checkpoint_trigger={trigger!r}) without "
                      "from_torch(model_dir=...): nothing is checkpointed (as in the reference); pass model_dir to "
                      "write checkpoints there.")
            return []
        if trigger.interval is None:
            return [ModelCheckpoint(os.path.join(self.model_dir, "model-{epoch}"))]
        return [ModelCheckpoint(os.path.join(self.model_dir, "model-{iter}"), by_epoch=False,
                                interval=trigger.interval)]

    def evaluate(self, data: Any, batch_size: int = 32, feature_cols: Any = None,  # type: ignore[override]
                 label_cols: Any = None, num_steps: int | None = None, profile: bool = False,
                 reduce_results: bool = True, callbacks: list[Callback] | None = None,
                 ) -> dict[str, Any] | list[dict[str, Any]]:
        """Evaluate the loss and metrics over ``data``, merged exactly over the workers.

        Args:
            data: as ``fit``'s.
            batch_size: the global batch size, split across the workers.
            feature_cols: input columns (DataFrame / pandas XShards).
            label_cols: target columns.
            num_steps: evaluate at most this many batches on each worker (each partition on the
                ``spark`` and ``bigdl`` backends, each actor on ``ray``), as the reference.
            profile: add ``result["profile"]``: ``mean_validation_s`` (a worker's pass) and
                ``mean_eval_fwd_s`` (its mean step), averaged over the workers.
            reduce_results: ``False``: one result per worker, each over that worker's rows only, as the
                reference returned them (on the Spark backends, where each partition is evaluated where
                it lives, a worker's rows are a contiguous run of the partitions, split as evenly as
                the partitions allow).
            callbacks: a :class:`MainCallback` runs the evaluation steps (``on_val_forward``); other
                callbacks have no evaluation hooks in Orca (a warning says so once).

        Returns:
            ``{"val_loss", "val_<metric>", "num_samples"}`` and each metric under the reference's name
            (``"Accuracy"``, ``"MSE"``, a metric function's name) as a 0-d tensor; a list of such
            dicts with ``reduce_results=False``.
        """
        cbs = list(callbacks or [])
        mains = _main_callbacks(cbs, "evaluate")
        if len(cbs) > len(mains):
            warn_once("torch.evaluate(callbacks)", "evaluate(callbacks=...): only a MainCallback runs in evaluate "
                      "(its on_val_forward); Orca's callbacks have no evaluation hooks.", stacklevel=2)
        states = self._evaluate_states(data, batch_size, feature_cols, label_cols, num_steps=num_steps,
                                       profile=profile, callbacks=mains)
        keys = reference_keys(self.metrics)

        def result(part: Sequence[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = add_reference_eval_keys(dict(self._merge_evaluations(part)), keys)
            if profile:
                out["profile"] = _eval_profile(part)
            return out

        if reduce_results:
            return result(states)
        return [result(share) for share in _worker_shares(states, self.num_workers)]

    def predict(self, data: Any, batch_size: int = 32, feature_cols: Any = None,  # type: ignore[override]
                output_cols: Sequence[str] | None = None, profile: bool = False,
                callbacks: list[Callback] | None = None) -> Any:
        """Predict ``data`` where it lives (see :meth:`orca.core.engine.BaseEstimator.predict`).

        Each top-level output of the model (or of the MainCallback's ``on_pred_forward``) is one
        column of a DataFrame result, named by ``output_cols`` (else ``prediction``, or
        ``prediction_<i>``; several outputs of a number or a vector per row and no ``output_cols``
        share one ``prediction`` column of ``array<array<T>>``, the reference's list of vectors as
        arrays):

        - a tensor or array ``(n,)``: a number per row; ``(n, k)`` (``(n, 1)`` too): an ml
          ``DenseVector`` per row, as the reference wrote it (``row.prediction.toArray()``,
          ``pyspark.ml.functions.vector_to_array``); ``(n, k, m, ...)``: nested arrays;
        - a dict ``{key: (n, ...)}``: a struct column with a field per key, each as above (``row.y``,
          ``df.select("prediction.y")``);
        - a tuple or list: one column per element (``None`` elements are left out).

        An XShards of dicts gets the same outputs under ``prediction`` (a dict output as a dict of
        arrays; several outputs as a list), a pandas XShards a column per output (a dict output as
        a column of per-row dicts), numpy data the arrays (a dict of arrays, a list for several).

        Args:
            output_cols: the output columns' names, one per top-level output.
            profile: accepted as in the reference, whose ``predict`` returned the predictions only
                (its timings never reached the caller): no effect.
            callbacks: at most one :class:`MainCallback`; its ``on_pred_forward(runner)`` replaces the
                model's forward in every worker (Spark executors, Ray actors): ``runner.batch`` is the
                batch's list of feature tensors, and the hook sets ``runner.output`` (a tensor or numpy
                array, a dict of them, or a tuple/list of those, each with the batch's rows). It runs
                under ``torch.no_grad()`` with the model in eval mode. Other callbacks have no
                prediction hooks (a warning says so once).

        Raises:
            ValueError: more than one MainCallback; a hook that sets no ``runner.output``, or outputs
                whose rows differ from the batch's (for a DataFrame, found on the driver by a one-row
                probe before any Spark job; elsewhere from the worker, with its traceback).
            TypeError: an output that is not a tensor, an array, a dict or a tuple/list of those.

        Example:
            >>> class Heads(MainCallback):
            ...     def on_pred_forward(self, runner):
            ...         score, parts = runner.model(*runner.batch)
            ...         runner.output = (score.numpy(), {k: v.numpy() for k, v in parts.items()})
            >>> est.predict(df, feature_cols=["f"], output_cols=["score", "parts"],
            ...             callbacks=[Heads()])  # doctest: +SKIP
        """
        del profile  # see the docstring
        mains = _main_callbacks(callbacks, "predict")
        if len(callbacks or []) > len(mains):
            warn_once("torch.predict(callbacks)", "predict(callbacks=...): only a MainCallback runs in predict (its "
                      "on_pred_forward); Orca's other callbacks have no prediction hooks.", stacklevel=2)
        return self._predict_with(data, batch_size, feature_cols, output_cols, mains)

    # ------------------------------------------------------------ the reference's state dict
    def get_state_dict(self) -> dict[str, Any]:
        """The Estimator's state as the reference gave it: ``{"epoch": epochs trained, "models":
        [the model's state dict], "optimizers": [the optimizer's state dict], "schedulers": [...]}``
        (optimizers and schedulers where there are some).

        Raises:
            NotFittedError: there is no model.
        """
        self._require_model()
        state = self.get_state()
        if state is None or "optimizer" not in state and self.spec.get("optimizer") is not None:
            runner = solo_runner(TorchRunner, self.spec, state)
            state = runner.get_state()
        out: dict[str, Any] = {"epoch": self.epochs_trained, "models": [state["model"]]}
        if state.get("optimizer") is not None:
            out["optimizers"] = [state["optimizer"]]
        if state.get("scheduler") is not None:
            out["schedulers"] = [state["scheduler"]]
        return out

    def load_state_dict(self, state_dict: dict[str, Any], blocking: bool = True) -> None:
        """Load a state the reference's ``get_state_dict`` wrote (``{"models": [...], "optimizers": [...],
        "epoch": n}``) or a model's plain state dict; the workers load it before their next call.

        Args:
            state_dict: the state.
            blocking: accepted as in the reference; the driver holds the state, so this returns at once.

        Raises:
            NotFittedError: from_torch had no model to load it into.
            TypeError: ``state_dict`` is not a dict.
        """
        del blocking
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict takes a dict (get_state_dict()'s or a model's state_dict()), got "
                            f"{type(state_dict).__name__}.")
        self._require_model()
        if "models" not in state_dict:
            state_dict = {"models": [state_dict]}
        state: dict[str, Any] = {"model": state_dict["models"][0]}
        for key, ours in (("optimizers", "optimizer"), ("schedulers", "scheduler")):
            if state_dict.get(key):
                state[ours] = state_dict[key][0]
        if "epoch" in state_dict:
            self._epoch = int(state_dict["epoch"])
        self.set_state(state)

    def load_orca_checkpoint(self, path: str, version: int | None = None, prefix: str | None = None) -> None:
        """Load a checkpoint ``fit(checkpoint_trigger=...)`` wrote: ``path`` is the ``model_dir`` (its
        newest checkpoint, or the one of ``version``: the epoch or step number in its name) or a file.

        Args:
            path: the checkpoint directory or file (local or fsspec URL).
            version: the epoch (``EveryEpoch``) or step (``SeveralIteration``) of the checkpoint.
            prefix: accepted as in the reference (the name of its optimizer file); an Orca checkpoint
                is one file holding the model and the optimizer.

        Raises:
            FileNotFoundError: no such checkpoint.
        """
        import fsspec

        del prefix  # see the docstring

        fs, _, (root,) = fsspec.get_fs_token_paths(path)
        if fs.isfile(root):
            self.load_checkpoint(path)
            return
        if version is None:
            self.load_checkpoint(self.latest_checkpoint(path))
            return
        names = [p for p in fs.ls(root, detail=False) if re.findall(r"(\d+)", os.path.basename(p))[-1:] == [str(version)]]
        if not names:
            raise FileNotFoundError(f"no checkpoint of version {version} in {path!r}.")
        protocol = fs.protocol[0] if isinstance(fs.protocol, (list, tuple)) else fs.protocol
        self.load_checkpoint(names[0] if "://" not in path else f"{protocol}://{names[0]}")

    # ------------------------------------------------------------ model I/O
    def get_model(self) -> nn.Module:
        """The trained ``nn.Module`` (a copy on the driver, in eval mode)."""
        self._require_model()
        runner = solo_runner(TorchRunner, self.spec, self.get_state())
        assert isinstance(runner, TorchRunner)
        runner.model.eval()
        return runner.model

    def save_mlflow_model(self, path: str) -> bool:
        """The trained module as an MLflow Model with the ``mlflow.pytorch`` flavour at ``path``, in
        torch.export's ``pt2`` format (a traced program and its weights: nothing is unpickled on
        load), traced on :attr:`input_example`; ``mlflow.pytorch.load_model`` reads it back.
        Needs ``mlflow``.

        Returns:
            True; False without an input example (a data creator's rows are never on the driver).
        """
        if not self.input_example:
            log.warning("no input example (the fit's data was a data creator): the MLflow run gets the "
                        "Orca checkpoint only, not a pytorch-flavoured model")
            return False
        import mlflow.pytorch

        example = [np.ascontiguousarray(a, np.float32) if a.dtype.kind == "f" else a for a in self.input_example]
        mlflow.pytorch.save_model(self.get_model(), path, serialization_format="pt2",
                                  input_example=example[0] if len(example) == 1 else tuple(example),
                                  pip_requirements=[f"torch=={torch.__version__}"])
        return True

    def save(self, path: str, entire: bool = False) -> str:
        """Save the model: a plain state dict (``torch.load(path, weights_only=True)`` opens it), or the
        entire module with ``entire=True``. ``path`` may be local or an fsspec URL.

        Returns:
            ``path``.
        """
        check_writable(path)
        model = self.get_model()
        with writing_file(path, "the model") as fh:  # whole or not at all: never half a file over a good one
            torch.save(model if entire else model.state_dict(), fh)
        return path

    def load(self, path: str, weights_only: bool = True) -> None:
        """Load a state dict written by :meth:`save` (or by plain ``torch.save(model.state_dict())``).

        An entire pickled module needs ``weights_only=False`` (only for files you trust: unpickling can
        run code).

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is not a model :meth:`save` wrote (a damaged or foreign file).
        """
        import fsspec

        require_model_file(path)
        with fsspec.open(path, "rb") as fh, reading_model_file(path):
            obj = torch.load(fh, weights_only=weights_only, map_location="cpu")
        if isinstance(obj, nn.Module):
            self._replace_spec(dict(self.spec, model=obj))  # workers built from the old module stop
            sd = obj.state_dict()
        else:
            sd = obj
        if self.spec.get("model") is None:
            raise NotFittedError("load() of a state dict needs model=... in from_torch to load it into.")
        state = self.get_state()
        if state is None:
            model = build_model(self.spec["model"], self.spec.get("config") or {})
            state = {"model": model.state_dict()}
        self.set_state(dict(state, model=sd))
