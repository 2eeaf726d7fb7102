"""Proof that the layer contracts catch what they forbid (run by ``nox -s lint`` after ``lint-imports``).

Copies the packages' sources into a temporary folder, writes into the copy one forbidden import per
contract (an upward one hidden inside a function, a circle between two XShards forms, a framework
imported by orca-core, a framework package reaching past orca.core's public surfaces), runs
``lint-imports`` on the copy and fails unless every such contract breaks, reporting its own
injected import. Cheap: a text copy and one ``lint-imports`` run (a second or two), no Spark, no Ray.

Usage: ``python packages/orca-core/tests/check_layers.py`` from the repository root, in an
environment with import-linter (the lint session's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "packages" / "orca-core" / "pyproject.toml"

#: contract id -> (file of the copy, code appended to it, what lint-imports must report)
INJECTED = {
    # an upward import hidden inside a function still counts
    "core-layers": ("orca/core/sync/group.py",
                    "\n\ndef _injected() -> None:\n    from orca.core.context import OrcaContext  # noqa: F401\n",
                    "orca.core.sync.group -> orca.core.context"),
    "data-layers": ("orca/core/data/_local.py", "\nfrom orca.core.data import _ray  # noqa: E402,F401\n",
                    "orca.core.data._local -> orca.core.data._ray"),
    "engine-layers": ("orca/core/engine/spark_backend.py",
                      "\n\ndef _injected() -> None:\n    from orca.core.engine import predict  # noqa: F401\n",
                      "orca.core.engine.spark_backend -> orca.core.engine.predict"),
    # (the only circle injected inside orca.core.sync: handshake already imports errors)
    "no-cycles": ("orca/core/sync/errors.py", "\nfrom orca.core.sync import handshake  # noqa: E402,F401\n",
                  "No cycles are allowed in orca.core.sync."),
    "core-imports-no-framework": ("orca/core/codec.py", "\nimport torch  # noqa: E402,F401\n",
                                  "orca.core.codec -> torch"),
    "frameworks-use-public-core": ("orca/torch/__init__.py",
                                   "\nfrom orca.core.engine.feed import Batch as _Batch  # noqa: E402,F401\n",
                                   "orca.torch -> orca.core.engine.feed"),
}


def _copy_sources(dest: Path) -> None:
    """``packages/orca-*/src/orca`` merged into ``dest/orca`` (without caches)."""
    for src in sorted((ROOT / "packages").glob("orca-*/src")):
        shutil.copytree(src / "orca", dest / "orca", dirs_exist_ok=True,
                        ignore=lambda _d, names: [n for n in names if n == "__pycache__" or n.endswith((".pyc", ".so"))])


def _names() -> dict[str, str]:
    """Contract id -> name, as the configuration has them."""
    import tomllib

    contracts = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
    return {c["id"]: c["name"] for c in contracts}


def main() -> int:
    names = _names()
    with tempfile.TemporaryDirectory(prefix="orca-layers-") as tmp:
        copy = Path(tmp)
        _copy_sources(copy)
        for path, code, _said in INJECTED.values():
            with open(copy / path, "a") as f:
                f.write(code)
        lint_imports = Path(sys.executable).with_name("lint-imports")
        env = dict(os.environ, PYTHONPATH=str(copy), COLUMNS="400")  # (wide: no name is wrapped)
        done = subprocess.run([str(lint_imports), "--no-cache", "--no-logo", "--config", str(CONFIG)], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
    report = done.stdout + done.stderr
    failures = [f"contract {cid!r} did not break on the import injected into {path} (expected {said!r})"
                for cid, (path, _code, said) in INJECTED.items()
                if f"{names[cid]} BROKEN" not in report or said not in report]
    failures += [f"contract {cid!r} has no injected import here: add one" for cid in names if cid not in INJECTED]
    if done.returncode != 1 or failures:
        print(report[-6000:], *failures, sep="\n", file=sys.stderr)
        return 1
    print(f"ok: each of the {len(INJECTED)} contracts breaks on its injected import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
