"""The bad-input matrix every framework package runs against its own Estimator.

Each :class:`BadInput` is one common mistake (a misspelled column, NaN in the features, ``epochs=0``,
a damaged checkpoint...) and what must come of it: the exception type, a message that names the
argument (and the offending value) and says how to fix it, raised on the driver before any worker
starts, or, where only a worker can see the mistake (a null or NaN deep in a DataFrame, a DataFrame
that turns out empty), an :class:`~orca.core.engine.errors.OrcaWorkerError` naming the rank and the
column; within seconds, and with nothing left behind (:func:`footprint` / :func:`leftovers`: no new
Ray actor, no running Spark job, no new listening port of this process).

Mix :class:`BadInputConformance` into a framework's conformance test class (next to
:class:`~orca.core.testing.conformance.EstimatorConformance`, whose ``make_estimator(backend)`` hook
and ``backend`` fixture it uses) and set the capability flags that differ:

    class TestTorchConformance(EstimatorConformance, BadInputConformance): ...

Driver-side cases share one Estimator per backend and never start its workers (asserted), so the
matrix is fast; the few worker-side cases share a second one. ``docs/bad-inputs.md`` is the table
of :data:`BAD_INPUTS` and the message each gives, written by :func:`markdown_table` (a test keeps
the two in step).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from orca.core.engine.errors import NotFittedError, OrcaWorkerError
from orca.core.testing.matrix import runs_on, skip_unless_runs_on

# --------------------------------------------------------------------------- nothing left behind


@dataclass(frozen=True)
class Footprint:
    """What this process holds that a failed call could leave behind.

    Attributes:
        actors: ids of the live Ray actors of this process's Ray (empty while Ray is not started).
        ports: ``(host, port)`` this process listens on.
        spark_jobs: ids of the Spark jobs running now.
    """

    actors: frozenset[str] = frozenset()
    ports: frozenset[tuple[str, int]] = frozenset()
    spark_jobs: frozenset[int] = frozenset()


def _live_actors() -> frozenset[str]:
    try:
        import ray
    except ImportError:  # pragma: no cover - the test environments have Ray
        return frozenset()
    if not ray.is_initialized():
        return frozenset()
    from ray._private.state import state  # the GCS table: needs no dashboard

    return frozenset(a for a, info in state.actor_table(None).items() if info.get("State") != "DEAD")


def _listening_ports() -> frozenset[tuple[str, int]]:
    import psutil

    return frozenset((c.laddr.ip, c.laddr.port) for c in psutil.Process(os.getpid()).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN)


def _spark_jobs() -> frozenset[int]:
    from orca.core.context import OrcaContext

    ctx = OrcaContext.active()
    if ctx is None or not ctx.has_spark:
        return frozenset()
    return frozenset(ctx.spark_session().sparkContext.statusTracker().getActiveJobsIds())


def footprint() -> Footprint:
    """This process's live Ray actors, listening ports and running Spark jobs, now."""
    return Footprint(_live_actors(), _listening_ports(), _spark_jobs())


def leftovers(before: Footprint, within_s: float = 10.0) -> list[str]:
    """What appeared since ``before`` and is still there after ``within_s`` (stopping takes a moment).

    Returns:
        One line per leftover (``[]``: nothing was left behind).
    """
    deadline = time.monotonic() + within_s
    while True:
        now = footprint()
        left = [f"Ray actor {a}" for a in sorted(now.actors - before.actors)]
        left += [f"listening port {h}:{p}" for h, p in sorted(now.ports - before.ports)]
        left += [f"running Spark job {j}" for j in sorted(now.spark_jobs)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# --------------------------------------------------------------------------- the cases


@dataclass
class Inputs:
    """What a case's call may use: good data to spoil, and where to write files."""

    x: np.ndarray
    y: np.ndarray
    df: Any
    frames: dict[str, Any]
    tmp: str
    #: the test class instance (its hooks: ``make_estimator``, ``model_path``...) and the backend
    suite: Any = None
    backend: str = ""

    @property
    def xy(self) -> dict[str, np.ndarray]:
        return {"x": self.x, "y": self.y}


@dataclass(frozen=True)
class BadInput:
    """One mistake and what it must give.

    Attributes:
        name: the case id.
        mistake: the mistake in words (the docs table).
        call: ``call(est, inputs)`` makes the mistake.
        raises: the exception type, or the types a framework's own error may have (for worker cases:
            the type the worker raised).
        names: regular expressions the message must match: the argument and the offending value.
        fix: a regular expression for the fix the message gives.
        where: ``"driver"`` (before any worker starts), ``"worker"`` (only a worker can see it: the
            error must be an :class:`OrcaWorkerError` naming the rank) or ``"either"`` (a launcher
            that learns it on the driver, e.g. from a Spark stage that had no task to run, raises
            ``raises`` there; one whose workers see it first names the rank).
        needs: capability flags of the test class that must be true for the case to apply.
        estimator: the Estimator the case calls (see the attribute).
    """

    name: str
    mistake: str
    call: Callable[[Any, Inputs], Any]
    raises: type[BaseException] | tuple[type[BaseException], ...]
    names: tuple[str, ...]
    fix: str
    where: str = "driver"
    needs: tuple[str, ...] = field(default_factory=tuple)
    #: which Estimator the case calls: ``"regressor"`` (``make_estimator``) or ``"classifier"``
    #: (``make_classifier``: 4 inputs, 3 classes, a cross-entropy loss over class indices)
    estimator: str = "regressor"


@dataclass(frozen=True)
class WrongKind:
    """A model, loss or optimizer argument of the wrong kind (see
    :meth:`BadInputConformance.wrong_kind_arguments`).

    Attributes:
        make: ``make(backend)`` builds the Estimator given the wrong argument.
        names: a regular expression the message must match: the argument and the type it got.
        where: ``"driver"`` (the constructor refuses it) or ``"worker"`` (a creator's result: the
            worker that calls it refuses it when ``fit`` starts; an :class:`OrcaWorkerError` whose
            worker raised a ``TypeError``).
    """

    make: Callable[[str], Any]
    names: str
    where: str = "driver"


def _with_nan(a: np.ndarray, value: float = np.nan) -> np.ndarray:
    out = a.copy()
    out.flat[5] = value
    return out


def _class_labels(y: np.ndarray, bad: int | None = None) -> np.ndarray:
    """Class indices 0..2 (the terciles of ``y``), with row 40 set to ``bad`` when given."""
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])).astype(np.int64)
    if bad is not None:
        labels[40] = bad
    return labels


def _xshards(shards: list[Any]) -> Any:
    from orca.core.data import XShards

    return XShards.from_list(shards, backend="local")


def _creator_returning(value: Any) -> Callable[[Any, int], Any]:
    def creator(config: Any, batch_size: int) -> Any:
        return value

    return creator


def _creator_raising(config: Any, batch_size: int) -> Any:
    raise RuntimeError("no data here")


def _fit(est: Any, data: Any, **kw: Any) -> Any:
    kw.setdefault("epochs", 1)
    kw.setdefault("batch_size", 8)
    return est.fit(data, **kw)


def _fit_df(est: Any, df: Any, **kw: Any) -> Any:
    kw.setdefault("feature_cols", ["x"])
    kw.setdefault("label_cols", ["y"])
    return _fit(est, df, **kw)


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def _truncated_checkpoint(est: Any, inp: Inputs) -> str:
    from orca.core.engine.checkpoint import write_checkpoint

    good = os.path.join(inp.tmp, "good.ckpt")
    write_checkpoint(good, 1, {"w": np.ones((4, 3), np.float32)})
    with open(good, "rb") as fh:
        data = fh.read()
    return _write(os.path.join(inp.tmp, "truncated.ckpt"), data[: len(data) // 2])


def _wider(x: np.ndarray) -> np.ndarray:
    """5 features for the 4-input model: the rows with their first feature again."""
    return np.hstack([x, x[:, :1]])


def _truncated_model(est: Any, inp: Inputs) -> Any:
    """``load`` of a model ``est.save`` wrote, each of its files then cut to half its bytes."""
    path = inp.suite.model_path(inp.tmp, "truncated")
    est.save(path)
    for name in inp.suite.model_files(path):
        with open(name, "rb") as fh:
            data = fh.read()
        _write(name, data[: len(data) // 2])
    return est.load(path)


def _foreign_model(est: Any, inp: Inputs) -> Any:
    """``load`` of a text file where the model's files should be."""
    path = inp.suite.model_path(inp.tmp, "notes")
    for name in inp.suite.model_files(path):
        _write(name, b"hello, world\n")
    return est.load(path)


FIT = ("supports_fit",)
SAVE_LOAD = ("supports_save_load",)
MODEL_FIX = r"pass the path the Estimator's save\(\) wrote"
DF_FIX = r"Fix feature_cols/label_cols"
POSITIVE = r"must be a positive int"
#: epochs: a positive int, or (Keras, which counts on from initial_epoch) an int above initial_epoch
EPOCHS = r"must be (a positive int|an int greater than initial_epoch)"
FINITE_FIX = r"Drop or fill them"

BAD_INPUTS: list[BadInput] = [
    # ---------------------------------------------------------------- columns of a DataFrame
    BadInput("missing_feature_column", "a feature column that is not in the DataFrame",
             lambda est, i: _fit_df(est, i.df, feature_cols=["nope"]), ValueError,
             (r"feature column 'nope'", r"columns \["), DF_FIX, needs=FIT),
    BadInput("misspelled_label_column", "a misspelled label column",
             lambda est, i: _fit_df(est, i.df, label_cols=["Y"]), ValueError, (r"label column 'Y'",), DF_FIX,
             needs=FIT),
    BadInput("no_feature_cols", "a DataFrame without feature_cols",
             lambda est, i: _fit_df(est, i.df, feature_cols=None), ValueError, (r"feature_cols",),
             r"give feature_cols=\[", needs=FIT),
    BadInput("no_label_cols", "a DataFrame without label_cols to fit",
             lambda est, i: _fit_df(est, i.df, label_cols=None), ValueError, (r"label_cols",), r"give label_cols=\[",
             needs=FIT),
    BadInput("feature_cols_not_names", "feature_cols=3",
             lambda est, i: _fit_df(est, i.df, feature_cols=3), TypeError, (r"feature_cols", r"got 3"),
             r"a column name or a list of column names", needs=FIT),
    BadInput("string_feature_column", "a string column as a feature",
             lambda est, i: _fit_df(est, i.frames["strings"], feature_cols=["s"]), TypeError,
             (r"feature column 's'", r"string"), r"StringIndexer", needs=FIT + ("refuses_string_features",)),
    BadInput("struct_feature_column", "a nested (struct) column as a feature",
             lambda est, i: _fit_df(est, i.frames["struct"], feature_cols=["st"]), TypeError,
             (r"feature column 'st'", r"struct"), r"VectorAssembler", needs=FIT),
    BadInput("evaluate_without_label_cols", "evaluate a DataFrame without label_cols",
             lambda est, i: est.evaluate(i.df, feature_cols=["x"]), ValueError, (r"label_cols",),
             r"give label_cols=\[", needs=FIT),
    BadInput("predict_missing_feature_column", "predict with a feature column that is not there",
             lambda est, i: est.predict(i.df, feature_cols=["nope"]), ValueError, (r"feature column 'nope'",),
             DF_FIX),
    BadInput("predict_no_feature_cols", "predict a DataFrame without feature_cols",
             lambda est, i: est.predict(i.df), ValueError, (r"feature_cols",), r"give feature_cols=\["),
    # ---------------------------------------------------------------- in-memory arrays and XShards
    BadInput("data_none", "data=None", lambda est, i: est.predict(None), ValueError, (r"data is None",),
             r"pass a Spark DataFrame, an XShards"),
    BadInput("unsupported_type", "a string as data", lambda est, i: est.predict("not data"), TypeError,
             (r"data of type str",), r"pass a Spark DataFrame"),
    BadInput("empty_array", "an array of 0 rows", lambda est, i: _fit(est, {"x": i.x[:0], "y": i.y[:0]}),
             ValueError, (r"data is empty", r"0 rows"), r"pass at least one row", needs=FIT),
    BadInput("predict_empty_array", "predict an array of 0 rows", lambda est, i: est.predict(i.x[:0]),
             ValueError, (r"data is empty",), r"pass at least one row"),
    BadInput("x_y_length_mismatch", "x and y of different lengths", lambda est, i: _fit(est, (i.x, i.y[:-3])),
             ValueError, (r"different numbers of rows", r"\[61, 64\]"), r"the same length", needs=FIT),
    BadInput("no_labels", "fit on features only", lambda est, i: _fit(est, i.x), ValueError,
             (r"data: no labels",), r"'y' key", needs=FIT),
    BadInput("object_dtype_features", "ragged rows (an object array) as features",
             lambda est, i: _fit(est, {"x": np.array([[1.0, 2.0], [3.0]] * 4, dtype=object), "y": i.y[:8]}),
             TypeError, (r"feature #0", r"dtype object"), r"encode it as numbers", needs=FIT),
    BadInput("predict_object_dtype", "predict ragged rows (an object array)",
             lambda est, i: est.predict(np.array([[1.0, 2.0], [3.0]] * 4, dtype=object)), TypeError,
             (r"feature #0|input 'x'", r"dtype object|array of object"), r"encode it as numbers|convert it first"),
    BadInput("nan_in_features", "NaN in the features", lambda est, i: _fit(est, (_with_nan(i.x), i.y)),
             ValueError, (r"feature array #0", r"NaN/Inf", r"row 1\b"), FINITE_FIX, needs=FIT),
    BadInput("inf_in_labels", "Inf in the labels", lambda est, i: _fit(est, (i.x, _with_nan(i.y, np.inf))),
             ValueError, (r"label array #0", r"NaN/Inf", r"row 5\b"), FINITE_FIX, needs=FIT),
    BadInput("nan_in_validation_data", "NaN in the validation features",
             lambda est, i: _fit(est, i.xy, validation_data=(_with_nan(i.x), i.y)), ValueError,
             (r"validation_data", r"NaN/Inf"), FINITE_FIX, needs=FIT),
    BadInput("evaluate_nan_labels", "evaluate labels holding NaN",
             lambda est, i: est.evaluate((i.x, _with_nan(i.y))), ValueError, (r"label array #0", r"NaN/Inf"),
             FINITE_FIX, needs=FIT),
    BadInput("nan_in_xshards", "NaN in an XShards shard",
             lambda est, i: _fit(est, _xshards([{"x": _with_nan(i.x), "y": i.y}])), ValueError,
             (r"feature array #0", r"NaN/Inf"), FINITE_FIX, needs=FIT),
    BadInput("empty_xshards", "an XShards with no shards", lambda est, i: _fit(est, _xshards([])), ValueError,
             (r"empty XShards",), r"at least one shard", needs=FIT),
    BadInput("xshards_of_lists", "an XShards of lists, not dicts or DataFrames",
             lambda est, i: _fit(est, _xshards([[1.0, 2.0]])), TypeError, (r"not list",),
             r"dicts \{'x': \.\.\., 'y': \.\.\.\} or pandas DataFrames", needs=FIT),
    BadInput("mixed_validation_kind", "a DataFrame with in-memory validation_data",
             lambda est, i: _fit_df(est, i.df, validation_data=(i.x, i.y)), ValueError,
             (r"validation_data is in-memory arrays",), r"convert one", needs=FIT + ("refuses_mixed_validation_kinds",)),
    BadInput("data_creator_to_predict", "a data-creator function to predict",
             lambda est, i: est.predict(lambda config, batch_size: None), TypeError, (r"data-creator",),
             r"takes data"),
    # ---------------------------------------------------------------- arguments
    BadInput("batch_size_zero", "batch_size=0", lambda est, i: _fit(est, i.xy, batch_size=0), ValueError,
             (r"batch_size", r"got 0"), POSITIVE, needs=FIT),
    BadInput("batch_size_not_int", "batch_size='32'", lambda est, i: est.predict(i.x, batch_size="32"),
             ValueError, (r"batch_size", r"got '32'"), POSITIVE),
    BadInput("batch_size_below_workers", "batch_size=1 for 2 workers",
             lambda est, i: _fit(est, i.xy, batch_size=1), ValueError, (r"batch_size=1", r"2 workers"),
             r"use batch_size >= number of workers", needs=FIT),
    BadInput("epochs_zero", "epochs=0", lambda est, i: _fit(est, i.xy, epochs=0), ValueError,
             (r"epochs", r"got 0"), EPOCHS, needs=FIT),
    BadInput("epochs_negative", "epochs=-1", lambda est, i: _fit(est, i.xy, epochs=-1), ValueError,
             (r"epochs", r"got -1"), EPOCHS, needs=FIT),
    BadInput("epochs_float", "epochs=1.5", lambda est, i: _fit(est, i.xy, epochs=1.5), ValueError,
             (r"epochs", r"got 1\.5"), EPOCHS, needs=FIT),
    BadInput("shuffle_not_a_mode", "shuffle='sometimes'", lambda est, i: _fit(est, i.xy, shuffle="sometimes"),
             ValueError, (r"shuffle='sometimes'",), r"True .*'full'.*'window'.*False",
             needs=FIT + ("supports_engine_fit_options",)),
    BadInput("batch_size_float", "batch_size=8.0", lambda est, i: est.predict(i.x, batch_size=8.0), ValueError,
             (r"batch_size", r"got 8\.0"), POSITIVE),
    BadInput("validation_freq_zero", "validation_freq=0", lambda est, i: _fit(est, i.xy, validation_freq=0),
             ValueError, (r"validation_freq", r"got 0"), POSITIVE, needs=FIT + ("supports_engine_fit_options",)),
    BadInput("max_failures_negative", "max_failures=-1", lambda est, i: _fit(est, i.xy, max_failures=-1),
             ValueError, (r"max_failures", r"got -1"), r"must be a non-negative int", needs=FIT + ("supports_engine_fit_options",)),
    BadInput("callback_of_wrong_kind", "a callback that is not an orca Callback",
             lambda est, i: _fit(est, i.xy, callbacks=[len]), TypeError, (r"callbacks", r"built-in function len"),
             r"subclass orca\.core\.engine\.callbacks\.Callback|neither a Keras callback nor an orca Callback", needs=FIT + ("supports_engine_fit_options",)),
    BadInput("unknown_backend", "backend='nope' to the Estimator's constructor",
             lambda est, i: i.suite.make_estimator("nope"), ValueError, (r"backend='nope'",), r"use (one of \[)?'\w+'",
             needs=("supports_backend_argument",)),
    BadInput("predict_before_fit_without_a_model", "predict with an Estimator built without a model",
             lambda est, i: i.suite.make_unfitted_estimator(i.backend).predict(i.x), NotFittedError,
             (r"no model",), r"load\(\)|fit", needs=("needs_a_model_to_predict",)),
    BadInput("workers_per_node_above_cores", "more workers per node than the node has CPUs",
             lambda est, i: _with_workers(est, 64, lambda: est.predict(i.x)), ValueError,
             (r"workers_per_node=64",), r"workers_per_node <= \d+", needs=("supports_workers_per_node",)),
    # ---------------------------------------------------------------- checkpoints
    BadInput("load_missing_checkpoint", "load_checkpoint of a file that does not exist",
             lambda est, i: est.load_checkpoint(os.path.join(i.tmp, "missing.ckpt")), FileNotFoundError,
             (r"missing\.ckpt",), r"save_checkpoint|ModelCheckpoint", needs=("supports_checkpoints",)),
    BadInput("load_truncated_checkpoint", "load_checkpoint of a truncated file",
             lambda est, i: est.load_checkpoint(_truncated_checkpoint(est, i)), ValueError,
             (r"truncated\.ckpt", r"damaged"), r"save_checkpoint|ModelCheckpoint", needs=("supports_checkpoints",)),
    BadInput("load_foreign_file", "load_checkpoint of a file that is not a checkpoint",
             lambda est, i: est.load_checkpoint(_write(os.path.join(i.tmp, "notes.txt"), b"hello, world\n")),
             ValueError, (r"notes\.txt", r"not an Orca checkpoint"), r"save_checkpoint|ModelCheckpoint", needs=("supports_checkpoints",)),
    BadInput("save_to_unwritable_path", "save_checkpoint under a path that is a file",
             lambda est, i: est.save_checkpoint(os.path.join(_write(os.path.join(i.tmp, "f"), b""), "m.ckpt")),
             OSError, (r"f/m\.ckpt",), r"writable directory", needs=("supports_checkpoints",)),
    # ---------------------------------------------------------------- the framework's own model files
    BadInput("load_missing_model", "load of a model file that does not exist",
             lambda est, i: est.load(i.suite.model_path(i.tmp, "missing")), FileNotFoundError,
             (r"no saved model", r"missing"), MODEL_FIX, needs=SAVE_LOAD),
    BadInput("load_truncated_model", "load of a model file cut short", _truncated_model, ValueError,
             (r"truncated", r"damaged"), MODEL_FIX, needs=SAVE_LOAD),
    BadInput("load_foreign_model", "load of a file that is not a saved model", _foreign_model, ValueError,
             (r"notes", r"not a model saved by save\(\)"), MODEL_FIX, needs=SAVE_LOAD),
    BadInput("save_model_to_unwritable_path", "save under a path that is a file",
             lambda est, i: est.save(os.path.join(_write(os.path.join(i.tmp, "f"), b""), "m" + i.suite.model_suffix)),
             OSError, (r"f/m",), r"writable directory", needs=SAVE_LOAD),
    # ---------------------------------------------------------------- only a worker sees these
    BadInput("empty_dataframe", "fit an empty DataFrame (df.limit(0))",
             lambda est, i: _fit_df(est, i.df.limit(0)), ValueError, (r"no rows",), r"df\.count\(\) > 0",
             where="either", needs=FIT),
    BadInput("zero_row_partitions_only", "fit an XShards whose shards all have 0 rows",
             lambda est, i: _fit(est, _xshards([{"x": i.x[:0], "y": i.y[:0]}] * 2)), ValueError, (r"no rows",),
             r"df\.count\(\) > 0", where="either", needs=FIT),
    BadInput("null_in_feature_column", "a null in a DataFrame's feature column",
             lambda est, i: _fit_df(est, i.frames["nulls"], feature_cols=["n"]), ValueError,
             (r"column 'n'", r"null"), r"df\.na\.drop", where="either", needs=FIT),
    BadInput("nan_in_feature_column", "NaN in a DataFrame's feature column",
             lambda est, i: _fit_df(est, i.frames["nan"], feature_cols=["n"]), ValueError,
             (r"feature column 'n'", r"NaN/Inf"), FINITE_FIX, where="either", needs=FIT),
    BadInput("data_creator_wrong_type", "a data creator that returns a string, not a loader",
             lambda est, i: _fit(est, _creator_returning("not a loader")), TypeError,
             (r"data creator returned str",), r"return (a|an) ", where="either", needs=FIT + ("supports_data_creator",)),
    BadInput("data_creator_raises", "a data creator that raises",
             lambda est, i: _fit(est, _creator_raising), RuntimeError,
             (r"no data here", r"_creator_raising"), r"Worker traceback", where="either",
             needs=FIT + ("supports_data_creator",)),
    BadInput("feature_width_mismatch", "5 features to a 4-input model",
             lambda est, i: _fit(est, (_wider(i.x), i.y)), (RuntimeError, ValueError), (r"5", r"4"),
             r"Worker traceback|input|shape|size mismatch", where="either", needs=FIT),
    BadInput("label_out_of_range", "a class label beyond the model's classes (label 5 for 3 outputs)",
             lambda est, i: _fit(est, (i.x, _class_labels(i.y, bad=5))), ValueError,
             (r"label 5\b", r"3 outputs"), r"Re-index the labels to 0\.\.2", where="worker",
             needs=FIT + ("supports_class_labels",), estimator="classifier"),
    BadInput("ragged_array_column", "arrays of different lengths in a DataFrame's feature column",
             lambda est, i: _fit_df(est, i.frames["ragged"], feature_cols=["r"]), ValueError,
             (r"column 'r'", r"different lengths"), r"same shape", where="either", needs=FIT),
]


def _with_workers(est: Any, n: int, call: Callable[[], Any]) -> Any:
    """Call with ``est.workers_per_node`` set to ``n`` (as if the constructor had been given it)."""
    before = est.workers_per_node
    est.workers_per_node = n
    try:
        return call()
    finally:
        est.workers_per_node = before


def markdown_table(cases: list[BadInput] | None = None) -> str:
    """The docs table (``docs/bad-inputs.md``): one row per case with where it is caught, the
    exception, and what its message must say (the argument or value, and the fix)."""
    rows = ["| case | mistake | caught | raises | message names | message's fix |", "|---|---|---|---|---|---|"]
    for c in cases or BAD_INPUTS:
        caught = {"driver": "driver", "worker": "worker (names the rank)",
                  "either": "driver, or a worker (names the rank)"}[c.where]
        names = ", ".join(f"`{_cell(n)}`" for n in c.names)
        rows.append(f"| `{c.name}` | {c.mistake} | {caught} | `{_type_names(c.raises)}` | {names} | `{_cell(c.fix)}` |")
    return "\n".join(rows) + "\n"


def _types(raises: type[BaseException] | tuple[type[BaseException], ...]) -> tuple[type[BaseException], ...]:
    return raises if isinstance(raises, tuple) else (raises,)


def _type_names(raises: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    return " or ".join(t.__name__ for t in _types(raises))


def _cell(pattern: str) -> str:
    """A regular expression as readable table text."""
    text = pattern.replace(r"\d+", "N").replace(r"\b", "")
    return re.sub(r"\\(.)", r"\1", text).replace("|", " or ")


DOC_HEADER = """# Bad input: what each mistake gives

Every framework package runs this matrix against its own Estimator
(`orca.core.testing.bad_inputs.BadInputConformance`, mixed into its conformance test class):
torch, Keras, the TF1 graph Estimator (`from_graph`), mxnet, OpenVINO (the training cases do not
apply) and BigDL (no `backend` argument), whose JVM engine
checks a DataFrame's columns in one Spark job on the driver (the cases about Orca's own workers
do not apply to it: `workers_per_node`, callbacks, `validation_freq`, `max_failures`, Orca's
checkpoint files; and it accepts in-memory validation data with a DataFrame).
Each case asserts the exception type, that the message names the argument (or value) and the
fix below, that it is raised on the driver before any worker starts (or, where only a worker
can see the mistake, names the rank), within seconds, and that no Ray actor, running Spark job
or listening port is left behind. A model that does not take the data's width
(`feature_width_mismatch`) is seen by the framework in a worker: the error names the rank and
carries the framework's own words (both widths) and the worker's traceback. In CI a package runs
the worker-side cases on one backend (torch on `spark`, plus `empty_dataframe` and
`nan_in_feature_column` on `bigdl`, where they were found); `ORCA_FULL_MATRIX=1` runs every backend.
This page is generated from the suite
(`orca.core.testing.bad_inputs.markdown_table`); a test fails when the two differ.

Beside the table, each framework lists the model, loss and optimizer arguments it takes, each
given a value of the wrong kind (`WrongKind`): the constructor refuses it with a `TypeError`
naming the argument and the type it got, or, for what a creator returns, the worker that calls
the creator does when `fit` starts (torch: model, loss, optimizer and their creators; Keras:
`model_creator`, `keras_model` and the creator's result; mxnet: `model_creator`, `loss_creator`
and their results; OpenVINO: `model_path`).

`batch_size` larger than the data is not a mistake: the epoch is one smaller batch holding every
row (`test_a_batch_size_above_the_rows_trains_one_smaller_batch_of_every_row`: 64 rows with
`batch_size=1000` give one batch of 64 and move the weights; nothing hangs or is dropped).

Misused lifecycles are harmless: a call after `shutdown` (or two `shutdown`s) starts the workers
again from the state the driver holds and predicts exactly as before; `stop_orca_context()` twice
does nothing the second time; and an Estimator used after its context stopped starts a fresh
local context, predicts as before and trains on from its last epoch (orca-core's
`test_an_estimator_outlives_its_workers_and_its_context`, in a child process: stopping the
context inside the shared test session would stop every other test's context; the lifecycle is
the shared engine's, the same for every framework). A model that
was never given (`from_torch(model=None)`, to `load()` one later) raises `NotFittedError` on
`predict` (`predict_before_fit_without_a_model`; the other frameworks always hold a model).

"""


# --------------------------------------------------------------------------- the mixin



class BadInputConformance:
    """The bad-input matrix as pytest tests (see the module docstring).

    Needs from the class it is mixed into: a ``backend`` fixture and ``make_estimator(backend)``.
    """

    #: capability flags (a case whose ``needs`` is false is skipped)
    supports_fit: bool = True
    refuses_string_features: bool = True
    #: fit takes a data creator ``f(config, batch_size)`` returning the framework's loader
    supports_data_creator: bool = True
    #: a driver-side case must fail within this; a worker-side one within ``worker_case_s``
    #: (generous: a busy CI machine is not a hang)
    driver_case_s: float = 15.0
    worker_case_s: float = 90.0
    #: backends that run the worker-side cases (``None``: all); see
    #: ``EstimatorConformance.launcher_backends`` (``ORCA_FULL_MATRIX=1``: all)
    launcher_backends: tuple[str, ...] | None = None

    #: a classifier over class indices (``make_classifier``) for the label-range case
    supports_class_labels: bool = False
    #: fit takes Orca's engine options: ``callbacks``, ``validation_freq``, ``max_failures``
    supports_engine_fit_options: bool = True
    #: the Estimator takes ``workers_per_node`` (Orca's workers; not an engine of its own)
    supports_workers_per_node: bool = True
    #: ``save_checkpoint`` / ``load_checkpoint`` (Orca's checkpoint files)
    supports_checkpoints: bool = True
    #: a DataFrame with in-memory validation data is refused (Orca's workers read one kind per call)
    refuses_mixed_validation_kinds: bool = True
    #: the constructor takes ``backend=`` (``make_estimator("nope")`` must refuse it)
    supports_backend_argument: bool = True
    #: an Estimator can be built without a model, and ``predict`` then raises ``NotFittedError``
    #: (``make_unfitted_estimator``); most frameworks always have one
    needs_a_model_to_predict: bool = False
    #: ``save(path)`` / ``load(path)`` write and read the framework's own model file, through
    #: ``orca.core.plugin``'s ``check_writable``, ``require_model_file`` and ``reading_model_file``
    #: (``model_path`` / ``model_files`` say where)
    supports_save_load: bool = False
    #: the file name ending ``save`` wants (``".keras"``, ``".xml"``; ``""`` for a TF checkpoint prefix)
    model_suffix: str = ".model"
    #: ``batch_size`` above the rows trains one smaller batch (False: refused on the driver, naming
    #: both numbers, as BigDL's engine trains on full batches only)
    batch_size_above_rows_trains: bool = True
    #: worker-side cases that CI runs on a backend beyond ``launcher_backends`` too, by backend (cases
    #: an issue found on that backend: they stay checked there)
    worker_cases_also_on: dict[str, tuple[str, ...]] = {}

    def make_unfitted_estimator(self, backend: str) -> Any:
        """An Estimator built without a model (needed where ``needs_a_model_to_predict``)."""
        raise NotImplementedError

    def model_path(self, tmp: str, name: str) -> str:
        """The path to give ``save``/``load`` for a model called ``name`` under ``tmp``."""
        return os.path.join(tmp, name + self.model_suffix)

    def model_files(self, path: str) -> list[str]:
        """The files ``load(path)`` reads (the bad-file cases spoil each)."""
        return [path]

    def make_estimator(self, backend: str) -> Any:
        """A fresh Estimator for the 4-input linear task (the conformance class provides it)."""
        raise NotImplementedError

    #: the Estimator takes a model (and maybe a loss and an optimizer): ``wrong_kind_arguments``
    has_model_arguments: bool = False

    def wrong_kind_arguments(self) -> dict[str, WrongKind]:
        """Each model/loss/optimizer argument (or creator result) of the wrong kind, by a short id
        (needed where ``has_model_arguments``)."""
        return {}

    def make_classifier(self, backend: str) -> Any:
        """A fresh Estimator of a 4-input, 3-class model trained with the framework's cross-entropy
        over class indices (needed where ``supports_class_labels``)."""
        raise NotImplementedError

    _bad_estimators: dict[tuple[str, str, str], Any] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def bad_inputs(cls, orca_context: Any, tmp_path_factory: Any) -> Iterator[Inputs]:
        """Good data to spoil (64 rows of the 4-input task) and DataFrames with one bad column each."""
        import pandas as pd

        from orca.core.testing.conformance import regression_arrays

        x, y = regression_arrays(64)
        spark = orca_context.spark_session()

        def frame(**extra: Any) -> Any:
            return spark.createDataFrame(pd.DataFrame({"x": list(x), "y": y, **extra})).repartition(2)

        def column_n(bad: float | None) -> Any:  # pandas would turn a NaN into a null: rows keep it
            rows = [(1.0 if k != 40 else bad, float(t)) for k, t in enumerate(y)]
            return spark.createDataFrame(rows, "n double, y double").repartition(2)

        frames = {
            "strings": frame(s=["a"] * 64),
            "nulls": column_n(None),
            "nan": column_n(float("nan")),
            "ragged": frame(r=[[1.0] * (3 if k == 50 else 4) for k in range(64)]),
            "struct": spark.createDataFrame([((1.0, 2.0), float(t)) for t in y], "st struct<a:double,b:double>, y double"),
        }
        cls._bad_estimators = {}
        yield Inputs(x, y, frame(), frames, str(tmp_path_factory.mktemp("bad_inputs")))
        for est in cls._bad_estimators.values():
            est.shutdown()
        cls._bad_estimators = {}

    def _bad_estimator(self, backend: str, where: str, inputs: Inputs, kind: str = "regressor") -> Any:
        """The Estimator the cases of ``backend`` share: one for the driver-side cases, one for the others,
        whose workers are started first (a predict on good data), as a user's call after a good one
        finds them: the case then runs on live workers, which must survive it (a *cold* start that
        fails stops its workers: orca-torch's test_errors.py checks that), instead of paying a start per
        case."""
        key = (backend, "driver" if where == "driver" else "workers", kind)  # workers never start for the first
        cache = type(self)._bad_estimators
        for other, est in cache.items():  # one worker group at a time on a small machine
            if other != key:
                est.shutdown()
        if key not in cache:
            if kind == "classifier":
                for live in [getattr(type(self), "_shared", None)]:  # the conformance suite's trained one
                    if live is not None:
                        live.shutdown()
                est = self.make_classifier(backend)
            else:
                est = getattr(self, "fresh", self.make_estimator)(backend)
            cache[key] = _engine_up(est)
        est = cache[key]
        if where != "driver" and est.launcher != "spark":  # Spark's barrier tasks start for each call anyway
            est.predict(inputs.x[:8], batch_size=4)  # (re)starts the workers where they live across calls
        return est

    @pytest.mark.timeout(300)
    @pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda c: c.name)
    def test_bad_input_is_refused_clearly(self, case: BadInput, backend: str, bad_inputs: Inputs) -> None:
        for flag in case.needs:
            if not getattr(self, flag):
                pytest.skip(f"{flag} is False for this Estimator")
        if case.where != "driver" and case.name not in self.worker_cases_also_on.get(backend, ()):
            skip_unless_runs_on(backend, self.launcher_backends)
        est = self._bad_estimator(backend, case.where, bad_inputs, case.estimator)
        inputs = replace(bad_inputs, suite=self, backend=backend)
        state_before = est.get_state()
        before = footprint()
        t0 = time.monotonic()
        with pytest.raises(Exception) as info:  # noqa: PT011 - the type is checked below, with the message
            case.call(est, inputs)
        took = time.monotonic() - t0
        exc, msg = info.value, str(info.value)
        if case.where == "driver" or (case.where == "either" and not isinstance(exc, OrcaWorkerError)):
            assert isinstance(exc, case.raises), f"{case.name}: expected {_type_names(case.raises)}, got {exc!r}"
            assert not isinstance(exc, OrcaWorkerError), f"{case.name}: raised by a worker, not the driver: {msg}"
            if case.where == "driver":
                group = getattr(est, "_group", None)
                assert group is None or not group.started, f"{case.name}: workers started before the error"
            assert took < (self.driver_case_s if case.where == "driver" else self.worker_case_s), \
                f"{case.name}: took {took:.1f}s"
        else:
            assert isinstance(exc, OrcaWorkerError), f"{case.name}: expected an OrcaWorkerError, got {exc!r}"
            # an Orca worker names its rank; the Spark tasks that move a DataFrame into Ray have none
            assert (exc.rank is not None and re.search(rf"worker {exc.rank}\b", msg)) or "Spark task" in msg, msg
            assert any(f"{t.__name__}: " in msg for t in _types(case.raises)), \
                f"{case.name}: expected a {_type_names(case.raises)}: {msg}"
            assert took < self.worker_case_s, f"{case.name}: took {took:.1f}s"
        for pattern in case.names:
            assert re.search(pattern, msg), f"{case.name}: the message does not name {pattern!r}: {msg}"
        assert re.search(case.fix, msg), f"{case.name}: the message gives no fix ({case.fix!r}): {msg}"
        left = leftovers(before)
        assert not left, f"{case.name}: left behind {left}"
        _same_state(state_before, est.get_state(), case.name)


    @pytest.mark.timeout(300)
    def test_a_model_loss_or_optimizer_of_the_wrong_kind_is_refused_clearly(self, backend: str,
                                                                            bad_inputs: Inputs) -> None:
        """Every entry of :meth:`wrong_kind_arguments`: a ``TypeError`` naming the argument and what it
        got, from the constructor on the driver (within ``driver_case_s``, no worker started) or, for a
        creator's result, from the worker that calls it when ``fit`` starts; nothing left behind."""
        if not self.has_model_arguments:
            pytest.skip("has_model_arguments is False for this Estimator")
        cases = self.wrong_kind_arguments()
        assert cases, "has_model_arguments: wrong_kind_arguments() must give at least the model's case"
        if not runs_on(backend, self.launcher_backends):  # the worker-side ones start workers: CI tier
            cases = {k: c for k, c in cases.items() if c.where == "driver"}
        for live in [getattr(type(self), "_shared", None), *type(self)._bad_estimators.values()]:
            if live is not None:
                live.shutdown()  # one worker group at a time; they restart from the driver's state
        for key, case in cases.items():
            # a worker-side case builds its Estimator (no creator runs on the driver) and its engine first
            est = _engine_up(case.make(backend)) if case.where == "worker" else None
            before = footprint()
            t0 = time.monotonic()
            with pytest.raises((TypeError, OrcaWorkerError)) as info:
                est = est or case.make(backend)
                try:
                    _fit(est, bad_inputs.xy)
                finally:
                    est.shutdown()
            took, exc, msg = time.monotonic() - t0, info.value, str(info.value)
            if case.where == "driver":
                assert not isinstance(exc, OrcaWorkerError), f"{key}: not refused by the constructor: {msg}"
                assert took < self.driver_case_s, f"{key}: took {took:.1f}s"
            else:
                assert isinstance(exc, OrcaWorkerError) and "TypeError: " in msg, f"{key}: {exc!r}"
            assert re.search(case.names, msg), f"{key}: the message does not name {case.names!r}: {msg}"
            left = leftovers(before)
            assert not left, f"{key}: left behind {left}"


    @pytest.mark.timeout(300)
    def test_a_batch_size_above_the_rows_trains_one_smaller_batch_of_every_row(self, backend: str,
                                                                              bad_inputs: Inputs) -> None:
        """``batch_size=1000`` for 64 rows is not refused: the epoch is one batch of all 64 rows (none
        dropped, no hang), the weights move, and predict of 8 rows with it gives 8 predictions. (An
        engine that trains on full batches only refuses it on the driver, naming both numbers.)"""
        if not self.supports_fit:
            pytest.skip("supports_fit is False for this Estimator")
        if not self.batch_size_above_rows_trains:
            est = self._bad_estimator(backend, "driver", bad_inputs)
            with pytest.raises(ValueError, match=r"batch_size=1000 is more than the 64 rows.*use batch_size <= 64"):
                est.fit(bad_inputs.xy, epochs=1, batch_size=1000)
            return
        skip_unless_runs_on(backend, self.launcher_backends)
        est = self._bad_estimator(backend, "workers", bad_inputs)
        before = est.get_state()
        hist = est.fit(bad_inputs.xy, epochs=1, batch_size=1000)
        stats = hist[-1] if isinstance(hist, list) else hist
        assert (stats["num_samples"], stats["batch_count"]) == (64, 1), stats
        assert np.isfinite(stats["train_loss"] if "train_loss" in stats else stats["loss"]), stats
        with pytest.raises(AssertionError):
            _same_state(before, est.get_state(), "batch_size=1000")
        assert np.asarray(est.predict(bad_inputs.x[:8], batch_size=1000)).shape[0] == 8

    @pytest.mark.timeout(300)
    def test_a_call_after_shutdown_restarts_from_the_driver_state(self, backend: str, bad_inputs: Inputs) -> None:
        """``shutdown`` is not the end of an Estimator: the next call starts workers again from the
        state the driver holds, and predicts exactly as before; a second ``shutdown`` is a no-op."""
        skip_unless_runs_on(backend, self.launcher_backends)
        est = self._bad_estimator(backend, "workers", bad_inputs)  # its workers are up
        before = np.asarray(est.predict(bad_inputs.x[:16], batch_size=8))
        est.shutdown()
        est.shutdown()
        np.testing.assert_array_equal(np.asarray(est.predict(bad_inputs.x[:16], batch_size=8)), before)


def _engine_up(est: Any) -> Any:
    """Start what lives as long as the context (Ray, where ``est``'s backend needs it, and the
    context's holder of Spark-put data) before a footprint is taken; returns ``est``."""
    est.num_workers  # noqa: B018 - starts Ray where the backend needs it
    if est.launcher == "ray":
        from orca.core.data._ray import holder_names

        holder_names()
    return est


def _same_state(a: Any, b: Any, name: str) -> None:
    """The failed call changed nothing the Estimator holds."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{name}: the state changed"
        for k in a:
            _same_state(a[k], b[k], name)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{name}: the state changed"
        for u, v in zip(a, b, strict=True):
            _same_state(u, v, name)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}: the state changed")
    else:
        assert a is b or a == b, f"{name}: the state changed"
