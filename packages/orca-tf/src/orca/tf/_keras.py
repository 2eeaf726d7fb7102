"""What differs between Keras 3 and tf_keras (Keras 2), in one place.

Both flavours are driven the same way: the runner computes the compiled loss under a
``GradientTape``, the gradients are all-reduced, and the compiled optimizer applies them.
Only the names of a few calls differ.
"""

from __future__ import annotations

import importlib
from typing import Any


def is_legacy(model: Any) -> bool:
    """True for a tf_keras (Keras 2) model, False for Keras 3."""
    return any(c.__module__.startswith(("tf_keras", "keras.src.engine", "keras.engine"))
               for c in type(model).__mro__)


def legacy_keras(model: Any = None) -> Any:
    """The Keras 2 package: ``tf_keras``, or ``keras`` itself on TensorFlow <= 2.15 (where it is
    Keras 2, and tf_keras is seldom installed); with ``model``, the one the model comes from."""
    import importlib

    if model is not None:
        return importlib.import_module(type(model).__module__.split(".")[0])
    try:
        import tf_keras
    except ImportError:
        import keras

        if int(keras.__version__.split(".")[0]) < 3:
            return keras
        raise
    return tf_keras


def check_model(model: Any, where: str = "the model creator") -> None:
    """Raise TypeError unless ``model`` is a compiled Keras model (either flavour)."""
    if not (hasattr(model, "trainable_variables") and hasattr(model, "compile") and hasattr(model, "predict")):
        raise TypeError(f"{where} returned {type(model).__name__}; return a compiled keras.Model.")


def is_compiled(model: Any) -> bool:
    """True when ``model.compile(...)`` set an optimizer and a loss."""
    return getattr(model, "optimizer", None) is not None and getattr(model, "loss", None) is not None


def compute_loss(model: Any, x: Any, y: Any, y_pred: Any, sample_weight: Any, training: bool) -> Any:
    """The compiled loss (with regularisation losses) of one batch."""
    if is_legacy(model):
        return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
    return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)


def apply_gradients(model: Any, grads: list[Any], variables: list[Any]) -> None:
    """Let the compiled optimizer apply ``grads`` (already averaged over workers)."""
    if is_legacy(model):
        # gradients are already summed over workers; no strategy is active, nothing to aggregate
        model.optimizer.apply_gradients(zip(grads, variables, strict=True))
    else:
        model.optimizer.apply(grads, variables)


def compiled_metrics(model: Any) -> list[Any]:
    """The compiled metrics (not the loss tracker), built or not."""
    return [m for m in model.metrics if m.name != "loss"]


def optimizer_variables(model: Any) -> list[Any]:
    """The optimizer's state variables (iterations, slots)."""
    opt = model.optimizer
    return list(opt.variables) if not callable(getattr(opt, "variables", None)) else list(opt.variables())


def build_optimizer(model: Any) -> None:
    """Create the optimizer's slot variables now, so its state can be set before the first step."""
    opt = model.optimizer
    if opt is None:
        return
    if is_legacy(model):
        if hasattr(opt, "build"):
            opt.build(model.trainable_variables)
    elif not getattr(opt, "built", False):
        opt.build(model.trainable_variables)


def _override(compile_config: dict[str, Any], legacy: bool, optimizer: Any, metrics: Any) -> dict[str, Any]:
    """``compile_config`` with its optimizer and metrics replaced by ``optimizer``/``metrics`` (if given)."""
    if optimizer is None and metrics is None:
        return compile_config
    flavour = legacy_keras() if legacy else importlib.import_module("keras")
    name = "tf_keras" if legacy else "Keras 3"

    def plain(obj: Any, kind: str, module: Any, base: Any) -> Any:
        if isinstance(obj, str):
            return obj
        if not isinstance(obj, base):
            raise TypeError(f"{kind} must be a name or a {name} {kind} object (the model is a {name} model), got "
                            f"{type(obj).__module__}.{type(obj).__name__}.")
        return module.serialize(obj)

    out = dict(compile_config)
    if optimizer is not None:
        out["optimizer"] = plain(optimizer, "optimizer", flavour.optimizers, flavour.optimizers.Optimizer)
    if metrics is not None:
        if isinstance(metrics, (str, dict)) or not hasattr(metrics, "__iter__"):
            raise TypeError(f"metrics must be a list of metric names or {name} metric objects, got "
                            f"{type(metrics).__name__}.")
        out["metrics"] = [plain(m, "metric", flavour.metrics, flavour.metrics.Metric) for m in metrics]
    return out


def model_to_spec(model: Any, optimizer: Any = None, metrics: Any = None) -> dict[str, Any]:
    """A compiled model as plain data: its config and compile config (JSON) and its weights.

    ``from_keras(keras_model=...)`` ships this, not the model object: the workers rebuild the
    model with :func:`model_from_spec` (no pickled code travels). ``optimizer``/``metrics``
    replace the compiled ones.
    """
    import json

    legacy = is_legacy(model)
    try:
        if legacy:
            config = {"class_name": type(model).__name__, "config": model.get_config()}
        else:
            import keras

            config = keras.saving.serialize_keras_object(model)
        compile_config = model.get_compile_config()
    except (AttributeError, NotImplementedError, TypeError, ValueError) as exc:
        raise ValueError(f"keras_model: the model or its compile configuration cannot be serialized ({exc}); "
                         "pass model_creator= (a function building the model on each worker) instead.") from None
    compile_config = _override(compile_config, legacy, optimizer, metrics)
    try:
        blob = {"model": json.dumps(config), "compile": json.dumps(compile_config)}
    except TypeError as exc:
        raise ValueError(f"keras_model: its configuration is not plain data ({exc}); pass model_creator= "
                         "instead.") from None
    return {**blob, "legacy": legacy, "weights": [w.copy() for w in model.get_weights()]}


def model_from_spec(spec: dict[str, Any], config: dict[str, Any]) -> Any:
    """Rebuild, re-weight and re-compile a model from :func:`model_to_spec` (a model creator)."""
    import json

    if spec["legacy"]:
        model = legacy_keras().models.model_from_config(json.loads(spec["model"]))
    else:
        import keras

        model = keras.saving.deserialize_keras_object(json.loads(spec["model"]))
    model.set_weights(spec["weights"])
    model.compile_from_config(json.loads(spec["compile"]))
    return model
