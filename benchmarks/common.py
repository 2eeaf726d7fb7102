"""What every torch benchmark measurement shares: the model, the synthetic data, the optimizer and
the plain single-process torch loop that the Estimator and its peers are compared against."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch
from torch import nn

IN, HIDDEN, CLASSES = 784, 512, 10
LR, MOMENTUM = 0.01, 0.9


def make_model(config: dict | None = None) -> nn.Module:
    """An MLP 784-512-512-10: about 0.67 M parameters (2.7 MB of gradients to all-reduce per step)."""
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def make_model_one_thread(config: dict | None = None) -> nn.Module:
    """:func:`make_model` in a worker held to 1 intra-op thread (the quick run's 1x1 configuration,
    which shares a 2-core context with the 2x1 ones; the runner sets its threads before this runs)."""
    torch.set_num_threads(1)
    return make_model(config)


def make_optimizer(model: nn.Module, config: dict | None = None) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def synthetic(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of 784 Gaussian float32 features; labels from a fixed random linear map (learnable)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, IN), dtype=np.float32)
    w = rng.standard_normal((IN, CLASSES), dtype=np.float32)
    y = (x @ w).argmax(1).astype(np.int64)
    return x, y


def native_epochs(x: np.ndarray, y: np.ndarray, batch_size: int, epochs: int, threads: int = 1,
                  seed: int = 0) -> list[dict[str, Any]]:
    """The baseline: a plain single-process torch loop over in-memory tensors, shuffled each epoch,
    with ``torch.set_num_threads(threads)``. Returns per-epoch ``{"epoch_time_s", "num_samples", "loss"}``."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = make_model()
    opt = make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    n = len(xt)
    out = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(n)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = perm[start:start + batch_size]
            xb, yb = xt[idx], yt[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        out.append({"epoch_time_s": time.perf_counter() - t0, "num_samples": n, "loss": total / n})
    return out


def rates(epochs: list[dict[str, Any]], skip_first: bool = True) -> list[float]:
    """Samples/s of each epoch, leaving out the first (warm-up) epoch when there are others."""
    eps = epochs[1:] if skip_first and len(epochs) > 1 else epochs
    return [e["num_samples"] / e["epoch_time_s"] for e in eps]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def first_step_callback(path: str) -> Any:
    """An Orca callback that writes ``time.time()`` to ``path`` after rank 0's first training step
    (how "first call to first step" is measured for the Estimator, as for the peers)."""
    from orca.core.engine.callbacks import Callback

    class FirstStep(Callback):
        def on_batch_end(self, step: int, logs: dict | None = None) -> None:
            if self.rank == 0 and not getattr(self, "_done", False):
                self._done = True
                with open(path, "w") as fh:
                    fh.write(repr(time.time()))

    return FirstStep()


def scale_epochs(scale: int, epochs: int) -> int:
    """Epochs per fit at a data scale: fewer on bigger data (the first is always left out)."""
    return max(2, epochs if scale == 1 else epochs // 2 if scale <= 4 else 2)
