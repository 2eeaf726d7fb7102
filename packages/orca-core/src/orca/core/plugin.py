"""What a framework package may use of orca-core: the plug-in surface.

A framework package (orca-torch, orca-tf, ...) imports from here, never from orca-core's
modules directly, so orca-core can move its internals without breaking plug-ins. Adding a
framework takes three things (see docs/architecture.md and the numpy toy framework in
orca-core's tests):

1. a :class:`Runner` subclass: build the model, ``train_batch``, ``eval_batch``,
   ``predict_batch``, ``get_state``/``set_state`` (the base class seeds, joins the sync group,
   packs broadcasts and all-reduces, and keeps native loaders in lock-step);
2. an Estimator: a :class:`BaseEstimator` subclass that declares its ``backends`` with
   :func:`declare` and :class:`Backend`, and adds ``get_model``/``save``/``load``;
3. a test module running :class:`orca.core.testing.conformance.EstimatorConformance`.
"""

from orca.core._warn import warn_once, warnings_reset
from orca.core.codec import register_array_type
from orca.core.context import OrcaContext, register_spark_jars
from orca.core.engine.adapters import get_data_source, is_spark_df, is_xshards
from orca.core.engine.backend import Backend, declare
from orca.core.engine.callbacks import (
    Callback,
    EarlyStopping,
    EveryEpoch,
    ModelCheckpoint,
    SeveralIteration,
    Trigger,
)
from orca.core.engine.checkpoint import (
    check_writable,
    reading_model_file,
    require_model_file,
    write_checkpoint,
    writing_file,
)
from orca.core.engine.convert import Part, check_class_indices, check_part, records, shard_to_part
from orca.core.engine.errors import NotFittedError, OrcaWorkerError, check_positive_int
from orca.core.engine.estimator import BaseEstimator, notify_listeners
from orca.core.engine.feed import Batch
from orca.core.engine.history import History
from orca.core.engine.metrics import (
    AUC,
    MAE,
    MSE,
    Accuracy,
    BinaryAccuracy,
    Metric,
    Top5Accuracy,
    make_metrics,
)
from orca.core.engine.runner import Rendezvous, Runner, pack, solo_runner, unpack
from orca.core.engine.sources import ArraySource, CreatorSource, DataFrameSource, DataSource, ShardsSource
from orca.core.engine.tracking import MLflowLogger, hyperparameters
from orca.core.horovod import framework_module as horovod_module
from orca.core.horovod import join as join_horovod
from orca.core.horovod import leave as leave_horovod
from orca.core.horovod_install import install_hint as horovod_install_hint
from orca.core.sync.collective import Collective

__all__ = [
    "AUC", "MAE", "MSE", "Accuracy", "ArraySource", "Backend", "BaseEstimator", "Batch", "BinaryAccuracy",
    "Callback", "Collective", "CreatorSource", "DataFrameSource", "DataSource", "EarlyStopping", "EveryEpoch", "History", "Metric",
    "MLflowLogger", "ModelCheckpoint", "NotFittedError", "OrcaContext", "OrcaWorkerError", "Part", "Rendezvous", "Runner", "SeveralIteration", "ShardsSource",
    "Top5Accuracy", "Trigger", "check_class_indices", "check_part", "check_positive_int", "check_writable", "declare",
    "get_data_source", "horovod_install_hint", "hyperparameters", "horovod_module", "is_spark_df", "join_horovod", "leave_horovod", "is_xshards", "make_metrics", "notify_listeners", "pack", "reading_model_file", "records", "register_array_type",
    "register_spark_jars", "require_model_file", "shard_to_part", "solo_runner", "unpack", "warn_once", "warnings_reset",
    "write_checkpoint", "writing_file",
]
