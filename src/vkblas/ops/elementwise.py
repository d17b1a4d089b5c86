"""The elementwise ops of vkblas, one record each (see ``ops/record.py`` for what a record says and what follows
from it). Adding an op is adding one record here and one OpInfo in ``tests/op_table.py``.

Every public name of this module is an op: ``vkblas`` star-imports it. Records kept out of the ``vkblas`` namespace
(``export=False``: ``add``/``sub`` take ``alpha`` and ``gelu`` takes ``approximate`` in ``pointwise.py``) are bound
to private names.

Formulas: ``m`` is the math namespace (``backend/elementwise.py`` MATH: numpy on cpu, WGSL on Vulkan); operands are
tensors' elements or Python numbers. Backward rules: ``g`` is the incoming gradient, ``x``/``y`` the inputs,
``out`` the result; the engine sums each gradient back to its input's shape, so rules never think about
broadcasting.
"""

# no ``from __future__ import annotations``: it would bind the public name ``annotations``
import math as _pymath
from typing import Any as _Any

import numpy as _np

from ..backend.elementwise import MathFunction as _Math
from ..tensor import Tensor as _Tensor
from ._core import elementwise as _ew
from .record import binary_op as _binary_op
from .record import unary_op as _unary_op

_SQRT_HALF = _pymath.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / _pymath.sqrt(2.0 * _pymath.pi)
_SQRT_2_OVER_PI = _pymath.sqrt(2.0 / _pymath.pi)


def _erf(m: _Any, x: _Any) -> _Any:
    # Abramowitz & Stegun 7.1.26, |error| < 1.5e-7: below fp32 resolution of erf's range, and the same on every backend.
    ax = m.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return m.sign(x) * (1.0 - poly * m.exp(-ax * ax))


def _gelu_tanh_inner(m: _Any, a: _Any) -> _Any:
    return m.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a * a * a))


def _sigmoid(m: _Any, a: _Any) -> _Any:
    return 1.0 / (1.0 + m.exp(-a))


def _gelu_tanh_grad(m: _Any, g: _Any, x: _Any) -> _Any:
    inner = _gelu_tanh_inner(m, x)
    return g * (
        0.5 * (1.0 + inner) + 0.5 * x * (1.0 - inner * inner) * _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
    )


def _pick_half(g: _Tensor, a: _Any, b: _Any) -> _Tensor:
    """Gradient share of ``a`` in maximum(a, b): all where a wins, half on ties (PyTorch's rule)."""
    share = _ew("gt", a, b).to(g.dtype) + _ew("eq", a, b).to(g.dtype) * 0.5
    return g * share


def _log(x: _Any) -> _Any:
    return _ew("log", x) if isinstance(x, _Tensor) else _pymath.log(x)


# ---------------------------------------------------------------- unary
neg = _unary_op("neg", lambda m, a: -a, grad=lambda g: -g, inplace=True)
exp = _unary_op("exp", lambda m, a: m.exp(a), float_only=True, grad=lambda g, out: g * out, inplace=True)
log = _unary_op("log", lambda m, a: m.log(a), float_only=True, grad=lambda g, x: g / x)
sqrt = _unary_op("sqrt", lambda m, a: m.sqrt(a), float_only=True, grad=lambda g, out: g / (2 * out), inplace=True)
rsqrt = _unary_op(
    "rsqrt",
    lambda m, a: 1.0 / m.sqrt(a),
    float_only=True,
    grad=lambda g, out: g * _ew("mul", _ew("square", out), out) * -0.5,
)
abs = _unary_op("abs", lambda m, a: m.abs(a), grad=lambda g, x: g * _ew("sign", x))  # noqa: A001
sign = _unary_op("sign", lambda m, a: m.sign(a), grad=lambda g: g * 0)
sin = _unary_op("sin", lambda m, a: m.sin(a), float_only=True, grad=lambda g, x: g * _ew("cos", x))
cos = _unary_op("cos", lambda m, a: m.cos(a), float_only=True, grad=lambda g, x: -(g * _ew("sin", x)))
tanh = _unary_op("tanh", lambda m, a: m.tanh(a), float_only=True, fused_grad=lambda m, g, out: g * (1.0 - out * out))
sigmoid = _unary_op("sigmoid", _sigmoid, float_only=True, fused_grad=lambda m, g, out: g * out * (1.0 - out))
relu = _unary_op(
    "relu", lambda m, a: m.where(a > 0, a, 0), fused_grad=lambda m, g, x: m.where(x > 0, g, 0), inplace=True
)
silu = _unary_op(
    "silu",
    lambda m, a: a * _sigmoid(m, a),
    float_only=True,
    fused_grad=lambda m, g, x: g * _sigmoid(m, x) * (1.0 + x * (1.0 - _sigmoid(m, x))),
)
_gelu = _unary_op(
    "gelu",
    lambda m, a: 0.5 * a * (1.0 + _erf(m, a * _SQRT_HALF)),
    float_only=True,
    fused_grad=lambda m, g, x: g * (0.5 * (1.0 + _erf(m, x * _SQRT_HALF)) + x * _INV_SQRT_2PI * m.exp(-0.5 * x * x)),
    method=False,
    export=False,
)
gelu_tanh = _unary_op(
    "gelu_tanh",
    lambda m, a: 0.5 * a * (1.0 + _gelu_tanh_inner(m, a)),
    float_only=True,
    fused_grad=_gelu_tanh_grad,
    method=False,
)
square = _unary_op("square", lambda m, a: a * a, grad=lambda g, x: g * x * 2)
reciprocal = _unary_op(
    "reciprocal", lambda m, a: 1.0 / a, float_only=True, grad=lambda g, out: -(g * _ew("square", out))
)
logical_not = _unary_op("logical_not", lambda m, a: m.logical_not(a), returns_bool=True)

# ---------------------------------------------------------------- binary, with broadcasting
_add = _binary_op("add", lambda m, a, b: a + b, grad=(lambda g: g, lambda g: g), method=False, export=False)
_sub = _binary_op("sub", lambda m, a, b: a - b, grad=(lambda g: g, lambda g: -g), method=False, export=False)
mul = _binary_op("mul", lambda m, a, b: a * b, grad=(lambda g, y: g * y, lambda g, x: g * x))
div = _binary_op(
    "div", lambda m, a, b: a / b, float_only=True, grad=(lambda g, y: g / y, lambda g, y, out: -(g * out) / y)
)
pow = _binary_op(  # noqa: A001
    "pow",
    lambda m, a, b: m.pow(a, b),
    float_only=True,
    grad=(lambda g, x, y: g * y * _ew("pow", x, y - 1), lambda g, x, out: g * out * _log(x)),
)
maximum = _binary_op(
    "maximum",
    lambda m, a, b: m.maximum(a, b),
    grad=(lambda g, x, y: _pick_half(g, x, y), lambda g, x, y: _pick_half(g, y, x)),
)
minimum = _binary_op(
    "minimum",
    lambda m, a, b: m.minimum(a, b),
    grad=(lambda g, x, y: _pick_half(g, y, x), lambda g, x, y: _pick_half(g, x, y)),
)
# the angle of the point (other, input): a math function of its own, so the record gives numpy's and WGSL's spelling
# (WGSL leaves atan2(0, 0) undefined; the helper returns IEEE's signed 0 or pi there, as numpy and PyTorch do)
atan2 = _binary_op(
    "atan2",
    math=_Math(
        _np.arctan2,
        "vk_atan2_{T}({0}, {1})",
        "float",
        helper="""
fn vk_atan2_{T}(y: {T}, x: {T}) -> {T} {
    if (y != {T}(0) || x != {T}(0)) { return atan2(y, x); }
    let r = select({T}(0), {T}(3.141592653589793), (bitcast<u32>(f32(x)) >> 31u) != 0u);
    return select(r, -r, (bitcast<u32>(f32(y)) >> 31u) != 0u);
}
""",
    ),
    float_only=True,
    grad=(lambda g, x, y: g * y / (x * x + y * y), lambda g, x, y: -(g * x) / (x * x + y * y)),
)

# ---------------------------------------------------------------- comparisons and logic: bool results, no gradient
eq = _binary_op("eq", lambda m, a, b: a == b, returns_bool=True)
ne = _binary_op("ne", lambda m, a, b: a != b, returns_bool=True)
lt = _binary_op("lt", lambda m, a, b: a < b, returns_bool=True)
le = _binary_op("le", lambda m, a, b: a <= b, returns_bool=True)
gt = _binary_op("gt", lambda m, a, b: a > b, returns_bool=True)
ge = _binary_op("ge", lambda m, a, b: a >= b, returns_bool=True)
logical_and = _binary_op("logical_and", lambda m, a, b: m.logical_and(a, b), returns_bool=True)
logical_or = _binary_op("logical_or", lambda m, a, b: m.logical_or(a, b), returns_bool=True)
