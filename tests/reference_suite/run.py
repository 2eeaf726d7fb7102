"""Run the reference's own Estimator tests against Orca, with only their import lines mapped.

The tests stay in the reference (BigDL 2.x, ``python/orca/test/bigdl/orca/learn/``): nothing of
them is kept in this repository. For one suite this script copies the suite's test files (with the
``__init__.py`` and ``conftest.py`` files above them, and the reference's ``resources/orca/learn``
data they read) from a clone of the reference into a temporary folder, rewrites their
``import``/``from`` lines by :mod:`mapping`, runs pytest there and reports each test's outcome.

    python tests/reference_suite/run.py --reference PATH --suite mxnet [--json out.json] [-- PYTEST ARGS]

``PATH`` is a clone of intel-analytics/BigDL-2.x: a bare git directory or a checkout (its ``HEAD``
is read). Run it inside the suite's framework environment: ``nox -s "reference_suite(mxnet)" --
--reference PATH`` (noxfile.py). Test failures are the measurement, so the exit code is 0 whenever
the run itself worked.

How a line is rewritten (every other line is kept byte for byte; line numbers do not move):

- ``from bigdl.orca.learn.pytorch import Estimator`` -> ``from orca.torch import Estimator``;
- a name the mapped Orca module does not have is bound to a stand-in that raises ``NotInOrca``
  (naming the reference's name and the Orca module looked in) when the test uses it, so a test
  fails where it needs the name and the other tests of the file still run;
- a module outside bigdl-orca (BigDL's dllib) is kept as written where it is installed, else its
  names are stand-ins raising ``NotInstalledHere``;
- ``import bigdl.orca.data.pandas`` (no alias) binds ``bigdl`` to a namespace in which
  ``bigdl.orca.data.pandas`` is the mapped Orca module, so ``bigdl.orca.data.pandas.read_csv(...)``
  calls Orca's ``read_csv``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mapping  # noqa: E402  (this folder is not a package: run.py runs as a script)

#: the reference's test tree (its learn/ folder holds the Estimator tests)
TEST_ROOT = "python/orca/test/bigdl/orca"
LEARN = f"{TEST_ROOT}/learn"
RESOURCES = f"{TEST_ROOT}/resources/orca/learn"

#: suite -> (the nox framework environment it runs in, its test files under learn/)
SUITES: dict[str, tuple[str, tuple[str, ...]]] = {
    "mxnet": ("mxnet", ("ray/mxnet/test_mxnet_gluon.py", "ray/mxnet/test_mxnet_gluon_multiple_input.py",
                        "ray/mxnet/test_mxnet_spark_xshards.py", "ray/mxnet/test_mxnet_symbol.py")),
    "openvino": ("openvino", ("bigdl/test_estimator_openvino.py",)),
    "pytorch": ("torch", ("ray/pytorch/test_estimator_ray_backend.py", "spark/test_pytorch_estimator.py",
                          "test_pytorch_basic.py")),
    # the ray/ctx tests attach to a Ray cluster started beforehand (``ray start --head --port 6379``
    # in the reference's CI): run_suite starts one (ray_head_for)
    "pytorch_ray_ctx": ("torch", ("ray/ctx/test_pytorch_ray_runtime.py", "ray/ctx/test_pytorch_ray_dataset.py")),
    # the PyTorch Estimator's "bigdl" backend (torch run in BigDL's JVM through jep)
    "pytorch_bigdl": ("torch", ("jep/test_pytorch_estimator_for_spark.py", "jep/test_pytorch_estimator_for_dataframe.py",
                                "jep/test_pytorch_estimator_for_dataloader.py",
                                "jep/test_pytorch_estimator_for_spark_creator.py",
                                "jep/test_pytorch_estimator_for_save_load.py")),
    "torch_metrics": ("torch", ("test_metrics.py",)),
    "tf2": ("tf", ("ray/tf/test_tf2estimator_ray_backend.py", "spark/test_tf2_estimator.py", "test_tf2_basic.py")),
    "tf2_ray_ctx": ("tf", ("ray/ctx/test_tf2_ray_runtime.py", "ray/ctx/test_tf2_ray_dataset.py")),
    # the TF 1.15 Estimator (from_graph / from_keras on BigDL's JVM)
    "tf1": ("tf", ("bigdl/test_estimator_for_spark.py", "bigdl/test_estimator_keras_for_spark.py")),
    "bigdl": ("bigdl", ("bigdl/test_estimator_for_bigdl.py",)),
}

ORCA_GAP = "Orca's gap"
NO_PROMISE = "needs what no user-facing API promises"
UNREAD = "unclassified"

#: (pattern in a failure's error line or traceback, cause, kind); the first match decides
CAUSES: tuple[tuple[str, str, str], ...] = (
    (r"maybe_download|urlopen|URLError|Name or service not known|name resolution|Network is unreachable"
     r"|Max retries exceeded|sourceforge", "downloads a file (no network here)", NO_PROMISE),
    (r"NotInOrca: ([\w.]+)", "Orca has no `{0}`", ORCA_GAP),
    (r"NotInstalledHere: ([\w.]+)", "needs BigDL dllib (`{0}`), not installed here", NO_PROMISE),
    (r"No module named '(bigdl[\w.]*)'", "needs BigDL (`{0}`), not installed here", NO_PROMISE),
    (r"No module named '(torchvision|mmcv|horovod)", "needs {0}, not installed here", NO_PROMISE),
    (r"tf\.layers|module 'tensorflow' has no attribute '(layers|placeholder|Session)'|tf\.compat\.v1",
     "TF 1 graph API (tf.layers/placeholder) removed from TF 2.21", NO_PROMISE),
    (r"\.weights\.h5|must end in `?\.keras|filepath` (provided|must)", "Keras 3's checkpoint file-name rules",
     NO_PROMISE),
    (r"Py4JJavaError|JavaPackage|'JavaObject'|py4j\.protocol", "reaches into the JVM (dllib internals)", NO_PROMISE),
    (r"Failed: Timeout", "timed out", UNREAD),
)

MISSING_MODULE = "_reference_missing"
#: written next to the copied tests: the stand-ins that rewritten imports bind (part of this runner)
MISSING_SOURCE = '''"""Stand-ins for names Orca lacks (written by tests/reference_suite/run.py)."""
import types


class NotInOrca(ImportError):
    """The reference's name has no counterpart in the Orca module it maps to."""


class NotInstalledHere(ImportError):
    """A module outside bigdl-orca (BigDL's dllib) that this environment does not have."""


def missing(reference, looked_in, installed_here=True):
    error = NotInOrca if installed_here else NotInstalledHere
    text = (f"{reference}: not in {looked_in}" if installed_here
            else f"{reference}: BigDL's module is not installed in this environment")

    def fail(*_args, **_kwargs):
        raise error(text)

    class _Meta(type):
        def __getattr__(cls, name):
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            fail()

        def __call__(cls, *args, **kwargs):
            fail()

    class Missing(metaclass=_Meta):
        def __init_subclass__(cls, **kwargs):
            fail()

    Missing.__name__ = Missing.__qualname__ = reference.rsplit(".", 1)[-1]
    return Missing


def bind(root, dotted, module):
    """Return ``root`` (a namespace, made when None) in which the dotted path after its first
    part is ``module``: ``bind(None, "bigdl.orca.data.pandas", m).orca.data.pandas is m``."""
    root = root if root is not None else types.SimpleNamespace()
    node = root
    parts = dotted.split(".")[1:]
    for part in parts[:-1]:
        if not hasattr(node, part):
            setattr(node, part, types.SimpleNamespace())
        node = getattr(node, part)
    setattr(node, parts[-1], module)
    return root
'''


# --------------------------------------------------------------------------- reading the reference


class Reference:
    """Files of the reference at one commit: a bare git directory, or a checkout (its HEAD)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path).resolve()
        if (self.path / "objects").is_dir() and (self.path / "HEAD").is_file():
            self.git_dir = self.path
        elif (self.path / ".git").exists():
            self.git_dir = self.path / ".git"
        else:
            raise SystemExit(f"--reference {path}: not a git clone of BigDL-2.x (bare or checked out)")
        self.git = shutil.which("git") or "git"
        self.commit = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run([self.git, f"--git-dir={self.git_dir}", *args], check=True, capture_output=True,
                              text=True).stdout

    def files(self, folder: str) -> list[str]:
        """Paths of every file under ``folder`` at HEAD."""
        return [p for p in self._git("ls-tree", "-r", "--name-only", "HEAD", folder).splitlines() if p]

    def read(self, path: str) -> bytes:
        return subprocess.run([self.git, f"--git-dir={self.git_dir}", "show", f"HEAD:{path}"], check=True,
                              capture_output=True).stdout


# --------------------------------------------------------------------------- rewriting imports


@dataclass
class Rewrite:
    """One rewritten import line: what the reference wrote and what the test runs instead."""

    file: str
    line: int
    reference: str
    orca: str
    missing: list[str] = field(default_factory=list)


class Resolver:
    """Answers, inside the framework's environment, whether Orca (or BigDL) has a mapped name."""

    def __init__(self) -> None:
        self._modules: dict[str, object | None] = {}

    def module(self, name: str) -> object | None:
        if name not in self._modules:
            try:
                self._modules[name] = importlib.import_module(name)
            except Exception:  # noqa: BLE001  (a module that does not import counts as absent)
                self._modules[name] = None
        return self._modules[name]

    def has(self, module: str, name: str) -> bool:
        mod = self.module(module)
        if mod is None:
            return False
        try:
            if hasattr(mod, name):
                return True
        except Exception:  # noqa: BLE001  (a lazy attribute that fails to load is absent)
            return False
        return self.module(f"{module}.{name}") is not None


def _from_line(node: ast.ImportFrom, resolver: Resolver) -> tuple[list[str], list[str]]:
    """Statements for ``from <reference module> import ...`` and the names Orca lacks."""
    module = node.module or ""
    found: dict[str, list[str]] = {}
    stand_ins: list[str] = []
    missing: list[str] = []
    for alias in node.names:
        bound = alias.asname or alias.name
        if alias.name == "*":
            target = mapping.orca_module(module)
            if mapping.outside_orca(module) or target is None:
                found.setdefault(module, []).append("*")
            else:
                found.setdefault(target, []).append("*")
            continue
        where = mapping.orca_name(module, alias.name)
        if where is None:  # outside bigdl-orca: keep as written where installed
            if resolver.has(module, alias.name):
                found.setdefault(module, []).append(alias.name if bound == alias.name else f"{alias.name} as {bound}")
            else:
                stand_ins.append(f"{bound} = _orca_missing({module + '.' + alias.name!r}, {module!r}, False)")
                missing.append(f"{module}.{alias.name}")
            continue
        target, name = where
        if resolver.has(target, name):
            found.setdefault(target, []).append(name if bound == name else f"{name} as {bound}")
        else:
            stand_ins.append(f"{bound} = _orca_missing({module + '.' + alias.name!r}, {target!r})")
            missing.append(f"{module}.{alias.name}")
    statements = [f"from {target} import {', '.join(names)}" for target, names in found.items()]
    if stand_ins:
        statements += [f"from {MISSING_MODULE} import missing as _orca_missing", *stand_ins]
    return statements, missing


def _import_line(node: ast.Import, resolver: Resolver) -> tuple[list[str], list[str]]:
    """Statements for ``import bigdl...`` (with or without ``as``) and the modules Orca lacks."""
    statements: list[str] = []
    missing: list[str] = []
    for alias in node.names:
        if not mapping.is_reference(alias.name):
            statements.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
            continue
        outside = mapping.outside_orca(alias.name)
        target = alias.name if outside else mapping.orca_module(alias.name)
        if target is None or resolver.module(target) is None:
            missing.append(alias.name)
            statements.append(f"from {MISSING_MODULE} import missing as _orca_missing")
            stand_in = f"_orca_missing({alias.name!r}, {target!r}, {not outside})"
            if alias.asname:
                statements.append(f"{alias.asname} = {stand_in}")
            else:
                statements += [f"from {MISSING_MODULE} import bind as _orca_bind",
                               f"bigdl = _orca_bind(globals().get('bigdl'), {alias.name!r}, {stand_in})"]
        elif outside:
            statements.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
        elif alias.asname:
            statements.append(f"import {target} as {alias.asname}")
        else:
            statements += [f"import {target}", f"from {MISSING_MODULE} import bind as _orca_bind",
                           f"bigdl = _orca_bind(globals().get('bigdl'), {alias.name!r}, {target})"]
    return statements, missing


def rewrite(source: str, file: str, resolver: Resolver) -> tuple[str, list[Rewrite]]:
    """``source`` with each import of a ``bigdl`` module rewritten by :mod:`mapping` (one logical
    line for one: the rewritten statement takes the first line, the rest of a multi-line import is
    left blank, so every other line keeps its number)."""
    lines = source.splitlines(keepends=True)
    done: list[Rewrite] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and mapping.is_reference(node.module or ""):
            statements, missing = _from_line(node, resolver)
        elif isinstance(node, ast.Import) and any(mapping.is_reference(a.name) for a in node.names):
            statements, missing = _import_line(node, resolver)
        else:
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if first != last or lines[first][:node.col_offset].strip() or lines[first][node.end_col_offset or 0:].strip():
            if lines[first][:node.col_offset].strip() or lines[last][node.end_col_offset or 0:].strip():
                raise SystemExit(f"{file}:{node.lineno}: an import shares its line with other code; extend run.py")
        original = "".join(lines[first:last + 1]).strip()
        indent = lines[first][:node.col_offset]
        lines[first] = indent + "; ".join(statements) + "\n"
        for i in range(first + 1, last + 1):
            lines[i] = "\n"
        done.append(Rewrite(file, node.lineno, original, "; ".join(statements), missing))
    return "".join(lines), sorted(done, key=lambda r: r.line)


# --------------------------------------------------------------------------- running a suite


def materialise(reference: Reference, files: tuple[str, ...], root: Path, resolver: Resolver) -> list[Rewrite]:
    """Copy ``files`` (under learn/), their packages' ``__init__.py``/``conftest.py`` and the
    reference's resources/orca/learn data into ``root`` (learn/ and resources/ side by side, as in the
    reference, so the tests' relative resource paths hold), rewriting the imports of the Python files."""
    present = set(reference.files(LEARN))
    wanted: list[str] = []
    for file in files:
        folder = Path(file).parent
        dirs = [Path(*folder.parts[:i]) for i in range(len(folder.parts) + 1)]
        for d in dirs:
            for helper in ("__init__.py", "conftest.py"):
                path = str(Path(LEARN) / d / helper)
                if path in present and path not in wanted:
                    wanted.append(path)
        wanted.append(f"{LEARN}/{file}")
    rewrites: list[Rewrite] = []
    for path in wanted:
        relative = Path("learn") / Path(path).relative_to(LEARN)
        text = reference.read(path).decode()
        text, done = rewrite(text, str(relative), resolver)
        rewrites += done
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    for path in reference.files(RESOURCES):
        target = root / "resources" / Path(path).relative_to(f"{TEST_ROOT}/resources")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(reference.read(path))
    (root / f"{MISSING_MODULE}.py").write_text(MISSING_SOURCE)
    (root / "pytest.ini").write_text("[pytest]\n")  # the root: pytest looks no further up
    return rewrites


def count_tests(source: str) -> int:
    """Test functions in a test file (module-level ``test_*`` and methods of its classes), for a
    file that fails to collect: parametrisation is not expanded."""
    tree = ast.parse(source)
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            count += 1
        elif isinstance(node, ast.ClassDef):
            count += sum(1 for n in node.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test"))
    return count


def _error_line(element: ET.Element) -> str:
    """The exception line of a junit ``failure``/``error``: its message's first line (with the
    first error line below a bare "Traceback" heading, as a worker's error wraps one), or, for a
    collection or setup error, the traceback's last ``E   SomeError: ...`` line."""
    message = element.get("message") or ""
    if message and message != "collection failure" and not message.startswith("failed on"):
        lines = message.splitlines()
        first = lines[0]
        if first.rstrip().endswith("(most recent call last):"):
            inner = next((ln.strip() for ln in lines[1:] if re.match(r"^\s*[\w.]*(Error|Exception)\b", ln)), "")
            first = f"{first} ... {inner}"
        return first[:400]
    body = [ln[1:].strip() for ln in (element.text or "").splitlines() if ln.startswith("E ")]
    errors = [ln for ln in body if re.match(r"^[\w.]+(Error|Exception|Exit|Failed|Timeout|InOrca|InstalledHere)\b", ln)]
    return ((errors or body or [message])[-1])[:400]


def classify(error: str, text: str) -> tuple[str, str]:
    """``(cause, kind)`` of a failure from :data:`CAUSES` (its error line first, then its traceback)."""
    for haystack in (error, text):
        for pattern, cause, kind in CAUSES:
            match = re.search(pattern, haystack)
            if match:
                if match.groups() and match.group(1) and "{0}" in cause:
                    return cause.format(match.group(1)), kind
                return cause, kind
    return "read the error", UNREAD


def parse_junit(path: Path) -> list[dict[str, str]]:
    """One record per junit test case: its id, file, outcome, error line and the failure's cause.
    A file that fails to collect is one case with an empty classname (``collected`` False)."""
    tests: list[dict[str, str]] = []
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314  (written by our own pytest run)
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, error, cause, kind = "passed", "", "", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is None:
                continue
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            error = _error_line(element) if tag != "skipped" else (element.get("message") or "")[:400]
            if tag != "skipped":
                cause, kind = classify(error, element.text or "")
            break
        collected = bool(classname)
        tests.append({"id": f"{classname}::{name}" if collected else name, "file": case.get("file", ""),
                      "collected": collected, "outcome": outcome if collected else "not collected",
                      "error": error, "cause": cause, "kind": kind})
    return tests


#: the Ray address the reference's ray/ctx tests attach to (``init_orca_context(runtime="ray", address=...)``)
RAY_CTX_PORT = 6379


@contextlib.contextmanager
def ray_head_for(suite: str) -> Iterator[dict[str, str]]:
    """For a ``*_ray_ctx`` suite, a real two-node Ray cluster on 127.0.0.1 whose head listens on
    :data:`RAY_CTX_PORT` (as the reference's CI started one with ``ray start --head``), for the
    length of the run; yields the environment a driver attaching to it needs (its auth token).
    Other suites get no cluster and no variables."""
    if not suite.endswith("_ray_ctx"):
        yield {}
        return
    from orca.core.testing.clusters import ray_cluster

    with ray_cluster(num_cpus_head=2, num_cpus_worker=2, object_store_mb=512, port=RAY_CTX_PORT) as cluster:
        print(f"Ray cluster for {suite}: head at {cluster.address}", flush=True)
        yield dict(cluster.env)


def run_suite(reference: Reference, suite: str, pytest_args: list[str], keep: bool) -> dict:
    """Materialise, rewrite and run one suite; return its report (counts, tests, rewrites)."""
    _, files = SUITES[suite]
    started = datetime.datetime.now(datetime.UTC)
    root = Path(tempfile.mkdtemp(prefix=f"reference-{suite}-")) / "reference_tests"
    root.mkdir()
    resolver = Resolver()
    rewrites = materialise(reference, files, root, resolver)
    junit = root.parent / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=600", "-rA", "--tb=short", "--continue-on-collection-errors",
               f"--junitxml={junit}", "-o", "junit_family=xunit1", *(f"learn/{f}" for f in files), *pytest_args]
    print("+", " ".join(command), f"(in {root})", flush=True)
    # Spark's and Ray's worker processes import the stand-ins of missing names from the copy too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    with ray_head_for(suite) as ray_env:
        proc = subprocess.run(command, cwd=root, env={**env, **ray_env}, check=False)
    tests = parse_junit(junit) if junit.is_file() else []
    # a file that did not collect: its test functions count as not collected, with its error
    uncollected = {t["file"]: count_tests((root / t["file"]).read_text()) for t in tests
                   if not t["collected"] and t["file"] and (root / t["file"]).is_file()}
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    counts["not collected"] = sum(uncollected.values())
    counts["total"] = sum(counts.values())
    report = {"suite": suite, "environment": SUITES[suite][0], "reference_commit": reference.commit,
              "started": started.isoformat(timespec="seconds"), "pytest_exit": proc.returncode,
              "minutes": round((datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60, 1),
              "counts": counts, "uncollected": uncollected, "tests": tests,
              "rewrites": [asdict(r) for r in rewrites]}
    if not keep:
        shutil.rmtree(root.parent, ignore_errors=True)
    else:
        print(f"kept {root}")
    return report


def table(reports: list[dict]) -> str:
    """The Markdown table of the suites' counts."""
    cols = ("passed", "failed", "error", "skipped", "not collected", "total")
    out = ["| suite | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    out += [f"| {r['suite']} | " + " | ".join(str(r["counts"][c]) for c in cols) + " |" for r in reports]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=os.environ.get("ORCA_REFERENCE_REPO"),
                        help="a clone of intel-analytics/BigDL-2.x, bare or checked out ($ORCA_REFERENCE_REPO)")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), required=True)
    parser.add_argument("--json", help="write the report here (default: reference-suite-<suite>.json in the cwd)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder of the copied tests")
    args = parser.parse_args(argv)
    if not args.reference:
        parser.error("--reference PATH (or $ORCA_REFERENCE_REPO): a clone of intel-analytics/BigDL-2.x")
    reference = Reference(args.reference)
    reports = [run_suite(reference, suite, pytest_args, args.keep) for suite in args.suite]
    for report in reports:
        by_cause: dict[str, int] = {}
        for t in report["tests"]:  # a file that did not collect weighs its test functions
            if t["outcome"] in ("failed", "error", "not collected"):
                key = f"{t['kind']}: {t['cause']}"
                weight = report["uncollected"].get(t["file"], 1) if t["outcome"] == "not collected" else 1
                by_cause[key] = by_cause.get(key, 0) + weight
        report["causes"] = dict(sorted(by_cause.items(), key=lambda kv: -kv[1]))
        out = Path(args.json or f"reference-suite-{report['suite']}.json")
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"\n{report['suite']}: {report['minutes']} min, report in {out}")
        for key, n in report["causes"].items():
            print(f"  {n:3d}  {key}")
    print("\n" + table(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
