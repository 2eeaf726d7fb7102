"""Hyper-parameter search over an Orca Estimator with Ray Tune.

Each trial builds its Estimator from the trial's config, trains it one epoch at a time on Orca
workers that run inside the trial's placement group (so trials never take more CPUs than Tune
gave them), reports every epoch's merged metrics to Tune, and checkpoints through Orca's own
checkpoint files (data only, never a pickle)::

    from ray import tune
    from orca.core import init_orca_context
    from orca.core.tune import orca_trainable, trial_resources
    from orca.torch import Estimator

    init_orca_context(runtime="ray")  # the Ray that Tune runs on

    def make(config):
        return Estimator.from_torch(model=Net(), optimizer=sgd(config["lr"]), loss=nn.MSELoss(),
                                    backend="ray", workers_per_node=1)

    trainable = tune.with_resources(orca_trainable(make, (x, y), epochs=5, batch_size=32,
                                                   validation_data=(x_val, y_val)),
                                    trial_resources(workers=1))
    tuner = tune.Tuner(trainable, param_space={"lr": tune.grid_search([0.01, 0.1])},
                       tune_config=tune.TuneConfig(metric="val_loss", mode="min"))
    best = tuner.fit().get_best_result()

Sizing: a trial holds ``workers x cpus_per_worker`` CPUs for its Orca workers (and a sliver for
the trial itself), so a machine with C CPUs runs ``C // (workers x cpus_per_worker)`` trials at
once; the rest wait in Tune's queue. Only the ``ray`` backend runs inside trials. Data passed to
:func:`orca_trainable` travels to each trial with the trainable (keep it small, or pass a data
creator); Spark DataFrames cannot (a trial has no Spark session).

Needs Ray Tune (``pip install "ray[tune]"``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

#: the CPU share the trial process itself reserves (it only drives its workers)
TRIAL_DRIVER_CPU = 0.01
CHECKPOINT_FILE = "orca.ckpt"


def trial_resources(workers: int = 1, cpus_per_worker: int = 1) -> Any:
    """The Tune resources of a trial whose Estimator runs ``workers`` Orca workers of
    ``cpus_per_worker`` CPUs each: a placement group with a bundle per worker (and a small one for
    the trial itself). Pass it to ``tune.with_resources``.

    Args:
        workers: the Estimator's ``workers_per_node`` (one node: the trial's bundles).
        cpus_per_worker: CPUs (and threads) of each worker.

    Returns:
        A ``ray.tune.PlacementGroupFactory``.

    Raises:
        ValueError: ``workers`` or ``cpus_per_worker`` is not a positive int.
    """
    from ray import tune

    from orca.core.engine.errors import check_positive_int

    check_positive_int("workers", workers)
    check_positive_int("cpus_per_worker", cpus_per_worker)
    return tune.PlacementGroupFactory([{"CPU": TRIAL_DRIVER_CPU}] + [{"CPU": cpus_per_worker}] * workers)


def orca_trainable(make_estimator: Callable[[dict[str, Any]], Any], data: Any, *, epochs: int,
                   batch_size: int = 32, validation_data: Any = None,
                   **fit_kwargs: Any) -> Callable[[dict[str, Any]], None]:
    """A Tune function trainable that trains ``make_estimator(config)`` on ``data``.

    Each trial starts (or joins) an Orca context on the trial's Ray connection, builds the
    Estimator, and fits it one epoch at a time for ``epochs`` epochs; after each it calls
    ``tune.report`` with the epoch's merged stats (``loss``, ``val_loss``, metrics...; exactly the
    History's) and a checkpoint holding ``save_checkpoint``'s file. A trial that Tune restores
    (a failed trial retried, a paused one resumed) loads its last checkpoint and goes on from the
    next epoch.

    Args:
        make_estimator: ``f(config) -> Estimator`` with ``backend="ray"``.
        data: the training data (arrays, an XShards or a data creator), as for ``fit``.
        epochs: epochs per trial.
        batch_size: the global batch size.
        validation_data: evaluated after each epoch (its stats are reported as ``val_*``).
        **fit_kwargs: passed on to ``fit`` (``feature_cols``, ``label_cols``, callbacks...).

    Returns:
        The trainable: ``tune.Tuner(tune.with_resources(trainable, trial_resources(...)), ...)``.

    Raises:
        ValueError: ``epochs`` is not a positive int.
    """
    from orca.core.engine.errors import check_positive_int

    check_positive_int("epochs", epochs)
    # the trials need the Ray CPUs that warm workers of an Estimator shut down here may hold
    from orca.core.context import release_warm_workers

    release_warm_workers()

    def trainable(config: dict[str, Any]) -> None:
        from ray import tune

        from orca.core.context import init_orca_context

        init_orca_context(runtime="ray")  # the trial's own Ray connection ("external" Ray)
        est = make_estimator(config)
        if getattr(est, "backend", "ray") != "ray":
            raise ValueError(f"a Tune trial runs the ray backend only; make_estimator built backend={est.backend!r}.")
        done = 0
        restored = tune.get_checkpoint()
        if restored is not None:
            with restored.as_directory() as folder:
                est.load_checkpoint(os.path.join(folder, CHECKPOINT_FILE))
            done = est.epochs_trained  # the epochs the restored checkpoint had trained
        try:
            for _ in range(done, epochs):
                history = est.fit(data, epochs=1, batch_size=batch_size, validation_data=validation_data,
                                  **fit_kwargs)
                stats = {k: v for k, v in history[-1].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                with tempfile.TemporaryDirectory(prefix="orca-tune-") as folder:
                    est.save_checkpoint(os.path.join(folder, CHECKPOINT_FILE))
                    tune.report(stats, checkpoint=tune.Checkpoint.from_directory(folder))
        finally:
            est.shutdown()

    return trainable
