"""Run an op table entry in PyTorch: the entry's own callable, with ``vkblas`` swapped for ``torch`` (tinygrad's
``helper_test_op`` idea; vkblas keeps PyTorch's names, so the same lambda means the same thing in both).

``as_torch(fn)`` rebuilds ``fn`` with its global ``vb`` bound to a namespace that looks names up in ``torch``, then
in ``torch.nn.functional`` (and a global ``F`` that is ``vkblas.nn.functional`` bound to ``torch.nn.functional``);
a function of ``vkblas`` itself (``vb.neg``) maps to the torch function of its name.
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
    # vkblas's sorts are always stable (README "Differences"): compared with PyTorch's stable sort, which orders
    # ties (-0 and 0 included) the same way
    "sort": lambda x, dim=-1, descending=False, stable=False: __import__("torch").sort(
        x, dim=dim, descending=descending, stable=True
    ),
    "argsort": lambda x, dim=-1, descending=False, stable=False: __import__("torch").argsort(
        x, dim=dim, descending=descending, stable=True
    ),
}


def _math_sdpa(*args: Any, **kwargs: Any) -> Any:
    """PyTorch's reference attention, ``aten::_scaled_dot_product_attention_math``: softmax(q k^T * scale + mask) v,
    fully masked rows 0. Its other backends disagree on special values (the fused CPU kernel treats a NaN score as
    masked; ``F.scaled_dot_product_attention`` gives NaN for a NaN query with no keys), README "Differences"."""
    return __import__("torch").ops.aten._scaled_dot_product_attention_math(*args, **kwargs)[0]


_RENAMED["scaled_dot_product_attention"] = _math_sdpa


def _einsum_left_to_right(*args: Any, **kwargs: Any) -> Any:
    """``torch.einsum`` contracting left to right, as vkblas does. With the optional ``opt_einsum`` package installed,
    PyTorch picks its own contraction order, and where an operand holds inf and another 0 the NaN positions of
    results and gradients follow that order (the H200 machine's PyTorch has it; this one's does not)."""
    torch = __import__("torch")
    with torch.backends.opt_einsum.flags(enabled=False):
        return torch.einsum(*args, **kwargs)


_RENAMED["einsum"] = _einsum_left_to_right


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
        if glb.get("F") is vb.nn.functional:  # the nn table's lambdas call F.<name>
            glb["F"] = torch.nn.functional
        return types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    return None


def to_torch(a: Any, torch: Any, float_dtype: Any) -> Any:
    """A sample argument as PyTorch sees it: arrays as tensors (floats in ``float_dtype``, ints as int64: PyTorch's
    index dtype, which ``index_copy`` and ``index_fill`` insist on; vkblas's int32 holds the same values)."""
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == np.bool_:
        return torch.tensor(a)
    if a.dtype.kind in "iu":
        return torch.tensor(a.astype(np.int64))
    return torch.tensor(a, dtype=float_dtype)


def torch_float(device: str, torch: Any) -> Any:
    return torch.float64 if vb.device(device).type == "cpu" else torch.float32
