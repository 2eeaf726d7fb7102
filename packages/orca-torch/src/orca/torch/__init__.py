"""Orca for PyTorch: ``from orca.torch import Estimator``; ``Estimator.from_torch(model=..., ...)``."""

from orca.core.plugin import EarlyStopping, EveryEpoch, SeveralIteration
from orca.torch._callbacks import Callback, ModelCheckpoint, TensorBoardCallback
from orca.torch._main_callback import MainCallback
from orca.torch.estimator import Estimator

# the torch metric classes (callable as the reference's: ``m(preds, targets)``, ``m.compute()``)
from orca.torch.metrics import AUC, MAE, MSE, Accuracy, BinaryAccuracy, Top5Accuracy, process_stats

__version__ = "0.1.0"

__all__ = ["AUC", "MAE", "MSE", "Accuracy", "BinaryAccuracy", "Callback", "EarlyStopping", "Estimator", "EveryEpoch",
           "MainCallback", "ModelCheckpoint", "SeveralIteration", "TensorBoardCallback", "Top5Accuracy",
           "__version__", "process_stats"]
