"""Elementwise ops with parameters besides their tensor: ``round(decimals=)``, the activations ``softplus``,
``elu``, ``celu``, ``hardtanh``, and ``isclose`` / ``allclose``.

Each activation is a forward formula and a fused backward formula over ``(m, g, x, *params)``, registered in the
backend's table and tied together by :func:`_parametric` (the parameters travel as Python-number operands, so one
compiled kernel serves every value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..autograd import record
from ..backend.elementwise import MathFunction, define, define_math
from ..tensor import Tensor
from ._core import elementwise
from .autocast import fp32
from .unary_math import _round


def _parametric(name: str, formula: Callable[..., Any], grad: Callable[..., Any]) -> Callable[..., Tensor]:
    """``f(input, *params)`` computing ``formula(m, x, *params)``, differentiable through ``grad(m, g, x, *params)``."""
    define(name, formula, float_only=True)
    grad_name = define(name + "_grad", grad, float_only=True)
    title = "".join(p.capitalize() for p in name.split("_")) + "Backward"

    def function(input: Tensor, *params: float) -> Tensor:  # noqa: A002
        values = tuple(float(p) for p in params)
        out = elementwise(name, input, *values)
        return record(out, title, (input,), lambda n, g: (elementwise(grad_name, g, n.saved[0], *values),), (input,))

    function.__name__ = function.__qualname__ = name
    return function


def _softplus_formula(m: Any, a: Any, beta: Any, threshold: Any) -> Any:
    z = a * beta
    return m.where(z > threshold, a, (m.maximum(z, 0.0) + m.log(1.0 + m.exp(-m.abs(z)))) / beta)


def _softplus_grad(m: Any, g: Any, x: Any, beta: Any, threshold: Any) -> Any:
    z = x * beta
    return m.where(z > threshold, g, g / (1.0 + m.exp(-z)))


_softplus = _parametric("softplus", _softplus_formula, _softplus_grad)
# elu(x; alpha, scale, input_scale): PyTorch's one kernel behind elu, selu and celu
_elu = _parametric(
    "elu",
    # a >= 0 keeps -0 (PyTorch's expm1(-0) = -0)
    lambda m, a, alpha, scale, s_in: scale * m.where(a >= 0, a, alpha * (m.exp(a * s_in) - 1.0)),
    lambda m, g, x, alpha, scale, s_in: g * scale * m.where(x > 0, 1.0, alpha * s_in * m.exp(x * s_in)),
)
_hardtanh = _parametric(
    "hardtanh",
    lambda m, a, lo, hi: m.minimum(m.maximum(a, lo), hi),
    # PyTorch's hardtanh_backward: zero at the bounds themselves, unlike clamp's (and for NaN: README "Differences")
    lambda m, g, x, lo, hi: m.where(m.logical_and(x > lo, x < hi), g, 0.0),
)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (PyTorch's)."""
    return _softplus(fp32(input), beta, threshold)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _elu(input, alpha, 1.0, 1.0)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise ValueError("celu: ZeroDivisionError, alpha cannot be 0 (celu divides by it)")
    return _elu(input, alpha, 1.0, 1.0 / alpha)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``clamp(x, min_val, max_val)``, with zero gradient at the bounds (PyTorch's)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    return _hardtanh(input, min_val, max_val)


def round(input: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001,A002
    """Round half to even, to ``decimals`` decimal places (PyTorch's ``round(x * 10**d) / 10**d``)."""
    if decimals == 0:
        return _round(input)
    if not input.dtype.is_floating:
        raise RuntimeError(f"round: decimals is only supported for floating point tensors, got {input.dtype!r}")
    scale = 10.0 ** int(decimals)
    return _round(input * scale) / scale


# NaN by its bits: ``x != x`` is folded away by drivers that compile with fast-math (lavapipe does); 1 or 0
define_math(
    "nan_flag",
    MathFunction(np.isnan, "select({T}(0), {T}(1), (bitcast<u32>(f32({0})) & 0x7fffffffu) > 0x7f800000u)", "float"),
)
# |a - b| <= atol + rtol |b| (finite: inf - inf is no tolerance), or equal (infinities), or both NaN when equal_nan
_INF = float("inf")
define(
    "isclose",
    lambda m, a, b, rtol, atol, nan_eq: m.logical_or(
        m.logical_or(a == b, m.logical_and(m.abs(a - b) <= atol + rtol * m.abs(b), m.abs(a - b) < _INF)),
        m.logical_and(nan_eq, m.logical_and(m.nan_flag(a) > 0, m.nan_flag(b) > 0)),
    ),
    returns_bool=True,
)


def isclose(
    input: Tensor,  # noqa: A002
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (with broadcasting), as PyTorch defines it:
    infinities are close only to themselves, NaNs only when ``equal_nan``."""
    if isinstance(input, Tensor) and isinstance(other, Tensor) and input.dtype is not other.dtype:
        raise RuntimeError(
            f"isclose: expected both inputs to have the same dtype, got {input.dtype!r} and {other.dtype!r}"
        )
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose: rtol ({rtol}) and atol ({atol}) must be non-negative")
    return elementwise("isclose", input, other, float(rtol), float(atol), bool(equal_nan))


def allclose(
    input: Tensor,  # noqa: A002
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> bool:
    """Whether every element is :func:`isclose` (a sync point: returns a Python bool)."""
    close = isclose(input, other, rtol, atol, equal_nan)
    return close.numel() == 0 or bool(close.all().item())
