"""``ModelCheckpoint``, where the reference's users imported it (``bigdl.orca.learn.pytorch.callbacks.model_checkpoint``)."""

from orca.torch.callbacks import ModelCheckpoint

__all__ = ["ModelCheckpoint"]
