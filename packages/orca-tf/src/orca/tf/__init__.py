"""Orca for TensorFlow 2 / Keras models: ``from orca.tf import Estimator``.

``Estimator.from_keras(model_creator=...)`` trains a Keras 3 or tf_keras model data-parallel
on Ray actors or Spark barrier tasks, kept in step over a tf.distribute
MultiWorkerMirroredStrategy. TensorFlow is imported when the Estimator is first used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Estimator"]


def __getattr__(name: str) -> Any:
    if name == "Estimator":  # lazy: importing orca.tf does not import TensorFlow
        from orca.tf.estimator import Estimator

        return Estimator
    raise AttributeError(f"module 'orca.tf' has no attribute {name!r}")
