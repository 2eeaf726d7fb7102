"""``MainCallback``, where the reference's users imported it (``bigdl.orca.learn.pytorch.callbacks.maincallback``)."""

from orca.torch.callbacks import MainCallback

__all__ = ["MainCallback"]
