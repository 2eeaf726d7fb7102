"""Part 1 (and its scale rows): PyTorch training, Orca's backends against Ray Train, TorchDistributor
and a plain torch loop, each configuration in a fresh process with a timeout.

Orca configurations run ``child.py`` (``ray``, ``spark``, ``bigdl``, ``horovod``: a process each in
the full run, one process for the four in the quick run); the peers run ``train_peers.py``.
``horovod`` (Ray actors, gradients all-reduced by Horovod's gloo controller) trains only where
``horovod.torch`` imports; elsewhere its rows say how to install it and carry no number.
Every configuration trains the same MLP on the same synthetic data at each data scale, with the
same global batch and 1 intra-op thread per worker.
"""

from __future__ import annotations

from typing import Any

from harness import median, rates, ratio, row, run_child

ORCA = ("ray", "spark", "bigdl", "horovod")
PEERS = ("ray-train", "torch-distributor")
TIMEOUT_S = 900


def settings(quick: bool) -> dict[str, Any]:
    return {"rows": 1024 if quick else 4096, "scales": [1, 4] if quick else [1, 4, 16], "epochs": 3 if quick else 4,
            "rounds": 1 if quick else 3, "repeats": 1, "batch_size": 128, "workers": 2,
            "one_worker_backends": ["ray"] if quick else ["ray", "spark"], "ddp_reference": not quick,
            # 1 worker vs the plain loop (issue #21): a few per cent to separate, so the full run trains
            # those two at x16 (epochs of seconds, not 0.2 s) for 5 interleaved rounds, each a ratio
            "one_worker_scale": 1 if quick else 16, "one_worker_rounds": 1 if quick else 5,
            "model": "MLP 784-512-512-10, SGD lr 0.01 momentum 0.9, global batch 128",
            "threads_per_worker": 1}


def measure(quick: bool, log: Any = print) -> tuple[list[dict], dict]:
    """Run every configuration; return (rows, raw results)."""
    s = settings(quick)
    common = ["--rows", str(s["rows"]), "--scales", ",".join(map(str, s["scales"])), "--epochs", str(s["epochs"]),
              "--rounds", str(s["rounds"]), "--batch-size", str(s["batch_size"])]
    jobs: list[tuple[str, str, list[str]]] = []
    if quick:  # one process trains the four backends in turn, then ray 1x1 (start-up cold for the first)
        jobs.append(("orca 2x1", "child.py", ["--backend", ",".join(ORCA), "--workers", "2", "--also-one-worker"]))
    else:
        for b in s["one_worker_backends"]:
            jobs.append((f"orca-{b} 1x1", "child.py", ["--backend", b, "--workers", "1", "--native", "--scales",
                                                       str(s["one_worker_scale"]), "--rounds",
                                                       str(s["one_worker_rounds"])]))
        for b in ORCA:
            jobs.append((f"orca-{b} 2x1", "child.py", ["--backend", b, "--workers", "2"]))
    for p in PEERS:
        # quick run: the peers at x1 only (their start-up is most of their time; x1 is what rows compare)
        jobs.append((f"{p} 2x1", "train_peers.py", ["--system", p, "--workers", "2"] + (["--scales", "1"] if quick else [])))
    raw: dict[str, list[dict]] = {}
    for rep in range(s["repeats"]):
        for name, script, args in jobs:
            log(f"  [{rep + 1}/{s['repeats']}] training {name} ...")
            res = run_child(script, common + args, TIMEOUT_S)  # args last: they override common
            log(f"      {_brief(res)} ({res.get('process_s', 0):.0f} s)")
            if name == "orca 2x1":  # several backends in one process: split them up
                for b in ORCA:
                    raw.setdefault(f"orca-{b} 2x1", []).append(res.get(b) or res)
                raw.setdefault("orca-ray 1x1", []).append(res.get("ray-1x1") or res)
            else:
                raw.setdefault(name, []).append(res)
    if s["ddp_reference"]:
        log("  training: plain torch 1 process vs plain DDP 2 processes (machine ceiling) ...")
        raw["ddp"] = [run_child("native_ddp.py", ["--rows", str(s["rows"]), "--epochs", str(s["epochs"]),
                                                  "--rounds", str(s["rounds"])], TIMEOUT_S)]
    return rows_from(raw, s), raw


def _brief(res: dict) -> str:
    if "error" in res:
        return f"FAILED: {res['error']}"
    if "first_step_s" not in res:  # several backends
        return ", ".join(f"{b}: first step {r.get('first_step_s', 0):.1f} s" for b, r in res.items()
                         if isinstance(r, dict))
    return f"first step {res.get('first_step_s', 0):.1f} s"


def _samples(results: list[dict], scale: int, key: str) -> list[float]:
    """Steady-state samples/s of every epoch of ``key`` (orca/native/peer) at ``scale``, all repeats."""
    out: list[float] = []
    for r in results:
        sc = (r.get("scales") or {}).get(str(scale))
        for rnd in (sc or {}).get("rounds", []):
            if key in rnd:
                out += rates(rnd[key])
    return out


def _round_ratios(results: list[dict], scale: int) -> list[float]:
    """Orca's steady-state samples/s over the plain loop's, per round at ``scale`` (both in the same
    process, one after the other), over every repeat."""
    out: list[float] = []
    for r in results:
        for rnd in ((r.get("scales") or {}).get(str(scale)) or {}).get("rounds", []):
            q = ratio(median(rates(rnd.get("orca", []))), median(rates(rnd.get("native", []))))
            if q is not None:
                out.append(q)
    return out


def _status(results: list[dict]) -> str | None:
    """Why a configuration has no numbers (n/a), or None when it has some."""
    ok = [r for r in results if "scales" in r]
    if ok:
        return None
    if any("na" in r for r in results):
        return next(r["na"] for r in results if "na" in r)
    return "; ".join(sorted({r.get("error", "no result") for r in results}))


def rows_from(raw: dict[str, list[dict]], s: dict) -> list[dict]:
    rows: list[dict] = []
    speed: dict[tuple[str, int], float | None] = {}
    notes: dict[str, str | None] = {}
    for name, results in raw.items():
        if name == "ddp":
            continue
        notes[name] = _status(results)
        key = "peer" if name.split()[0] in PEERS else "orca"
        for sc in s["scales"]:
            speed[(name, sc)] = median(_samples(results, sc, key))
    # 1 worker: Orca against the plain loop, interleaved in the same process, round by round
    top = s.get("one_worker_scale", 1)
    for b in s["one_worker_backends"]:
        name = f"orca-{b} 1x1"
        res = raw.get(name, [])
        orca, native = median(_samples(res, top, "orca")), median(_samples(res, top, "native"))
        per_round = _round_ratios(res, top)
        note = notes.get(name) or (f"x{top}: median of {len(per_round)} rounds' ratios (each round: plain loop, "
                                   f"then Orca), spread {min(per_round):.3f}-{max(per_round):.3f}"
                                   if per_round else None)
        rows.append(row("training", f"{name} vs plain torch loop (1 thread), samples/s", orca, "samples/s",
                        median(per_round), ">= 0.97", reference=native, note=note, scale=f"x{top}",
                        round_ratios=per_round))
    # 2 workers: every Orca backend against every peer
    for b in ORCA:
        name = f"orca-{b} 2x1"
        for p in PEERS:
            peer = f"{p} 2x1"
            note = notes.get(name) or (f"{p}: {notes[peer]}" if notes.get(peer) else None)
            rows.append(row("training", f"{name} vs {peer}, samples/s", speed.get((name, 1)), "samples/s",
                            ratio(speed.get((name, 1)), speed.get((peer, 1))), ">= 1.0",
                            reference=speed.get((peer, 1)), note=note))
    # issue #4: the bigdl backend's sync (orca.core.sync) against the ray backend's (gloo)
    bigdl, ray = speed.get(("orca-bigdl 2x1", 1)), speed.get(("orca-ray 2x1", 1))
    rows.append(row("training", "orca-bigdl 2x1 vs orca-ray 2x1 (orca.core.sync vs gloo), samples/s", bigdl,
                    "samples/s", ratio(bigdl, ray), "-", reference=ray))
    # issue #17: Horovod's allreduce (its gloo controller) against the other two syncs, same steps
    hvd, hvd_note = speed.get(("orca-horovod 2x1", 1)), notes.get("orca-horovod 2x1")
    for other, label in (("bigdl", "Horovod vs orca.core.sync"), ("ray", "Horovod vs torch.distributed gloo")):
        ref = speed.get((f"orca-{other} 2x1", 1))
        rows.append(row("training", f"orca-horovod 2x1 vs orca-{other} 2x1 ({label}), samples/s", hvd, "samples/s",
                        ratio(hvd, ref), "-", reference=ref, note=hvd_note or notes.get(f"orca-{other} 2x1")))
    for name in (f"{p} 2x1" for p in PEERS):
        rows.append(row("training", f"{name} (reference), samples/s", speed.get((name, 1)), "samples/s",
                        note=notes.get(name)))
    ddp = (raw.get("ddp") or [{}])[0]
    if "rounds" in ddp:
        nat = [x for rnd in ddp["rounds"] for x in rates(rnd["native"])]
        d2 = [x for rnd in ddp["rounds"] for x in rates(rnd["ddp2"])]
        rows.append(row("training", "plain torch DDP 2x1 vs 2 x plain loop: 2-worker efficiency (machine ceiling)",
                        median(d2), "samples/s", ratio(median(d2), 2 * (median(nat) or 0) or None),
                        reference=median(nat)))
    # start-up: ratio = peer time / Orca time, so >= 1.0 means Orca is no slower
    for metric, label in (("first_step_s", "first call to first training step"),
                          ("process_to_first_step_s", "process start to first training step"),
                          ("first_fit_s", "first fit of one step, wall")):
        for b in ORCA:
            name = f"orca-{b} 2x1"
            orca = median([r.get(metric) for r in raw.get(name, []) if metric in r])
            for p in PEERS:
                peer = f"{p} 2x1"
                pm = "fit_wall_s" if metric == "first_fit_s" else metric
                if metric == "first_fit_s":
                    continue  # the peers' fit runs every epoch: not comparable; Orca's is reported alone below
                other = median([r.get(pm) for r in raw.get(peer, []) if pm in r])
                note = notes.get(name) or notes.get(peer)
                if orca is None and not note and metric == "process_to_first_step_s":
                    note = "quick run: the backends share one process; only the first starts it (full run)"
                rows.append(row("startup", f"{label}: {name} vs {peer}, s", orca, "s", ratio(other, orca),
                                ">= 1.0", reference=other, note=note))
    for name, results in raw.items():
        if name == "ddp":
            continue
        for metric, label in (("context_s", "Orca context + Spark session"), ("ray_s", "Ray started"),
                              ("cluster_s", "cluster (ray.init / Spark session)")):
            v = median([r.get(metric) for r in results if metric in r])
            if v is not None:
                rows.append(row("startup", f"{name}: {label}, s", v, "s"))
    # scale: throughput at x4, x16 against the same configuration at x1
    for name in raw:
        if name == "ddp":
            continue
        for sc in s["scales"]:
            v = speed.get((name, sc))
            if v is None and name.endswith("1x1") and not notes.get(name):
                continue  # trained at one scale only
            rows.append(row("scale", f"training {name}, samples/s", v, "samples/s",
                            ratio(v, speed.get((name, 1))), scale=sc, rows=s["rows"] * sc, note=notes.get(name)))
    return rows
