"""The PyTorch Estimator's callbacks, where the reference's users imported them
(``bigdl.orca.learn.pytorch.callbacks`` -> ``orca.torch.callbacks``)."""

from orca.core.plugin import EarlyStopping
from orca.torch._callbacks import Callback, ModelCheckpoint, RunnerView, TensorBoardCallback
from orca.torch._main_callback import MainCallback

__all__ = ["Callback", "EarlyStopping", "MainCallback", "ModelCheckpoint", "RunnerView", "TensorBoardCallback"]
