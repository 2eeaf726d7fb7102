"""Turn what the user hands ``from_torch`` into a picklable spec the workers rebuild from."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn


def describe_optimizer(optimizer: Any, model: Any) -> Any:
    """An optimizer instance becomes (class, defaults, param groups by index, state); creators pass through.

    Raises:
        TypeError: neither an Optimizer nor a creator ``f(model, config)``.
        ValueError: an instance whose parameters are not the model's.
    """
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer is the class {optimizer.__module__}.{optimizer.__name__}, which needs the model's "
                        f"parameters: pass an instance built from the model, {optimizer.__name__}(model.parameters(), "
                        f"lr=...), or a creator: lambda model, config: {optimizer.__name__}(model.parameters(), lr=...).")
    if optimizer is None or (callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer)):
        return optimizer
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or a creator f(model, config), got "
                        f"{type(optimizer).__name__}.")
    if not isinstance(model, nn.Module):
        raise ValueError("an optimizer instance needs a model instance (it refers to the model's parameters); "
                         "with a model creator, pass an optimizer creator f(model, config).")
    index = {id(p): i for i, p in enumerate(model.parameters())}
    groups = []
    for group in optimizer.param_groups:
        try:
            ids = [index[id(p)] for p in group["params"]]
        except KeyError:
            raise ValueError("the optimizer holds parameters that are not the model's; build it from "
                             "model.parameters().") from None
        groups.append({"params": ids, **{k: v for k, v in group.items() if k != "params"}})
    return {"__optimizer__": type(optimizer), "defaults": dict(optimizer.defaults), "groups": groups,
            "state": optimizer.state_dict()}


def build_optimizer(spec: Any, model: nn.Module, config: dict[str, Any]) -> Any:
    """Rebuild the optimizer on a worker from :func:`describe_optimizer`'s output."""
    if spec is None:
        return None
    if isinstance(spec, dict) and "__optimizer__" in spec:
        params = list(model.parameters())
        groups = [{**g, "params": [params[i] for i in g["params"]]} for g in spec["groups"]]
        opt = spec["__optimizer__"](groups, **spec["defaults"])
        if spec.get("state", {}).get("state"):
            opt.load_state_dict(spec["state"])
        return opt
    opt = spec(model, config)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"the optimizer creator returned {type(opt).__name__}, not a torch.optim.Optimizer.")
    return opt


def _n_params(fn: Any) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 2
    return len([p for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty])


def check_model(model: Any) -> None:
    """Raises TypeError unless ``model`` is an nn.Module or a creator ``f(config)``."""
    if isinstance(model, nn.Module):
        return
    if isinstance(model, type) or not callable(model):
        raise TypeError(f"model must be a torch.nn.Module or a creator f(config) returning one, got "
                        f"{model!r} of type {type(model).__name__}.")


def build_model(model: Any, config: dict[str, Any]) -> nn.Module:
    """A module instance (copied by the pickling that brought it here) or a creator's result."""
    if isinstance(model, nn.Module):
        return model
    built = model(config)
    if not isinstance(built, nn.Module):
        raise TypeError(f"the model creator returned {type(built).__name__}, not a torch.nn.Module.")
    return built


def check_loss(loss: Any) -> None:
    """Raises TypeError unless ``loss`` is a loss module, its class, a creator or a function."""
    if loss is None or isinstance(loss, nn.Module) or callable(loss):
        return
    raise TypeError(f"loss must be a loss module (nn.MSELoss()), a creator f(config) or a function "
                    f"f(output, target), got {type(loss).__name__}.")


def build_loss(loss: Any, config: dict[str, Any]) -> Any:
    """A loss module, a module class, a creator ``f(config)`` or a function ``f(output, target)``."""
    if loss is None or isinstance(loss, nn.Module):
        return loss
    if isinstance(loss, type) and issubclass(loss, nn.Module):
        return loss()
    if _n_params(loss) == 1:
        made = loss(config)
        if not callable(made):
            raise TypeError(f"the loss creator returned {type(made).__name__}, not a loss: return a loss module "
                            "(nn.MSELoss()) or a function f(output, target).")
        return made
    return loss
