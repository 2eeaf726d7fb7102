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


def eager() -> Any:
    """A context in which TensorFlow executes eagerly, also in a process that turned eager
    execution off (TF1 code under ``tf.compat.v1.disable_v2_behavior()``): Orca's own driver-side
    Keras work (merging metric states) runs there, as on the workers."""
    from tensorflow.python.eager import context

    return context.eager_mode()


def graph_mode_model(model: Any, state: dict[str, Any] | None) -> Any:
    """``model`` (a tf_keras model built in graph mode) given ``state``'s weights and optimizer
    state through the Keras session, as TF1 code reads a model."""
    if state is None:
        return model
    model.set_weights(state["weights"])
    opt, values = getattr(model, "optimizer", None), state.get("optimizer")
    if opt is not None and values and hasattr(opt, "_create_all_weights"):
        opt._create_all_weights(model.trainable_variables)  # slots exist once the optimizer has stepped
        if len(opt.weights) == len(values):
            opt.set_weights(values)
    return model


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

    v1 = "v1" in compile_config  # (a model compiled with eager execution off: see _v1_compile_args)
    out = dict(compile_config["v1"] if v1 else compile_config)
    if optimizer is not None:
        base = (flavour.optimizers.Optimizer, getattr(getattr(flavour.optimizers, "legacy", None), "Optimizer", ()))
        out["optimizer"] = plain(optimizer, "optimizer", flavour.optimizers, base)
        out["legacy_optimizer"] = ".legacy." in type(optimizer).__module__
    if metrics is not None:
        if isinstance(metrics, (str, dict)) or not hasattr(metrics, "__iter__"):
            raise TypeError(f"metrics must be a list of metric names or {name} metric objects, got "
                            f"{type(metrics).__name__}.")
        out["metrics"] = [plain(m, "metric", flavour.metrics, flavour.metrics.Metric) for m in metrics]
    if v1:
        return {"v1": out}
    out.pop("legacy_optimizer", None)
    return out


def _model_config(model: Any) -> dict[str, Any]:
    """The model's architecture as plain data (Keras 3's serialized object, or tf_keras' config)."""
    if is_legacy(model):
        return {"class_name": type(model).__name__, "config": model.get_config()}
    import keras

    return keras.saving.serialize_keras_object(model)


def model_to_spec(model: Any, optimizer: Any = None, metrics: Any = None, uncompiled: bool = False) -> dict[str, Any]:
    """A compiled model as plain data: its config and compile config (JSON) and its weights.

    ``from_keras(keras_model=...)`` ships this, not the model object: the workers rebuild the
    model with :func:`model_from_spec` (no pickled code travels). ``optimizer``/``metrics``
    replace the compiled ones. ``uncompiled``: a model that is not compiled is shipped as it is
    (rebuilt uncompiled: it predicts; a ``compile_args_creator`` compiles it for training).
    """
    import json

    legacy = is_legacy(model)
    bare = uncompiled and not is_compiled(model)
    try:
        config = _model_config(model)
        compile_config = None if bare else model.get_compile_config()
        if compile_config is None and legacy and not bare:  # compiled with eager execution off: TF1's training_v1
            compile_config = {"v1": _v1_compile_args(model)}
    except (AttributeError, NotImplementedError, TypeError, ValueError) as exc:
        raise ValueError(f"keras_model: the model or its compile configuration cannot be serialized ({exc}); "
                         "pass model_creator= (a function building the model on each worker) instead.") from None
    if not bare:
        compile_config = _override(compile_config, legacy, optimizer, metrics)
        if compile_config is None:
            raise ValueError("keras_model: the model reports no compile configuration; pass model_creator= instead.")
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
    compile_config = json.loads(spec["compile"])
    if compile_config is None:  # a loaded model without a compile configuration Keras can rebuild
        return model
    if "v1" in compile_config:
        model.compile(**_v1_compile_kwargs(compile_config["v1"], legacy_keras()))
    else:
        model.compile_from_config(compile_config)
    return model


def _v1_compile_args(model: Any) -> dict[str, Any]:
    """The compile arguments of a tf_keras model compiled with eager execution disabled (TF1 code
    under ``tf.compat.v1.disable_v2_behavior()``, whose ``training_v1`` keeps no compile config),
    each in Keras' legacy serialized form (plain data)."""
    keras = legacy_keras(model)

    def plain(obj: Any, module: Any) -> Any:
        return obj if obj is None or isinstance(obj, str) else module.serialize(obj)

    opt = model.optimizer
    metrics = getattr(model, "_compile_metrics", None)
    weighted = getattr(model, "_compile_weighted_metrics", None)
    loss = model.loss
    return {
        "optimizer": plain(opt, keras.optimizers), "legacy_optimizer": ".legacy." in type(opt).__module__,
        "loss": ({"by_output": {k: plain(v, keras.losses) for k, v in loss.items()}} if isinstance(loss, dict)
                 else {"per_output": [plain(v, keras.losses) for v in loss]} if isinstance(loss, (list, tuple))
                 else {"one": plain(loss, keras.losses)}),
        "metrics": None if metrics is None else [plain(m, keras.metrics) for m in metrics],
        "weighted_metrics": None if weighted is None else [plain(m, keras.metrics) for m in weighted],
        "loss_weights": getattr(model, "loss_weights", None),
    }


def _v1_compile_kwargs(args: dict[str, Any], keras: Any) -> dict[str, Any]:
    """``model.compile`` keyword arguments rebuilt from :func:`_v1_compile_args`."""

    def obj(value: Any, module: Any, **kw: Any) -> Any:
        return value if value is None or isinstance(value, str) else module.deserialize(value, **kw)

    loss = args["loss"]
    return {
        "optimizer": obj(args["optimizer"], keras.optimizers, use_legacy_optimizer=args["legacy_optimizer"]),
        "loss": ({k: obj(v, keras.losses) for k, v in loss["by_output"].items()} if "by_output" in loss
                 else [obj(v, keras.losses) for v in loss["per_output"]] if "per_output" in loss
                 else obj(loss["one"], keras.losses)),
        "metrics": None if args["metrics"] is None else [obj(m, keras.metrics) for m in args["metrics"]],
        "weighted_metrics": (None if args["weighted_metrics"] is None
                             else [obj(m, keras.metrics) for m in args["weighted_metrics"]]),
        "loss_weights": args["loss_weights"],
    }
