"""``TensorBoardCallback``, where the reference's users imported it (``bigdl.orca.learn.pytorch.callbacks.tensorboard``)."""

from orca.torch.callbacks import TensorBoardCallback

__all__ = ["TensorBoardCallback"]
