"""Reliability figures of the torch Estimator on every backend (docs/reliability.md, issue #14).

For each backend (bigdl, ray, spark; 2 workers, local mode):

- ``detect_stall_s``: from the moment rank 1 stops making progress (a callback sleeps) to the
  driver's TimeoutError, with ``worker_timeout_s`` = 2 s;
- ``detect_kill_s``: from rank 1's SIGKILL of itself mid-fit to the driver's WorkerLostError
  (``max_failures=0``);
- ``recover_s``: how much longer a 3-epoch fit takes when rank 1 is killed in epoch 2 and the fit
  recovers (``max_failures=1``) than the same fit uninterrupted;
- the soak: ``--cycles`` fit/predict/shutdown cycles in this process; processes, threads, open
  files, listening ports and RSS of the driver after the first 2 cycles and after the last.

    python benchmarks/reliability.py [--cycles 50]   (torch environment; writes results/reliability.json)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"


def _callbacks() -> tuple[type, type]:
    from orca.core.engine.callbacks import Callback

    class StallOnce(Callback):
        """Rank 1 writes the time and stops making progress after step 2 of epoch 1."""

        def __init__(self, stamp: str) -> None:
            self.stamp = stamp

        def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
            if self.rank == 1 and step == 2:
                Path(self.stamp).write_text(str(time.time()))
                time.sleep(3600)

    class KillOnce(Callback):
        """Rank 1 writes the time and SIGKILLs itself in epoch 2, once."""

        def __init__(self, stamp: str) -> None:
            self.stamp, self.epoch = stamp, 0

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch

        def on_batch_end(self, step: int, logs: dict[str, Any] | None = None) -> None:
            if self.rank == 1 and self.epoch == 1 and step == 1 and not os.path.exists(self.stamp):
                Path(self.stamp).write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)

    return StallOnce, KillOnce


def _estimator(backend: str) -> Any:
    import torch
    from torch import nn

    from orca.torch import Estimator

    def model(config: dict[str, Any]) -> nn.Module:
        torch.manual_seed(0)
        return nn.Linear(4, 1)

    return Estimator.from_torch(model=model, optimizer=lambda m, c: torch.optim.SGD(m.parameters(), lr=0.05),
                                loss=nn.MSELoss(), backend=backend, workers_per_node=2, use_tqdm=False)


def _probe() -> dict[str, float]:
    import psutil

    me = psutil.Process()
    ports = [c for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.pid == me.pid]
    return {"children": len(me.children(recursive=True)), "threads": me.num_threads(),
            "open_files": me.num_fds(), "listening_ports": len(ports), "rss_mb": me.memory_info().rss / 2**20}


def measure(backend: str, cycles: int, tmp: str) -> dict[str, Any]:
    from orca.core.context import OrcaContext
    from orca.core.engine.errors import WorkerLostError

    stall_cb, kill_cb = _callbacks()
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(64, 4)).astype(np.float32)}
    data["y"] = data["x"].sum(1).astype(np.float32)
    settings = OrcaContext.current().settings
    row: dict[str, Any] = {"backend": backend}

    settings.worker_timeout_s = 2.0
    est = _estimator(backend)
    stamp = os.path.join(tmp, f"stall-{backend}")
    try:
        est.fit(data, epochs=2, batch_size=8, callbacks=[stall_cb(stamp)])
    except TimeoutError:
        row["detect_stall_s"] = time.time() - float(Path(stamp).read_text())
    finally:
        est.shutdown()
        settings.worker_timeout_s = 600.0

    est = _estimator(backend)
    stamp = os.path.join(tmp, f"kill-{backend}")
    try:
        est.fit(data, epochs=3, batch_size=8, callbacks=[kill_cb(stamp)], max_failures=0)
    except WorkerLostError:
        row["detect_kill_s"] = time.time() - float(Path(stamp).read_text())
    finally:
        est.shutdown()

    took = {}
    for kill in (False, True):
        est = _estimator(backend)
        t0 = time.perf_counter()
        try:
            cbs = [kill_cb(os.path.join(tmp, f"recover-{backend}"))] if kill else []
            est.fit(data, epochs=3, batch_size=8, callbacks=cbs, max_failures=1)
        finally:
            est.shutdown()
        took[kill] = time.perf_counter() - t0
    row["fit_s"], row["recover_s"] = took[False], took[True] - took[False]

    soak = []
    for i in range(cycles):
        est = _estimator(backend)
        est.fit(data, epochs=1, batch_size=16)
        est.predict(data["x"], batch_size=16)
        est.shutdown()
        if i in (1, cycles - 1):
            time.sleep(2)  # killed actors and finished tasks release their resources
            soak.append(_probe())
    row["soak_cycles"] = cycles
    row["soak_after_2"], row["soak_after_all"] = soak[0], soak[-1]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--backends", default="bigdl,ray,spark")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from orca.core.context import init_orca_context, stop_orca_context

    init_orca_context(cluster_mode="local", cores=2, memory="2g")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend in args.backends.split(","):
                rows.append(measure(backend, max(2, args.cycles), tmp))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        stop_orca_context()
    print(f"\n{'backend':8} {'stall->error s':>15} {'kill->error s':>14} {'fit s':>6} {'recovery +s':>12} "
          f"{'children':>9} {'threads':>8} {'fds':>5} {'ports':>6} {'RSS MB':>12}")
    for r in rows:
        a, b = r["soak_after_2"], r["soak_after_all"]
        print(f"{r['backend']:8} {r.get('detect_stall_s', float('nan')):15.1f} {r.get('detect_kill_s', float('nan')):14.1f} "
              f"{r['fit_s']:6.1f} {r['recover_s']:12.1f} {a['children']:>4}->{b['children']:<4} "
              f"{a['threads']:>3}->{b['threads']:<4} {a['open_files']:>2}->{b['open_files']:<3} "
              f"{a['listening_ports']:>2}->{b['listening_ports']:<3} {a['rss_mb']:5.0f}->{b['rss_mb']:<5.0f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "reliability.json").write_text(json.dumps({"rows": rows, "cycles": args.cycles}, indent=2))


if __name__ == "__main__":
    main()
