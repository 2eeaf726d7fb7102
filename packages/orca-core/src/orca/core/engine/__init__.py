"""Orca's shared engine: adapters, worker groups, loops and the BaseEstimator flow."""

from orca.core.engine.callbacks import Callback, EarlyStopping, ModelCheckpoint, latest_checkpoint
from orca.core.engine.errors import NotFittedError, OrcaWorkerError
from orca.core.engine.estimator import BaseEstimator
from orca.core.engine.feed import Batch, Feed
from orca.core.engine.history import History
from orca.core.engine.metrics import AUC, MAE, MSE, Accuracy, BinaryAccuracy, Metric, Top5Accuracy
from orca.core.engine.runner import Collective, Rendezvous, Runner

__all__ = [
    "AUC", "MAE", "MSE", "Accuracy", "BaseEstimator", "Batch", "BinaryAccuracy", "Callback", "Collective",
    "EarlyStopping", "Feed", "History", "Metric", "ModelCheckpoint", "NotFittedError", "OrcaWorkerError",
    "Rendezvous", "Runner", "Top5Accuracy", "latest_checkpoint",
]
