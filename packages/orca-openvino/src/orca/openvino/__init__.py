"""Orca for OpenVINO models: distributed inference on Spark executors or Ray actors.

>>> from orca.openvino import Estimator
>>> est = Estimator.from_openvino(model_path="model.xml")  # doctest: +SKIP
>>> est.predict(df, feature_cols=["image"], batch_size=16)  # doctest: +SKIP

The Estimator is inference-only: ``fit`` and ``evaluate`` raise ``NotImplementedError``.
"""

from __future__ import annotations

from orca.openvino.estimator import Estimator

__version__ = "0.1.0"
__all__ = ["Estimator"]
