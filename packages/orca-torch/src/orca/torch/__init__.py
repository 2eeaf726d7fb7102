"""Orca for PyTorch: ``from orca.torch import Estimator``; ``Estimator.from_torch(model=..., ...)``."""

from orca.core.plugin import (
    AUC,
    MAE,
    MSE,
    Accuracy,
    BinaryAccuracy,
    EarlyStopping,
    EveryEpoch,
    SeveralIteration,
    Top5Accuracy,
)
from orca.torch._callbacks import Callback, ModelCheckpoint, TensorBoardCallback
from orca.torch._main_callback import MainCallback
from orca.torch.estimator import Estimator
from orca.torch.metrics import process_stats

__version__ = "0.1.0"

__all__ = ["AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Callback", "EarlyStopping", "Estimator", "EveryEpoch",
           "MainCallback", "ModelCheckpoint", "SeveralIteration", "TensorBoardCallback", "Top5Accuracy",
           "__version__", "process_stats"]
