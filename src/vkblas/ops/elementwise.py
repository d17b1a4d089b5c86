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

from ..backend import mathlib as _mathlib
from ..backend.elementwise import MathFunction as _Math
from ..backend.elementwise import define as _define
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
    return m.where(x == 0, x, m.sign(x) * (1.0 - poly * m.exp(-ax * ax)))  # erf(-0) = -0


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
    """Gradient share of ``a`` in maximum(a, b): all unless b wins, half on ties (PyTorch's rule: a NaN operand
    takes the whole gradient on both sides)."""
    share = 1.0 - _ew("lt", a, b).to(g.dtype) - _ew("eq", a, b).to(g.dtype) * 0.5
    return g * share


def _integral(x: _Any) -> bool:
    """An integer or bool tensor, or a Python int/bool."""
    return not x.dtype.is_floating if isinstance(x, _Tensor) else isinstance(x, (int, _np.integer))


def _no_negative_integer_power(x: _Any, y: _Any) -> None:
    if _integral(x) and isinstance(y, (int, _np.integer)) and not isinstance(y, bool) and y < 0:
        raise RuntimeError(f"Integers to negative integer powers are not allowed (exponent {y}).")


def _nonzero_integer_divisor(x: _Any, y: _Any) -> None:
    """Integer division by zero raises as in PyTorch: at once for a Python number; for a tensor divisor at once on a
    synchronous device, at the next sync point on an asynchronous one (a device-side check, no host round trip)."""
    if not (_integral(x) and _integral(y)):
        return
    message = "ZeroDivisionError: integer division by zero (divisor value {bad})"
    if isinstance(y, _Tensor):
        if y.numel():
            y._backend.check_values(y._view, 0, 0, message, RuntimeError, inside=False)
    elif y == 0:
        raise RuntimeError(message.format(bad=y))


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
# relu(nan) = nan and relu(-0) = -0, its gradient g where x > 0 or x is NaN (PyTorch's threshold rules)
relu = _unary_op(
    "relu", lambda m, a: m.where(a < 0, 0, a), fused_grad=lambda m, g, out: m.where(out <= 0, 0, g), inplace=True
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
# true division; ``vkblas.div`` (pointwise.py) adds ``rounding_mode``
_div = _binary_op(
    "div",
    lambda m, a, b: a / b,
    float_only=True,
    grad=(lambda g, y: g / y, lambda g, y, out: -(g * out) / y),
    method=False,
    export=False,
)
# integers stay integers (negative scalar exponents refused, as PyTorch); PyTorch's gradients at x = 0: the base's
# is 0 where y == 0, the exponent's 0 where x == 0 and y >= 0 (not 0 * inf or inf * log 0)
_define("pow_grad_base", lambda m, g, a, b: m.where(b == 0, 0, g * b * m.pow(a, b - 1)))
_define("pow_grad_exponent", lambda m, g, a, b, out: m.where(m.logical_and(a == 0, b >= 0), 0, g * out * m.log(a)))
pow = _binary_op(  # noqa: A001
    "pow",
    lambda m, a, b: m.pow(a, b),
    check=_no_negative_integer_power,
    grad=(lambda g, x, y: _ew("pow_grad_base", g, x, y), lambda g, x, y, out: _ew("pow_grad_exponent", g, x, y, out)),
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
# the angle of the point (other, input): a math function of its own, so the record gives numpy's and WGSL's spelling.
# WGSL leaves atan2 undefined at (0, 0), at infinities and for NaN; the helper gives C99's values there (signed 0 or
# pi at the origin, multiples of pi/4 at infinities, NaN for NaN), as numpy and PyTorch do
atan2 = _binary_op(
    "atan2",
    math=_Math(
        _np.arctan2,
        "vk_atan2_{T}({0}, {1})",
        "float",
        helper=_mathlib.per_float(
            "atan2",
            f"""fn vk_atan2_f32(y: f32, x: f32) -> f32 {{
    if ({_mathlib.bits("isnan", "y")} || {_mathlib.bits("isnan", "x")}) {{ return {_mathlib.NAN}; }}
    let sy = (bitcast<u32>(y) >> 31u) != 0u;
    let sx = (bitcast<u32>(x) >> 31u) != 0u;
    var r: f32;
    if ({_mathlib.bits("isinf", "y")}) {{
        let diagonal = select(0.7853981633974483, 2.356194490192345, sx);
        r = select(1.5707963267948966, diagonal, {_mathlib.bits("isinf", "x")});
    }} else if ({_mathlib.bits("isinf", "x")} || y == 0.0) {{  // +-0 or +-pi by the sign of x (-0 counts)
        r = select(0.0, 3.141592653589793, sx);
    }} else {{
        return atan2(y, x);
    }}
    return select(r, -r, sy);
}}
""",
        ),
    ),
    float_only=True,
    grad=(lambda g, x, y: g * y / (x * x + y * y), lambda g, x, y: -(g * x) / (x * x + y * y)),
)

# ---------------------------------------------------------------- comparisons and logic: bool results, no gradient
eq = _binary_op("eq", lambda m, a, b: a == b, returns_bool=True)
ne = _binary_op("ne", lambda m, a, b: a != b, returns_bool=True)  # true for NaN (IEEE), on every backend
lt = _binary_op("lt", lambda m, a, b: a < b, returns_bool=True)
le = _binary_op("le", lambda m, a, b: a <= b, returns_bool=True)
gt = _binary_op("gt", lambda m, a, b: a > b, returns_bool=True)
ge = _binary_op("ge", lambda m, a, b: a >= b, returns_bool=True)
logical_and = _binary_op("logical_and", lambda m, a, b: m.logical_and(a, b), returns_bool=True)
logical_or = _binary_op("logical_or", lambda m, a, b: m.logical_or(a, b), returns_bool=True)


# ---------------------------------------------------------------- integer ops: bitwise, shifts, integer division
# (bool & bool is logical, as in PyTorch; floats are refused naming the dtype)
bitwise_and = _binary_op(
    "bitwise_and",
    math=_Math(_np.bitwise_and, {"bool": "({0} && {1})", "*": "({0} & {1})"}, "same2"),
    integer_only=True,
)
bitwise_or = _binary_op(
    "bitwise_or", math=_Math(_np.bitwise_or, {"bool": "({0} || {1})", "*": "({0} | {1})"}, "same2"), integer_only=True
)
bitwise_xor = _binary_op(
    "bitwise_xor",
    math=_Math(_np.bitwise_xor, {"bool": "({0} != {1})", "*": "({0} ^ {1})"}, "same2"),
    integer_only=True,
)
bitwise_not = _unary_op("bitwise_not", math=_Math(_np.invert, {"bool": "!{0}", "*": "~{0}"}, "same"), integer_only=True)
# shifts by < 0 or >= 32 give 0 (left) or the sign (right), as PyTorch and numpy
bitwise_left_shift = _binary_op(
    "bitwise_left_shift", math=_Math(_np.left_shift, _mathlib.LEFT_SHIFT, "arith"), integer_only=True
)
bitwise_right_shift = _binary_op(
    "bitwise_right_shift", math=_Math(_np.right_shift, _mathlib.RIGHT_SHIFT, "arith"), integer_only=True
)
# integer division by zero raises (PyTorch's ZeroDivisionError); float division by zero gives inf / nan
floor_divide = _binary_op(
    "floor_divide",
    math=_Math(_mathlib.np_floor_divide, "vk_floor_divide_{T}({0}, {1})", "arith", helper=_mathlib.FLOOR_DIVIDE),
    check=_nonzero_integer_divisor,
)
_trunc_divide = _binary_op(
    "trunc_divide",
    math=_Math(_mathlib.np_trunc_divide, "vk_trunc_divide_{T}({0}, {1})", "arith", helper=_mathlib.TRUNC_DIVIDE),
    check=_nonzero_integer_divisor,
    method=False,
    export=False,
)
# x - y * trunc(x / y) and x - y * floor(x / y): the gradients PyTorch gives
fmod = _binary_op(
    "fmod",
    math=_Math(_mathlib.np_fmod, "vk_fmod_{T}({0}, {1})", "arith", helper=_mathlib.FMOD),
    check=_nonzero_integer_divisor,
    grad=(lambda g: g, lambda g, x, y: -(g * _ew("trunc_divide", x, y))),
)
remainder = _binary_op(
    "remainder",
    math=_Math(_mathlib.np_remainder, "vk_remainder_{T}({0}, {1})", "arith", helper=_mathlib.REMAINDER),
    check=_nonzero_integer_divisor,
    grad=(lambda g: g, lambda g, x, y: -(g * _ew("floor_divide", x, y))),
)
