"""``Callback``, where the reference's users imported it (``bigdl.orca.learn.pytorch.callbacks.base``)."""

from orca.torch.callbacks import Callback

__all__ = ["Callback"]
