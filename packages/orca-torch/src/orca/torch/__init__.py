"""Orca for PyTorch: ``from orca.torch import Estimator``; ``Estimator.from_torch(model=..., ...)``."""

from orca.core.engine.callbacks import Callback, EarlyStopping, ModelCheckpoint
from orca.core.engine.metrics import AUC, MAE, MSE, Accuracy, BinaryAccuracy, Top5Accuracy
from orca.torch.estimator import Estimator

__version__ = "0.1.0"

__all__ = ["AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Callback", "EarlyStopping", "Estimator",
           "ModelCheckpoint", "Top5Accuracy", "__version__"]
