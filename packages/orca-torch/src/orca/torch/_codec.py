"""torch tensors in Orca's non-executable encoding (checkpoints, :mod:`orca.core.codec`).

A tensor is stored as its CPU numpy array and its dtype's name; bfloat16 (which numpy lacks)
travels as its raw 16-bit pattern. Importing this module registers the type.
"""

from __future__ import annotations

import numpy as np

import torch
from orca.core.plugin import register_array_type


def _to_numpy(t: torch.Tensor) -> tuple[np.ndarray, str]:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    return t.numpy(), str(t.dtype).removeprefix("torch.")


def _from_numpy(a: np.ndarray, meta: str) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.view(torch.bfloat16) if meta == "bfloat16" else t


register_array_type("torch", torch.Tensor, _to_numpy, _from_numpy)
