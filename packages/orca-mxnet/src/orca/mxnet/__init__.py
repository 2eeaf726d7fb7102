"""Orca for MXNet: ``from orca.mxnet import Estimator, create_config``.

``Estimator.from_mxnet(config=create_config(...), model_creator=..., loss_creator=...)`` trains
a Gluon model data-parallel on Ray actors (the default, as in the reference) or Spark barrier
tasks, with the gradients all-reduced by Orca's parameter sync (:mod:`orca.core.sync`).
"""

from orca.core.plugin import Callback, EarlyStopping, ModelCheckpoint
from orca.mxnet.estimator import Estimator, create_config
from orca.mxnet.runner import KVInfo

__version__ = "0.1.0"

__all__ = ["Callback", "EarlyStopping", "Estimator", "KVInfo", "ModelCheckpoint", "__version__", "create_config"]
