"""The MXNet Estimator: ``Estimator.from_mxnet(config=..., model_creator=..., loss_creator=...)``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

import mxnet as mx
from mxnet import gluon
from orca.core.plugin import (
    Backend,
    BaseEstimator,
    NotFittedError,
    check_positive_int,
    check_writable,
    declare,
    reading_model_file,
    require_model_file,
    solo_runner,
    writing_file,
)
from orca.mxnet.runner import MXNetRunner, named_params

log = logging.getLogger("orca")


def create_config(
    optimizer: str = "sgd",
    optimizer_params: dict[str, Any] | None = None,
    log_interval: int = 10,
    seed: int | None = None,
    extra_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``config`` of :meth:`Estimator.from_mxnet`, in the reference's shape.

    Args:
        optimizer: an MXNet optimizer name (``"sgd"``, ``"adam"``, ...).
        optimizer_params: its arguments, e.g. ``{"learning_rate": 0.01}`` (default: that).
        log_interval: accepted for compatibility (progress is drawn by the driver's bar).
        seed: seeds MXNet and numpy on every worker.
        extra_config: more keys for your creators.

    Returns:
        A dict handed to every creator.

    Examples:
        >>> create_config(optimizer="adam", optimizer_params={"learning_rate": 0.02})["optimizer"]
        'adam'
    """
    config: dict[str, Any] = {"optimizer": optimizer,
                              "optimizer_params": dict(optimizer_params or {"learning_rate": 0.01}),
                              "log_interval": log_interval}
    if seed is not None:
        config["seed"] = seed
    config.update(extra_config or {})
    return config


class Estimator(BaseEstimator):
    """Distributed training and inference of an MXNet Gluon model on Ray actors or Spark tasks.

    Create it with :meth:`from_mxnet`; then ``fit``, ``evaluate``, ``predict``, ``save``,
    ``load``, ``get_model``. See :class:`orca.core.engine.BaseEstimator` for the shared flow.
    """

    backends = declare(
        Backend("ray", "ray", MXNetRunner, "Ray actors kept in step by orca.core.sync (no parameter servers)"),
        Backend("spark", "spark", MXNetRunner, "Spark barrier tasks kept in step by orca.core.sync"),
    )

    @classmethod
    def from_mxnet(
        cls,
        *,
        config: dict[str, Any] | None = None,
        model_creator: Callable[[dict[str, Any]], gluon.Block],
        loss_creator: Callable[[dict[str, Any]], Any] | gluon.loss.Loss | None = None,
        eval_metrics_creator: Callable[[dict[str, Any]], Any] | None = None,
        validation_metrics_creator: Callable[[dict[str, Any]], Any] | None = None,
        num_workers: int | None = None,
        num_servers: int | None = None,
        runner_cores: int | None = None,
        workers_per_node: int = 1,
        backend: str = "ray",
        model_dir: str | None = None,
        use_tqdm: bool = True,
    ) -> Estimator:
        """Build an Estimator from Gluon creators (the reference's arguments work as written).

        Args:
            config: from :func:`create_config` (optimizer, its parameters, seed, your keys); handed
                to every creator.
            model_creator: ``f(config)`` returning a ``gluon.Block``. Parameters it leaves
                uninitialized are initialized with Xavier (shapes may be deferred to the first batch).
            loss_creator: ``f(config)`` returning a Gluon loss (or the loss itself). Needed to train
                and evaluate.
            eval_metrics_creator: ``f(config)`` returning ``mx.metric`` metric(s) reported by ``fit``
                (and by ``evaluate`` unless ``validation_metrics_creator`` is given). Merged exactly
                over the workers (their sums and counts).
            validation_metrics_creator: ``f(config)`` returning the metrics for validation data.
            num_workers: workers in all (the reference's name); overrides ``workers_per_node`` on a
                single node.
            num_servers: accepted for compatibility: there are no parameter servers (Orca's parameter
                sync, :mod:`orca.core.sync`, all-reduces the gradients between the workers).
            runner_cores: accepted for compatibility; each worker gets its node's CPUs divided by the
                workers on it.
            workers_per_node: workers on each node; ``batch_size`` is the global batch, split across
                all workers.
            backend: ``"ray"`` (Ray actors, the reference's) or ``"spark"`` (Spark barrier tasks).
            model_dir: default directory for checkpoints.
            use_tqdm: show a progress bar on the driver.

        Returns:
            The Estimator. No worker starts until the first call that needs one.

        Raises:
            TypeError: a creator that is not callable.
            ValueError: an unknown backend or a bad worker count.

        Examples:
            >>> def get_model(config):
            ...     net = gluon.nn.HybridSequential()
            ...     net.add(gluon.nn.Dense(10))
            ...     return net
            >>> est = Estimator.from_mxnet(config=create_config(), model_creator=get_model,
            ...                            loss_creator=lambda c: gluon.loss.L2Loss(), num_workers=2)  # doctest: +SKIP
        """
        if not callable(model_creator) or isinstance(model_creator, gluon.Block):
            raise TypeError(f"model_creator must be a function f(config) returning a gluon.Block, got "
                            f"{type(model_creator).__name__}.")
        loss = loss_creator
        if isinstance(loss_creator, gluon.loss.Loss):
            loss = _Const(loss_creator)
        elif loss_creator is not None and not callable(loss_creator):
            raise TypeError(f"loss_creator must be a function f(config) returning a gluon loss, got "
                            f"{type(loss_creator).__name__}.")
        for name, creator in (("eval_metrics_creator", eval_metrics_creator),
                              ("validation_metrics_creator", validation_metrics_creator)):
            if creator is not None and not callable(creator):
                raise TypeError(f"{name} must be a function f(config) returning mxnet metric(s), got "
                                f"{type(creator).__name__}.")
        if num_workers is not None:
            check_positive_int("num_workers", num_workers)
            workers_per_node = num_workers
        del num_servers, runner_cores  # no parameter servers; cores follow the node's share
        spec: dict[str, Any] = {"model_creator": model_creator, "loss_creator": loss,
                                "eval_metrics_creator": eval_metrics_creator,
                                "validation_metrics_creator": validation_metrics_creator,
                                "config": dict(config or create_config())}
        return cls(spec=spec, backend=backend, workers_per_node=workers_per_node, model_dir=model_dir,
                   use_tqdm=use_tqdm)

    def _metric_runner(self) -> MXNetRunner:
        """Merges the workers' Gluon metric states (sums and counts) on the driver; builds nothing."""
        return MXNetRunner(self.spec)

    # ------------------------------------------------------------ model I/O
    def get_model(self) -> gluon.Block:
        """The trained ``gluon.Block`` (a copy built on the driver)."""
        runner = solo_runner(MXNetRunner, self.spec, self.get_state())
        assert isinstance(runner, MXNetRunner)
        return runner.model

    def save_mlflow_model(self, path: str) -> bool:
        """The trained block as an MLflow Model (``pyfunc``: MLflow has no MXNet flavour) at ``path``:
        the block exported by Gluon (a symbol JSON and its parameters, traced on
        :attr:`input_example`; nothing pickled) and read back by ``orca.mxnet._mlflow``, so
        ``mlflow.pyfunc.load_model(uri).predict(x)`` works wherever orca-mxnet is installed.

        Returns:
            True; False (with a warning) for a model Gluon cannot export (not a ``HybridBlock``,
            or more than one input) or without an input example (a data creator's fit).
        """
        import tempfile

        import mlflow.pyfunc

        from orca.mxnet import _mlflow

        net, example = self.get_model(), self.input_example
        if not isinstance(net, gluon.HybridBlock) or not example or len(example) != 1:
            log.warning("the MLflow run gets the Orca checkpoint only: a pyfunc model needs a gluon.HybridBlock "
                        "of one input and a fit on data the driver can sample (not a data creator)")
            return False
        net.hybridize()
        net(mx.nd.array(np.asarray(example[0], np.float32)))  # traces the graph Gluon exports
        with tempfile.TemporaryDirectory(prefix="orca-mxnet-") as tmp:
            net.export(os.path.join(tmp, _mlflow.PREFIX))
            mlflow.pyfunc.save_model(path, loader_module="orca.mxnet._mlflow", data_path=tmp,
                                     pip_requirements=[f"mxnet=={mx.__version__}", "orca-mxnet"])
        return True

    def save(self, path: str) -> str:
        """Write the parameters in MXNet's own format: ``net.load_parameters(path)`` on the model your
        creator builds opens them. ``path`` may be local or an fsspec URL.

        Returns:
            ``path``.
        """

        from orca.mxnet.runner import params_bytes

        check_writable(path)
        params = dict(self.get_state()["params"])
        with writing_file(path, "the model") as fh:  # whole or not at all: never half a file over a good one
            fh.write(params_bytes(params))
        return path

    def load(self, path: str) -> None:
        """Load parameters written by :meth:`save` or by plain ``net.save_parameters(path)``.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is not one :meth:`save` wrote, or its parameters do not fit the model.
        """
        import fsspec

        from orca.mxnet.runner import params_from_bytes

        require_model_file(path)
        with fsspec.open(path, "rb") as fh, reading_model_file(path):
            params = params_from_bytes(fh.read())
        state = super().get_state() or {}
        runner = solo_runner(MXNetRunner, self.spec, None)
        assert isinstance(runner, MXNetRunner)
        runner.set_state({"params": params})  # checks names and shapes here, on the driver
        self.set_state(dict(state, params=params))

    def get_state(self) -> dict[str, Any]:
        """The training state; a fresh model's when nothing was trained or loaded yet."""
        if super().get_state() is None:
            runner = solo_runner(MXNetRunner, self.spec, None)
            assert isinstance(runner, MXNetRunner)
            if not all(p._data is not None for p in named_params(runner.model).values()):
                raise NotFittedError("the model's parameter shapes are not known before it has seen data; fit it "
                                     "(or give its first layers in_units/in_channels) first.")
            return runner.get_state()
        return super().get_state()


class _Const:
    """A picklable ``f(config)`` that returns one object (a loss given as an instance)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, config: dict[str, Any]) -> Any:
        return self.value

