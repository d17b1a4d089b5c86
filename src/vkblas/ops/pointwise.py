"""The elementwise ops that are more than a record (``ops/elementwise.py``): ``add``/``sub`` with ``alpha``,
``gelu`` with ``approximate``, ``leaky_relu``, ``clamp``, ``where``, ``masked_fill``, and the in-place ops used by
optimizers, initialisers and user code. Their formulas are defined here, beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd import Node, autocast_off, is_grad_enabled, record
from ..backend.elementwise import define
from ..dtypes import DType, bool_, float32
from ..tensor import Tensor, from_host
from ._core import alias, check_inplace, compute_dtype, elementwise, rebase_inplace, write_into
from .elementwise import _add, _div, _gelu, _sub, _trunc_divide, floor_divide, gelu_tanh, maximum, minimum, mul, pow

G = Tensor

define("leaky_relu", lambda m, a, slope: m.where(a > 0, a, a * slope))
define("leaky_relu_grad", lambda m, g, x, slope: m.where(x > 0, g, g * slope))
define("where", lambda m, c, a, b: m.where(c, a, b), bool_operand=0)
define("clamp", lambda m, a, lo, hi: m.minimum(m.maximum(a, lo), hi))
# a + w * (b - a): lerp_, uniform_ with bounds, and the optimizers' moving averages
define("lerp", lambda m, a, b, w: a + w * (b - a))


# input + alpha * other as one fused multiply-add (PyTorch's: no overflow of alpha * other on its own)
define("add_scaled", lambda m, a, b, alpha: m.fma(b, alpha, a))


def _add_scaled(input: Any, other: Any, alpha: float) -> Tensor:  # noqa: A002
    floats = isinstance(input, Tensor) and isinstance(other, Tensor) and input.dtype.is_floating
    if not (floats and other.dtype.is_floating):  # integers, Python numbers: no rounding to fuse away
        return _add(input, mul(other, alpha) if isinstance(other, Tensor) else other * alpha)
    out = elementwise("add_scaled", input, other, float(alpha))
    return record(
        out,
        "AddBackward",
        (input, other),
        lambda n, g: (g if n.needs[0] else None, g * n.extra["alpha"] if n.needs[1] else None),
        alpha=float(alpha),
    )


def add(input: Any, other: Any, alpha: float = 1) -> Tensor:  # noqa: A002
    return _add(input, other) if alpha == 1 else _add_scaled(input, other, alpha)


def sub(input: Any, other: Any, alpha: float = 1) -> Tensor:  # noqa: A002
    return _sub(input, other) if alpha == 1 else _add_scaled(input, other, -alpha)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:  # noqa: A002
    """True division, or rounded: ``"trunc"`` towards zero, ``"floor"`` down (``//``); integer results stay integer
    and an integer division by zero raises, as in PyTorch."""
    if rounding_mode is None:
        return _div(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        return _trunc_divide(input, other)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}")


true_divide = _div
divide = div


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _gelu(input) if approximate == "none" else gelu_tanh(input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    out = elementwise("leaky_relu", input, float(negative_slope))
    return record(
        out,
        "LeakyReluBackward",
        (input,),
        lambda n, g: (elementwise("leaky_relu_grad", g, n.saved[0], n.extra["slope"]),),
        (input,),
        slope=float(negative_slope),
    )


def clamp(input: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    lo = float("-inf") if min is None else min
    hi = float("inf") if max is None else max
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        out = input
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out
    if min is None:
        out = elementwise("minimum", input, hi)
    elif max is None:
        out = elementwise("maximum", input, lo)
    else:
        out = elementwise("clamp", input, lo, hi)

    def rule(n: Node, g: G) -> tuple[Any]:
        # PyTorch's: g where min <= x <= max (a missing bound always holds; NaN gets no gradient)
        x = n.saved[0]
        if min is None:
            keep = elementwise("le", x, hi)
        elif max is None:
            keep = elementwise("ge", x, lo)
        else:
            keep = elementwise("logical_and", elementwise("ge", x, lo), elementwise("le", x, hi))
        return (where(keep, g, 0.0),)

    return record(out, "ClampBackward", (input,), rule, (input,))


clip = clamp


def where(condition: Tensor, input: Any, other: Any) -> Tensor:  # noqa: A002
    if not isinstance(condition, Tensor):
        raise TypeError("where: condition must be a bool Tensor")
    out = elementwise(
        "where", condition.to(dtype=condition.dtype) if condition.dtype.is_bool else condition != 0, input, other
    )

    def rule(n: Node, g: G) -> tuple[Any, ...]:
        c = n.saved[0]
        return (
            None,
            elementwise("where", c, g, 0.0) if n.needs[1] else None,
            elementwise("where", c, 0.0, g) if n.needs[2] else None,
        )

    return record(
        out,
        "WhereBackward",
        (None, *(t if isinstance(t, Tensor) else None for t in (input, other))),
        rule,
        (condition,),
    )


def masked_fill(input: Tensor, mask: Tensor, value: float) -> Tensor:  # noqa: A002
    if isinstance(value, Tensor):
        value = value.item()
    return where(mask, float(value) if input.dtype.is_floating else value, input)


# ---------------------------------------------------------------- in-place (optimizers, init, user code)
def can_cast(src: DType, dst: DType) -> bool:
    """PyTorch's rule for in-place results: no float into an integer or bool tensor, no integer into bool."""
    if src.is_floating:
        return dst.is_floating
    return dst is not bool_ or src is bool_


def check_result_type(name: str, op: str, t: Tensor, operands: tuple[Any, ...]) -> None:
    """``int_tensor.add_(1.5)`` raises as in PyTorch instead of truncating the float result into the tensor."""
    if not t.dtype.is_floating:  # a float target takes every result
        result = compute_dtype(op, (t, *operands))
        if not can_cast(result, t.dtype):
            raise RuntimeError(
                f"{name}: result type {result.name} can't be cast to the desired output type {t.dtype.name}"
            )


def _inplace(name: str, op: str, t: Tensor, *operands: Any, functional: Callable[..., Tensor] | None = None) -> Tensor:
    check_result_type(name, op, t, operands)
    if check_inplace(t, name):
        assert functional is not None, name
        with autocast_off():  # in place keeps the tensor's dtype, autocast or not (PyTorch's rule)
            return rebase_inplace(t, functional(alias(t), *operands))
    return write_into(t, op, t, *operands)


def add_(t: Tensor, other: Any, alpha: float = 1) -> Tensor:
    if alpha != 1:
        if isinstance(other, Tensor) and t.dtype.is_floating and other.dtype.is_floating:
            return _inplace("add_", "add_scaled", t, other, float(alpha), functional=_add_scaled)
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace("add_", "add", t, other, functional=_add)


def sub_(t: Tensor, other: Any, alpha: float = 1) -> Tensor:
    if alpha != 1:
        return add_(t, other, -alpha)
    return _inplace("sub_", "sub", t, other, functional=_sub)


def mul_(t: Tensor, other: Any) -> Tensor:
    return _inplace("mul_", "mul", t, other, functional=mul)


def div_(t: Tensor, other: Any) -> Tensor:
    return _inplace("div_", "div", t, other, functional=_div)


def pow_(t: Tensor, other: Any) -> Tensor:
    return _inplace("pow_", "pow", t, other, functional=pow)


def clamp_(t: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
    for bound in (min, max):
        if bound is not None:
            check_result_type("clamp_", "maximum", t, (bound,))
    if check_inplace(t, "clamp_"):
        return rebase_inplace(t, clamp(alias(t), min, max))
    if min is not None and max is not None:
        return write_into(t, "clamp", t, min, max)
    return write_into(t, "maximum", t, min) if min is not None else write_into(t, "minimum", t, max)


def fill_(t: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        value = value.item()
    if check_inplace(t, "fill_"):
        filled = record(t.new_full(t.shape, value), "FillBackward", (alias(t),), lambda n, g: (g * 0,))
        return rebase_inplace(t, filled)
    return write_into(t, "copy", value)


def zero_(t: Tensor) -> Tensor:
    return fill_(t, 0)


def copy_(t: Tensor, src: Any) -> Tensor:
    if not isinstance(src, Tensor):
        src = from_host(src, t.dtype, t._backend)
    if src._backend is not t._backend:
        src = src.to(t.device)
    if check_inplace(t, "copy_") or (is_grad_enabled() and src.requires_grad):
        return rebase_inplace(t, _add(src, 0) if t.dtype is src.dtype else src.to(t.dtype))
    return write_into(t, "copy", src)


def masked_fill_(t: Tensor, mask: Tensor, value: float) -> Tensor:
    if check_inplace(t, "masked_fill_"):
        return rebase_inplace(t, masked_fill(alias(t), mask, value))
    return write_into(t, "where", mask, float(value) if t.dtype.is_floating else value, t)


def addcmul_(t: Tensor, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
    """``t += value * tensor1 * tensor2`` (no autograd: an optimizer helper)."""
    return write_into(t, "add", t, elementwise("mul", elementwise("mul", tensor1, tensor2), value))


def addcdiv_(t: Tensor, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
    """``t += value * tensor1 / tensor2`` (no autograd: an optimizer helper)."""
    return write_into(t, "add", t, elementwise("mul", elementwise("div", tensor1, tensor2), value))


def lerp_(t: Tensor, end: Any, weight: float) -> Tensor:
    """``t += weight * (end - t)`` (no autograd: an optimizer helper)."""
    check_result_type("lerp_", "lerp", t, (end, float(weight)))
    return write_into(t, "lerp", t, end, float(weight))


def to_float(t: Tensor) -> Tensor:
    return t if t.dtype.is_floating else t.to(float32)
