"""Run an op table entry in PyTorch: the entry's own callable, with ``vkblas`` swapped for ``torch`` (tinygrad's
``helper_test_op`` idea; vkblas keeps PyTorch's names, so the same lambda means the same thing in both).

``as_torch(fn)`` rebuilds ``fn`` with its global ``vb`` bound to a namespace that looks names up in ``torch``, then
in ``torch.nn.functional``; a function of ``vkblas`` itself (``vb.neg``) maps to the torch function of its name.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any

import numpy as np

import vkblas as vb

# vkblas names whose PyTorch spelling differs (or that live on Tensor in PyTorch)
_RENAMED = {
    "gelu_tanh": lambda x: __import__("torch").nn.functional.gelu(x, approximate="tanh"),
    "contiguous": lambda x: x.contiguous(),
}


class _TorchNamespace:
    """``vb.<name>`` for a lambda run in PyTorch."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        if name in _RENAMED:
            return _RENAMED[name]
        for home in (self._torch, self._torch.nn.functional):
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"no PyTorch counterpart of vkblas.{name}")


def as_torch(fn: Callable[..., Any], torch: Any) -> Callable[..., Any] | None:
    """``fn`` running on PyTorch tensors, or None when it has no PyTorch counterpart."""
    if getattr(fn, "__module__", "") in ("_operator", "operator") or fn in vars(operator).values():
        return fn
    if getattr(fn, "__module__", "").startswith("vkblas"):
        try:
            return getattr(_TorchNamespace(torch), fn.__name__)
        except AttributeError:
            return None
    if isinstance(fn, types.FunctionType):
        glb = dict(fn.__globals__)
        glb["vb"] = _TorchNamespace(torch)
        return types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    return None


def to_torch(a: Any, torch: Any, float_dtype: Any) -> Any:
    """A sample argument as PyTorch sees it: arrays as tensors (floats in ``float_dtype``, ints as int32)."""
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == np.bool_:
        return torch.tensor(a)
    if a.dtype.kind in "iu":
        return torch.tensor(a.astype(np.int32))
    return torch.tensor(a, dtype=float_dtype)


def torch_float(device: str, torch: Any) -> Any:
    return torch.float64 if vb.device(device).type == "cpu" else torch.float32
