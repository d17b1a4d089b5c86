"""Elementwise operations as data: one table that every backend evaluates.

Each entry is a function of a math namespace ``m`` and the operand values. The cpu backend passes numpy as ``m`` and
gets arrays back; the Vulkan backend passes a builder whose values are WGSL expressions and gets kernel source back.
So an op is written once and both backends agree on its formula (the erf approximation included).

Operand rules (enforced by ``vkblas.ops``, not here): all tensor operands of one op share the *compute dtype*, except
the condition of ``where`` (bool). Python-number operands are allowed anywhere and act as that dtype. The result has
the compute dtype unless ``returns_bool``; any other output dtype is a cast done by the backend when it stores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class ElementwiseOp:
    name: str
    arity: int
    fn: Callable[..., Any]
    returns_bool: bool = False
    #: operand i (if set) is a bool condition, the others share the compute dtype
    bool_operand: int | None = None


def _erf(m: Any, x: Any) -> Any:
    # Abramowitz & Stegun 7.1.26, |error| < 1.5e-7: below fp32 resolution of erf's range, and the same on every backend.
    ax = m.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return m.sign(x) * (1.0 - poly * m.exp(-ax * ax))


def _gelu_tanh_inner(m: Any, a: Any) -> Any:
    return m.tanh(SQRT_2_OVER_PI * (a + 0.044715 * a * a * a))


def _sigmoid(m: Any, a: Any) -> Any:
    return 1.0 / (1.0 + m.exp(-a))


_TABLE = [
    # --- unary
    ElementwiseOp("copy", 1, lambda m, a: a),
    ElementwiseOp("neg", 1, lambda m, a: -a),
    ElementwiseOp("exp", 1, lambda m, a: m.exp(a)),
    ElementwiseOp("log", 1, lambda m, a: m.log(a)),
    ElementwiseOp("sqrt", 1, lambda m, a: m.sqrt(a)),
    ElementwiseOp("rsqrt", 1, lambda m, a: 1.0 / m.sqrt(a)),
    ElementwiseOp("abs", 1, lambda m, a: m.abs(a)),
    ElementwiseOp("sign", 1, lambda m, a: m.sign(a)),
    ElementwiseOp("sin", 1, lambda m, a: m.sin(a)),
    ElementwiseOp("cos", 1, lambda m, a: m.cos(a)),
    ElementwiseOp("tanh", 1, lambda m, a: m.tanh(a)),
    ElementwiseOp("sigmoid", 1, _sigmoid),
    ElementwiseOp("relu", 1, lambda m, a: m.where(a > 0, a, 0)),
    ElementwiseOp("silu", 1, lambda m, a: a * _sigmoid(m, a)),
    ElementwiseOp("gelu", 1, lambda m, a: 0.5 * a * (1.0 + _erf(m, a * SQRT_HALF))),
    ElementwiseOp("gelu_tanh", 1, lambda m, a: 0.5 * a * (1.0 + _gelu_tanh_inner(m, a))),
    ElementwiseOp("square", 1, lambda m, a: a * a),
    ElementwiseOp("reciprocal", 1, lambda m, a: 1.0 / a),
    ElementwiseOp("logical_not", 1, lambda m, a: m.logical_not(a), returns_bool=True),
    # --- binary
    ElementwiseOp("add", 2, lambda m, a, b: a + b),
    ElementwiseOp("sub", 2, lambda m, a, b: a - b),
    ElementwiseOp("mul", 2, lambda m, a, b: a * b),
    ElementwiseOp("div", 2, lambda m, a, b: a / b),
    ElementwiseOp("pow", 2, lambda m, a, b: m.pow(a, b)),
    ElementwiseOp("maximum", 2, lambda m, a, b: m.maximum(a, b)),
    ElementwiseOp("minimum", 2, lambda m, a, b: m.minimum(a, b)),
    ElementwiseOp("leaky_relu", 2, lambda m, a, slope: m.where(a > 0, a, a * slope)),
    ElementwiseOp("eq", 2, lambda m, a, b: a == b, returns_bool=True),
    ElementwiseOp("ne", 2, lambda m, a, b: a != b, returns_bool=True),
    ElementwiseOp("lt", 2, lambda m, a, b: a < b, returns_bool=True),
    ElementwiseOp("le", 2, lambda m, a, b: a <= b, returns_bool=True),
    ElementwiseOp("gt", 2, lambda m, a, b: a > b, returns_bool=True),
    ElementwiseOp("ge", 2, lambda m, a, b: a >= b, returns_bool=True),
    ElementwiseOp("logical_and", 2, lambda m, a, b: m.logical_and(a, b), returns_bool=True),
    ElementwiseOp("logical_or", 2, lambda m, a, b: m.logical_or(a, b), returns_bool=True),
    # index validation: true where low <= v < high fails; flags of several steps merged (the Vulkan index checks)
    ElementwiseOp("out_of_range", 3, lambda m, v, lo, hi: m.logical_or(v < lo, v >= hi), returns_bool=True),
    ElementwiseOp("flag_or", 2, lambda m, a, b: m.maximum(a, b)),
    # --- fused backward rules (one dispatch instead of three or four); first operand is the incoming gradient
    ElementwiseOp("relu_grad", 2, lambda m, g, x: m.where(x > 0, g, 0)),
    ElementwiseOp("leaky_relu_grad", 3, lambda m, g, x, slope: m.where(x > 0, g, g * slope)),
    ElementwiseOp("sigmoid_grad", 2, lambda m, g, y: g * y * (1.0 - y)),
    ElementwiseOp("tanh_grad", 2, lambda m, g, y: g * (1.0 - y * y)),
    ElementwiseOp("silu_grad", 2, lambda m, g, x: g * _sigmoid(m, x) * (1.0 + x * (1.0 - _sigmoid(m, x)))),
    ElementwiseOp(
        "gelu_grad",
        2,
        lambda m, g, x: g * (0.5 * (1.0 + _erf(m, x * SQRT_HALF)) + x * INV_SQRT_2PI * m.exp(-0.5 * x * x)),
    ),
    ElementwiseOp(
        "gelu_tanh_grad",
        2,
        lambda m, g, x: (
            g
            * (
                0.5 * (1.0 + _gelu_tanh_inner(m, x))
                + 0.5
                * x
                * (1.0 - _gelu_tanh_inner(m, x) * _gelu_tanh_inner(m, x))
                * SQRT_2_OVER_PI
                * (1.0 + 3.0 * 0.044715 * x * x)
            )
        ),
    ),
    # --- ternary
    ElementwiseOp("where", 3, lambda m, c, a, b: m.where(c, a, b), bool_operand=0),
    ElementwiseOp("clamp", 3, lambda m, a, lo, hi: m.minimum(m.maximum(a, lo), hi)),
    # lerp-style update used by optimizers: a + w * (b - a)
    ElementwiseOp("lerp", 3, lambda m, a, b, w: a + w * (b - a)),
    # --- softmax family (rows reduced by the caller: m = row max, s = row sum)
    ElementwiseOp("exp_sub", 2, lambda m, x, mx: m.exp(x - mx)),
    ElementwiseOp("log_softmax_out", 3, lambda m, x, mx, s: x - mx - m.log(s)),
    ElementwiseOp("log_softmax_grad", 3, lambda m, g, y, s: g - m.exp(y) * s),
    ElementwiseOp("softmax_grad", 3, lambda m, g, y, s: y * (g - s)),
    # --- fused optimizer updates (one dispatch per tensor each; see vkblas.optim)
    ElementwiseOp("axpby", 4, lambda m, x, y, a, b: a * x + b * y),
    ElementwiseOp("ema_sq", 3, lambda m, v, g, beta: beta * v + (1.0 - beta) * g * g),
    ElementwiseOp("sub_scaled", 3, lambda m, x, y, s: x - s * y),
    # capturable optimizers: bias corrections from the step count t kept on the device
    ElementwiseOp("adam_step_size", 3, lambda m, lr, t, beta1: lr / (1.0 - m.pow(beta1, t))),
    ElementwiseOp("adam_rsqrt_bc", 2, lambda m, t, beta2: 1.0 / m.sqrt(1.0 - m.pow(beta2, t))),
    # p * decay - step * m / (sqrt(v) * inv_sqrt_bc2 + eps): Adam / AdamW / RMSprop's parameter update
    ElementwiseOp(
        "adam_apply",
        7,
        lambda m, p, mom, v, step, inv_sqrt_bc2, eps, decay: p * decay - step * mom / (m.sqrt(v) * inv_sqrt_bc2 + eps),
    ),
]

OPS: dict[str, ElementwiseOp] = {op.name: op for op in _TABLE}
