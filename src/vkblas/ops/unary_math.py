"""More one-record elementwise ops (see ``ops/record.py``): rounding, trigonometric and hyperbolic functions and
their inverses, ``erf`` / ``erfinv``, and the parameter-free activations of ``torch.nn.functional``.

Like ``ops/elementwise.py``, every public name here is an exported op (``vkblas`` star-imports this module);
records that only ``nn.functional`` exposes (``mish``, ``hardswish`` ...) are bound to private names. Formulas that
leave a function's domain give NaN on every backend (WGSL leaves ``asin(2)`` undefined, so the formulas say it),
and inverse hyperbolics use forms that stay accurate for large negative inputs.
"""

# no ``from __future__ import annotations``: it would bind the public name ``annotations``
import math as _pymath
from typing import Any as _Any

import numpy as _np

from ..backend import mathlib as _mathlib
from ..backend.elementwise import MathFunction as _Math
from ..backend.elementwise import define_math as _define_math
from .elementwise import _erf, _sigmoid
from .record import unary_op as _unary_op

_NAN = float("nan")
_INF = float("inf")
_SQRT_PI_HALF = _pymath.sqrt(_pymath.pi) / 2.0
_TWO_OVER_SQRT_PI = 2.0 / _pymath.sqrt(_pymath.pi)
# SELU's constants (Klambauer et al., 2017), as PyTorch spells them
_ATANH_SERIES = [1.0 / (2 * k + 1) for k in range(7)]
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _rounding(name: str, np_fn: _Any) -> _Math:
    """A rounding function: integers pass through unchanged (PyTorch keeps their dtype)."""
    return _Math(np_fn, {"i32": "{0}", "bool": "{0}", "*": name + "({0})"}, "same")


def _float_fn(np_fn: _Any, name: str) -> _Math:
    """A float function whose WGSL is the ``mathlib`` helper ``vk_<name>`` (drivers' own get NaN, large arguments
    or overflow wrong)."""
    return _Math(np_fn, f"vk_{name}_{{T}}({{0}})", "float", helper=getattr(_mathlib, name.upper()))


# each one's gradient calls the other: both math functions exist before either record
_define_math("sinh", _float_fn(_np.sinh, "sinh"))
_define_math("cosh", _float_fn(_np.cosh, "cosh"))


def _softplus0(m: _Any, a: _Any) -> _Any:
    """log(1 + exp(a)) without overflow: max(a, 0) + log(1 + exp(-|a|))."""
    return m.maximum(a, 0.0) + m.log(1.0 + m.exp(-m.abs(a)))


def _log_hypot1(m: _Any, a: _Any, one: float) -> _Any:
    """log(a + sqrt(a^2 + one)) for a >= 1 as log(a) + log(1 + sqrt(1 + one / a^2)): a^2 never overflows."""
    return m.log(a) + m.log(1.0 + m.sqrt(m.maximum(1.0 + one / (a * a), 0.0)))


def _near_zero(m: _Any, a: _Any, odd_series: list[float], elsewhere: _Any) -> _Any:
    """The odd power series ``c0 a + c1 a^3 + ... + c6 a^13`` for |a| < 0.1 (where log(1 + small) loses relative
    precision), else ``elsewhere``; the next term is below 1e-15 relative there."""
    a2 = a * a
    series = odd_series[-1]
    for c in reversed(odd_series[:-1]):
        series = c + series * a2
    return m.where(m.abs(a) < 0.1, a * series, elsewhere)


def _erfinv(m: _Any, x: _Any) -> _Any:
    """Giles (2010), "Approximating the erfinv function": single-precision accuracy; +-inf at +-1, NaN beyond."""
    w = -m.log((1.0 - x) * (1.0 + x))
    c = w - 2.5
    p = 2.81022636e-08
    for k in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164):
        p = k + p * c
    p = 1.50140941 + (0.246640727 + p * c) * c
    t = m.sqrt(m.maximum(w, 5.0)) - 3.0
    q = -0.000200214257
    for k in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047):
        q = k + q * t
    q = 2.83297682 + (1.00167406 + q * t) * t
    inner = m.where(w < 5.0, p, q) * x
    edge = m.where(x > 0, _INF, -_INF)
    return m.where(m.abs(x) > 1.0, _NAN, m.where(m.abs(x) == 1.0, edge, inner))


def _hardswish_grad(m: _Any, g: _Any, x: _Any) -> _Any:
    return m.where(x < -3.0, 0.0, m.where(x > 3.0, g, g * (x / 3.0 + 0.5)))


def _mish_grad(m: _Any, g: _Any, x: _Any) -> _Any:
    t = m.tanh(_softplus0(m, x))
    return g * (t + x * (1.0 - t * t) * _sigmoid(m, x))


# ---------------------------------------------------------------- rounding: integers unchanged, zero gradient
floor = _unary_op("floor", math=_rounding("floor", _np.floor), grad=lambda g: g * 0, inplace=True)
ceil = _unary_op("ceil", math=_rounding("ceil", _np.ceil), grad=lambda g: g * 0, inplace=True)
trunc = _unary_op("trunc", math=_rounding("trunc", _np.trunc), grad=lambda g: g * 0, inplace=True)
# half to even, as numpy, WGSL and PyTorch round; ``round(x, decimals=)`` is in ops/parametric.py
_round = _unary_op(
    "round", math=_rounding("round", _np.round), grad=lambda g: g * 0, method=False, inplace=True, export=False
)

# ---------------------------------------------------------------- trigonometric and hyperbolic
atan = _unary_op(
    "atan",
    math=_float_fn(_np.arctan, "atan"),
    float_only=True,
    fused_grad=lambda m, g, x: g / (1.0 + x * x),
    inplace=True,
)
# 1 - x^2 as (1 - x)(1 + x) in the gradients: exact near |x| = 1, where x * x - 1 loses f32's digits
# through atan, which drivers compute accurately (lavapipe's asin is off by 2e-4): asin(x) = atan(x / sqrt(1 - x^2)),
# acos(x) = 2 atan(sqrt((1 - x) / (1 + x))) (no cancellation near x = 1)
asin = _unary_op(
    "asin",
    lambda m, a: m.where(m.abs(a) > 1.0, _NAN, m.atan(a / m.sqrt(1.0 - a * a))),
    float_only=True,
    fused_grad=lambda m, g, x: g / m.sqrt((1.0 - x) * (1.0 + x)),
    inplace=True,
)
acos = _unary_op(
    "acos",
    lambda m, a: m.where(m.abs(a) > 1.0, _NAN, 2.0 * m.atan(m.sqrt((1.0 - a) / (1.0 + a)))),
    float_only=True,
    fused_grad=lambda m, g, x: -g / m.sqrt((1.0 - x) * (1.0 + x)),
    inplace=True,
)
tan = _unary_op(
    "tan",
    math=_float_fn(_np.tan, "tan"),
    float_only=True,
    fused_grad=lambda m, g, out: g * (1.0 + out * out),
    inplace=True,
)
sinh = _unary_op(
    "sinh",
    lambda m, a: m.sinh(a),
    float_only=True,
    fused_grad=lambda m, g, x: g * m.cosh(x),
    inplace=True,
)
cosh = _unary_op(
    "cosh",
    lambda m, a: m.cosh(a),
    float_only=True,
    fused_grad=lambda m, g, x: g * m.sinh(x),
    inplace=True,
)
# sign(x) log(|x| + sqrt(x^2 + 1)): the textbook log(x + sqrt(x^2 + 1)) cancels to log(0) for large negative x;
# through _log_hypot1 (x^2 would overflow for large |x|), and a power series near 0
asinh = _unary_op(
    "asinh",
    lambda m, a: _near_zero(
        m,
        a,
        [1.0, -1.0 / 6.0, 3.0 / 40.0, -5.0 / 112.0, 35.0 / 1152.0, -63.0 / 2816.0, 231.0 / 13312.0],
        m.sign(a)
        * m.where(m.abs(a) > 1.0, _log_hypot1(m, m.maximum(m.abs(a), 1.0), 1.0), m.log(m.abs(a) + m.sqrt(a * a + 1.0))),
    ),
    float_only=True,
    fused_grad=lambda m, g, x: g / m.sqrt(x * x + 1.0),
    inplace=True,
)
acosh = _unary_op(
    "acosh",
    lambda m, a: m.where(a < 1.0, _NAN, _log_hypot1(m, a, -1.0)),
    float_only=True,
    fused_grad=lambda m, g, x: g / m.sqrt((x - 1.0) * (x + 1.0)),
    inplace=True,
)
atanh = _unary_op(
    "atanh",
    lambda m, a: m.where(
        m.abs(a) > 1.0,
        _NAN,
        _near_zero(m, a, [1.0 / (2 * k + 1) for k in range(7)], 0.5 * m.log((1.0 + a) / (1.0 - a))),
    ),
    float_only=True,
    fused_grad=lambda m, g, x: g / ((1.0 - x) * (1.0 + x)),
    inplace=True,
)

# ---------------------------------------------------------------- special functions
# erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, ops/elementwise.py), with the exact derivative
erf = _unary_op(
    "erf",
    _erf,
    float_only=True,
    fused_grad=lambda m, g, x: g * _TWO_OVER_SQRT_PI * m.exp(-x * x),
    inplace=True,
)
erfinv = _unary_op(
    "erfinv",
    _erfinv,
    float_only=True,
    fused_grad=lambda m, g, out: g * _SQRT_PI_HALF * m.exp(out * out),
    inplace=True,
)

# ---------------------------------------------------------------- activations (nn.functional; selu also vkblas.selu)
selu = _unary_op(
    "selu",
    # a >= 0 keeps -0 (PyTorch's expm1(-0) = -0)
    lambda m, a: _SELU_SCALE * m.where(a >= 0, a, _SELU_ALPHA * (m.exp(a) - 1.0)),
    float_only=True,
    fused_grad=lambda m, g, x: g * _SELU_SCALE * m.where(x > 0, 1.0, _SELU_ALPHA * m.exp(x)),
    method=False,
)
_mish = _unary_op(
    "mish",
    lambda m, a: a * m.tanh(_softplus0(m, a)),
    float_only=True,
    fused_grad=_mish_grad,
    method=False,
    export=False,
)
_hardswish = _unary_op(
    "hardswish",
    lambda m, a: a * m.minimum(m.maximum(a + 3.0, 0.0), 6.0) / 6.0,
    float_only=True,
    fused_grad=_hardswish_grad,
    method=False,
    export=False,
)
_hardsigmoid = _unary_op(
    "hardsigmoid",
    lambda m, a: m.minimum(m.maximum(a + 3.0, 0.0), 6.0) / 6.0,
    float_only=True,
    fused_grad=lambda m, g, x: m.where(m.logical_and(x > -3.0, x < 3.0), g / 6.0, 0.0),
    method=False,
    export=False,
)
_relu6 = _unary_op(
    "relu6",
    lambda m, a: m.minimum(m.maximum(a, 0), 6),
    fused_grad=lambda m, g, x: m.where(m.logical_and(x > 0, x < 6), g, 0),
    method=False,
    export=False,
)
# log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), without overflow for either sign (PyTorch's form: +0 at +inf)
_logsigmoid = _unary_op(
    "logsigmoid",
    lambda m, a: m.minimum(a, 0.0) - m.log(1.0 + m.exp(-m.abs(a))),
    float_only=True,
    fused_grad=lambda m, g, x: g * _sigmoid(m, -x),
    method=False,
    export=False,
)
_softsign = _unary_op(
    "softsign",
    lambda m, a: a / (1.0 + m.abs(a)),
    float_only=True,
    # PyTorch differentiates the composition x / (1 + |x|): NaN at +-inf (inf / inf), as there
    fused_grad=lambda m, g, x: g / (1.0 + m.abs(x)) - g * x * m.sign(x) / ((1.0 + m.abs(x)) * (1.0 + m.abs(x))),
    method=False,
    export=False,
)
