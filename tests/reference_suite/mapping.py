"""Our import mapping: where each bigdl-orca 2.x module and name lives in Orca.

The reference's own Estimator tests (``python/orca/test/bigdl/orca/learn/`` in BigDL 2.x) are run
against Orca with only their ``import``/``from`` lines rewritten by this table (``run.py`` does the
rewriting), as issue #36 asks: code written for bigdl-orca must run with only its imports changed.

- :data:`MODULES`: a reference module and the Orca module its names are imported from. A module
  not listed is looked up by its longest listed dotted prefix (``bigdl.orca.learn.pytorch.foo`` ->
  ``orca.torch``). Where Orca has no such module, it maps to the closest Orca module: a name that
  module lacks then fails the test that uses it, and that failure is the measurement.
- :data:`NAMES`: a name that lives under another name or module in Orca.
- :data:`OUTSIDE_ORCA`: prefixes of modules that are not bigdl-orca's (BigDL's dllib): kept as
  written where they are installed (the bigdl environment has dllib), else their names stand for
  "not installed here" and fail the tests that use them.

Nothing here imports Orca: ``run.py`` checks, inside the framework's environment, which mapped
names Orca really has.
"""

from __future__ import annotations

#: reference module -> Orca module (the longest listed dotted prefix of a module decides)
MODULES: dict[str, str] = {
    # the context: init_orca_context, stop_orca_context, OrcaContext
    "bigdl.orca": "orca.core",
    "bigdl.orca.common": "orca.core",
    "bigdl.orca.ray": "orca.core",  # OrcaRayContext: orca.core.OrcaRayContext reads the context's Ray
    # XShards and the readers (the reference's pandas readers are orca.core.data's)
    "bigdl.orca.data": "orca.core.data",
    "bigdl.orca.data.pandas": "orca.core.data",
    "bigdl.orca.data.image": "orca.core.data",
    "bigdl.orca.data.image.utils": "orca.core.data",  # chunks (the parquet schema types are not in Orca)
    "bigdl.orca.data.tf": "orca.tf",  # the TF data path is orca.tf's
    "bigdl.orca.data.tf.data": "orca.tf.data",  # Dataset (from_tensor_slices, map, get_xshards)
    # the Estimators
    "bigdl.orca.learn.pytorch": "orca.torch",
    "bigdl.orca.learn.pytorch.pytorch_metrics": "orca.torch.metrics",
    "bigdl.orca.learn.pytorch.callbacks": "orca.torch.callbacks",
    "bigdl.orca.learn.tf2": "orca.tf",
    "bigdl.orca.learn.tf": "orca.tf",  # the TF 1.15 graph Estimator: orca.tf's from_graph / from_keras
    "bigdl.orca.learn.mxnet": "orca.mxnet",
    "bigdl.orca.learn.openvino": "orca.openvino",
    "bigdl.orca.learn.bigdl": "orca.bigdl",
    # what the Estimators share
    "bigdl.orca.learn": "orca.core.engine",
    "bigdl.orca.learn.metrics": "orca.core.engine.metrics",
    "bigdl.orca.learn.trigger": "orca.core.engine.callbacks",  # no triggers in Orca: the closest module
    "bigdl.orca.learn.optimizers": "orca.torch.optimizers",  # the torch Estimator's; TF has none in Orca
    "bigdl.orca.learn.utils": "orca.core.engine.convert",  # the reference's data conversions
}

#: (reference module, name) -> (Orca module, name): a name Orca has under another name or module
NAMES: dict[tuple[str, str], tuple[str, str]] = {
    # dllib's entry point; a port calls Orca's init_orca_context, which returns the SparkContext
    ("bigdl.dllib.nncontext", "init_nncontext"): ("orca.core", "init_orca_context"),
    # the base class of a user's metric
    ("bigdl.orca.learn.metrics", "Metric"): ("orca.core.engine.metrics", "Metric"),
    ("bigdl.orca.learn.pytorch.pytorch_metrics", "PytorchMetric"): ("orca.torch.metrics", "Metric"),
}

#: module prefixes that are not bigdl-orca's API: kept as written where installed
OUTSIDE_ORCA: tuple[str, ...] = ("bigdl.dllib", "bigdl.friesian", "bigdl.chronos", "bigdl.nano")


def is_reference(module: str) -> bool:
    """Whether ``module`` is one the rewrite handles (bigdl-orca's or BigDL's)."""
    return module == "bigdl" or module.startswith("bigdl.")


def outside_orca(module: str) -> bool:
    """Whether ``module`` belongs to BigDL but not to bigdl-orca (kept as written where installed)."""
    return any(module == p or module.startswith(p + ".") for p in OUTSIDE_ORCA)


def orca_module(module: str) -> str | None:
    """The Orca module a reference module maps to (its longest listed prefix), or None when no
    listed prefix covers it (a module outside bigdl-orca)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        target = MODULES.get(".".join(parts[:end]))
        if target:
            return target
    return None


def orca_name(module: str, name: str) -> tuple[str, str] | None:
    """Where ``from module import name`` comes from in Orca: ``(orca module, name)``, or None for a
    module outside bigdl-orca with no entry in :data:`NAMES`."""
    if (module, name) in NAMES:
        return NAMES[(module, name)]
    if outside_orca(module):
        return None
    target = orca_module(module)
    return (target, name) if target else None
