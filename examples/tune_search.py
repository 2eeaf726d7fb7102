"""A hyper-parameter search with Ray Tune over the Orca PyTorch Estimator.

Each trial builds an Estimator from the trial's learning rate, trains it data-parallel on Orca
workers that start inside the trial's placement group, reports every epoch's merged metrics to
Tune and checkpoints through Orca's data-only checkpoint files. The data is made here:
``y = x @ w + 0.25`` with a little noise, 1024 training and 256 validation rows.

    python examples/tune_search.py              # 4 learning rates, 1 worker per trial, 5 epochs
    python examples/tune_search.py --workers 2  # trials of 2 workers: one trial at a time on 2 CPUs

It prints each trial's last validation loss and the best learning rate, and exits with status 1
if the best trial did not learn the function (validation loss above 0.05).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import torch
from torch import nn

from orca.core import init_orca_context, stop_orca_context
from orca.core.tune import orca_trainable, trial_resources
from orca.torch import Estimator

TRUE_W = np.array([1.5, -2.0, 0.5, 3.0], np.float32)
TARGET_VAL_LOSS = 0.05


def make_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    y = (x @ TRUE_W + 0.25 + rng.normal(scale=0.05, size=rows)).astype(np.float32)
    return x, y[:, None]


def run(lrs: tuple[float, ...] = (1e-3, 1e-2, 3e-2, 1e-1), epochs: int = 5, workers: int = 1) -> dict[str, Any]:
    """Search the learning rates ``lrs``; returns every trial's last ``val_loss`` and the best one.

    It starts a local Orca context on Ray and stops it at the end, unless one is running already
    (then it runs there and leaves it running: the package's tests run it so)."""
    from ray import tune

    from orca.core import OrcaContext

    owned = OrcaContext.active() is None
    ctx = init_orca_context(cluster_mode="local", runtime="ray", cores=2)
    ctx.ray_runtime()  # the Ray that Tune runs on

    def make_estimator(config: dict[str, Any]) -> Any:
        return Estimator.from_torch(model=lambda cfg: nn.Linear(4, 1),
                                    optimizer=lambda model, cfg: torch.optim.SGD(model.parameters(), lr=cfg["lr"]),
                                    loss=nn.MSELoss(), config={"lr": config["lr"]}, backend="ray",
                                    workers_per_node=workers, use_tqdm=False)

    try:
        trainable = orca_trainable(make_estimator, make_data(1024, 0), epochs=epochs, batch_size=32,
                                   validation_data=make_data(256, 1))
        tuner = tune.Tuner(tune.with_resources(trainable, trial_resources(workers=workers)),
                           param_space={"lr": tune.grid_search(list(lrs))},
                           tune_config=tune.TuneConfig(metric="val_loss", mode="min"))
        results = tuner.fit()
        trials = {float(r.config["lr"]): float(r.metrics["val_loss"]) for r in results}
        best = results.get_best_result()
        epochs_run = {float(r.config["lr"]): int(r.metrics["training_iteration"]) for r in results}
        return {"val_loss": trials, "best_lr": float(best.config["lr"]), "best_val_loss": float(best.metrics["val_loss"]),
                "epochs": epochs_run}
    finally:
        if owned:
            stop_orca_context()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1, help="Orca workers per trial (default 1)")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    out = run(epochs=args.epochs, workers=args.workers)
    for lr, loss in sorted(out["val_loss"].items()):
        print(f"lr {lr:<6g} val_loss {loss:.5f}")
    print(f"best: lr {out['best_lr']:g}, val_loss {out['best_val_loss']:.5f}")
    if out["best_val_loss"] > TARGET_VAL_LOSS:
        print(f"FAILED: the best val_loss {out['best_val_loss']:.4f} is above {TARGET_VAL_LOSS}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
