"""The PyTorch Estimator: ``Estimator.from_torch(model=..., optimizer=..., loss=...)``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

import torch
from orca.core.plugin import (
    Backend,
    BaseEstimator,
    CreatorSource,
    DataSource,
    NotFittedError,
    check_writable,
    declare,
    horovod_install_hint,
    reading_model_file,
    require_model_file,
    solo_runner,
    writing_file,
)
from orca.torch._spec import build_model, check_loss, check_model, describe_optimizer
from orca.torch.runner import BigDLTorchRunner, HorovodTorchRunner, TorchRunner
from torch import nn

log = logging.getLogger("orca")


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
                ``"mse"``, ``"mae"``, ``"auc"``), Metric objects or functions ``f(pred, target)``.
            backend: ``"bigdl"`` (the default, as in the reference: Spark barrier tasks kept in step by
                Orca's own parameter sync, :mod:`orca.core.sync`, a reduce-scatter + all-gather of the
                flat gradients as in BigDL), ``"ray"`` (Ray actors, torch.distributed gloo) or
                ``"spark"`` (Spark barrier tasks, torch.distributed gloo) or ``"horovod"`` (Ray actors,
                Horovod's gloo all-reduce; needs ``python -m orca.core.horovod_install torch``). All run
                the same steps and give the same weights.
            config: a dict handed to every creator.
            workers_per_node: workers per node; ``batch_size`` is split across all workers.
            scheduler_creator: ``f(optimizer, config)`` returning an LR scheduler, stepped per epoch.
            model_dir: default directory for checkpoints.
            sync_stats: accepted for compatibility with the reference: stats are always merged
                over all workers (exact sums, not per-worker means), so every worker reports the same.
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
        return cls(spec=spec, backend=backend, workers_per_node=workers_per_node, metrics=metrics,
                   model_dir=model_dir, sync_stats=sync_stats, use_tqdm=use_tqdm)

    # ------------------------------------------------------------ adapters
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
