"""Orca's shared engine: data sources, worker groups, loops and the BaseEstimator flow.

Framework packages use :mod:`orca.core.plugin`, the named plug-in surface; users meet the
callbacks, metrics and errors re-exported here.
"""

from orca.core.engine.callbacks import Callback, EarlyStopping, ModelCheckpoint, latest_checkpoint
from orca.core.engine.errors import NotFittedError, OrcaWorkerError
from orca.core.engine.history import History
from orca.core.engine.metrics import AUC, MAE, MSE, Accuracy, BinaryAccuracy, Metric, Top5Accuracy

__all__ = [
    "AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Callback", "EarlyStopping", "History", "Metric",
    "ModelCheckpoint", "NotFittedError", "OrcaWorkerError", "Top5Accuracy", "latest_checkpoint",
]
