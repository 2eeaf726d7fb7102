"""Run benchmark modules that follow the ``run(quick: bool) -> list[dict]`` API (``tf_fit.py``,
``tf_peers.py``, ``openvino_predict.py``) in the current environment, each in a fresh process with
a timeout, and write their rows to ``benchmarks/results/<part>.json`` for ``report.py``.

    python benchmarks/run_part.py tf tf_fit tf_peers [--quick]
    python benchmarks/run_part.py openvino openvino_predict --quick

A module that is missing, fails or times out becomes one n/a row saying why, so the merged
table shows it instead of the suite stopping.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import loadavg, row, run_child, write_part

TIMEOUT_S = {True: 600, False: 1500}


def one(module: str, quick: bool, out: str) -> None:
    """Child side: import ``module``, call ``run(quick)``, write its rows to ``out``."""
    rows = importlib.import_module(module).run(quick)
    Path(out).write_text(json.dumps({"rows": list(rows)}, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", nargs="?")
    p.add_argument("modules", nargs="*")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a, _ = p.parse_known_args(argv)  # the suite's other options (e.g. --parts) are not for this part
    if a.one:
        one(a.one, a.quick, a.out)
        return 0
    started, load = time.perf_counter(), loadavg()
    rows, raw = [], {}
    for module in a.modules:
        if not (HERE / f"{module}.py").exists():
            rows.append(row(a.part, f"benchmarks/{module}.py", None, "", target="-",
                            note=f"benchmarks/{module}.py is not written yet"))
            continue
        print(f"  {a.part}: {module}.run(quick={a.quick}) ...", flush=True)
        res = run_child("run_part.py", ["--one", module] + (["--quick"] if a.quick else []), TIMEOUT_S[a.quick])
        raw[module] = {k: v for k, v in res.items() if k != "rows"}
        if "error" in res:
            print(f"      FAILED: {res['error']}", flush=True)
            rows.append(row(a.part, f"benchmarks/{module}.py", None, "", target="-", note=res["error"]))
            continue
        print(f"      {len(res['rows'])} rows ({res['process_s']:.0f} s)", flush=True)
        for r in res["rows"]:
            r.setdefault("part", a.part)
            r.setdefault("source", f"benchmarks/{module}.py")
            rows.append(r)
    out = write_part(a.part, rows, {"quick": a.quick, "modules": a.modules}, raw, started, load)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
