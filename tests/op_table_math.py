"""OpInfo entries of the rounding, trigonometric and special functions, the activations of ``nn.functional`` and
``isclose`` / ``allclose`` (``tests/op_table.py`` appends them to its table; the generic tests read them there).

References are numpy in float64; ``erfinv``'s is Newton's method on ``math.erf``, independent of vkblas's
approximation."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import vkblas as vb
from op_samples import Sample, away, fresh, np_erf, unary_samples, uniform
from opinfo import _Z, F16, I32, NUMERIC, OpInfo, errors

F = vb.nn.functional
Rng = np.random.Generator
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


# ---------------------------------------------------------------- references
def keep_int(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A rounding reference: integer arrays unchanged (numpy would return floats)."""
    return lambda x, **kw: x if x.dtype.kind in "iub" else fn(x, **kw)


def np_erfinv(y: np.ndarray) -> np.ndarray:
    """Newton's method on math.erf from a bisection start: float64 accuracy, for |y| < 1."""
    y = np.asarray(y, dtype=np.float64)
    x = np.zeros_like(y)
    for _ in range(60):  # bisection-like start, then Newton: converges well within these steps
        x = x - (np_erf(x) - y) / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    return x


def np_softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


def np_elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(x))


def np_celu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))


def np_relu6(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0, 6)


# ---------------------------------------------------------------- samples
def spread(low: float, high: float, points: tuple[float, ...] = ()) -> Callable[[Rng, tuple[int, ...]], np.ndarray]:
    """Uniform in (low, high), kept away from the kinks ``points``."""
    return lambda rng, shape: away(uniform(rng, shape, low, high), points, gap=0.05)


def activation_samples(make: Any, settings: list[dict[str, Any]]) -> Callable[[Rng], Iterator[Sample]]:
    def gen(rng: Rng) -> Iterator[Sample]:
        for kw in settings:
            for shape in [(3, 4), (7,), (), (0, 2)]:
                yield Sample((make(rng, shape),), dict(kw))

    return gen


def close_samples(rng: Rng) -> Iterator[Sample]:
    a = uniform(rng, (3, 4))
    near = a + rng.choice([0.0, 1e-9, 1e-3], a.shape)
    yield Sample((a, near))
    yield Sample((a, near), {"rtol": 1e-2, "atol": 0.0})
    yield Sample((a, near[0]), {"atol": 1e-2})
    special = np.array([np.inf, -np.inf, np.nan, 1.0, np.nan, 0.0])
    other = np.array([np.inf, np.inf, np.nan, 1.0 + 1e-9, 2.0, -0.0])
    yield Sample((special, other))
    yield Sample((special, other), {"equal_nan": True})
    yield Sample((_Z((0, 2)), _Z((1, 2))))


# ---------------------------------------------------------------- the entries
def _math(name: str, op: Any, ref: Any, make: Any = uniform, keeps_int: bool = False, **kw: Any) -> list[OpInfo]:
    """The op's entry, and its in-place ``Tensor.<name>_``'s on a non-leaf copy (an int tensor only takes the
    in-place op when the result stays int: ``keeps_int``)."""
    method = name + "_"
    inplace = dict(kw, dtypes=tuple(d for d in kw.get("dtypes", ()) if keeps_int or d is not I32))
    if not keeps_int:
        inplace["error_inputs"] = errors(((np.zeros(3, np.int32),), {}, RuntimeError, "can't be cast"))
    return [
        OpInfo(name, op, ref, unary_samples(make), **kw),
        OpInfo(method, lambda x: getattr(fresh(x), method)(), ref, unary_samples(make), **inplace),
    ]


def _activation(name: str, ref: Any, make: Any, settings: list[dict[str, Any]] | None = None, **kw: Any) -> OpInfo:
    return OpInfo(name, getattr(F, name), ref, activation_samples(make, settings or [{}]), **kw)


MATH_OPS: list[OpInfo] = [
    # --- rounding: integers unchanged, gradient zero
    *_math("floor", vb.floor, keep_int(np.floor), keeps_int=True, dtypes=NUMERIC),
    *_math("ceil", vb.ceil, keep_int(np.ceil), keeps_int=True, dtypes=NUMERIC),
    *_math("trunc", vb.trunc, keep_int(np.trunc), keeps_int=True, dtypes=NUMERIC),
    OpInfo("round", vb.round, keep_int(np.round), unary_samples(lambda rng, s: uniform(rng, s, -5, 5)), dtypes=NUMERIC),
    OpInfo(
        "round (decimals)",
        lambda x: vb.round(x, decimals=2),
        lambda x: np.round(x, 2),
        unary_samples(),
        dtypes=(F16,),
        error_inputs=errors(((np.zeros(3, np.int32),), {}, RuntimeError, "floating point")),
    ),
    OpInfo("round_", lambda x: fresh(x).round_(), np.round, unary_samples()),
    # --- trigonometric and hyperbolic
    *_math("tan", vb.tan, np.tan, lambda rng, s: uniform(rng, s, -1.2, 1.2), dtypes=NUMERIC),
    *_math("asin", vb.asin, np.arcsin, spread(-0.9, 0.9), dtypes=(F16,)),
    *_math("acos", vb.acos, np.arccos, spread(-0.9, 0.9), dtypes=(F16,)),
    *_math("atan", vb.atan, np.arctan, dtypes=NUMERIC),
    *_math("sinh", vb.sinh, np.sinh, dtypes=NUMERIC),
    *_math("cosh", vb.cosh, np.cosh, dtypes=NUMERIC),
    *_math("asinh", vb.asinh, np.arcsinh, dtypes=NUMERIC),
    *_math("acosh", vb.acosh, np.arccosh, spread(1.1, 3.0), dtypes=(F16,)),
    *_math("atanh", vb.atanh, np.arctanh, spread(-0.9, 0.9), dtypes=(F16,)),
    # --- special functions: erf is Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), erfinv Giles' approximation
    *_math("erf", vb.erf, np_erf, atol=1e-6, dtypes=NUMERIC),
    *_math("erfinv", vb.erfinv, np_erfinv, spread(-0.95, 0.95), atol=1e-6, rtol=1e-6, dtypes=(F16,)),
    # --- activations
    OpInfo(
        "selu",
        vb.selu,
        lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(x)),
        unary_samples(spread(-2, 2, (0.0,))),
        dtypes=NUMERIC,
    ),
    _activation(
        "elu",
        np_elu,
        spread(-2, 2, (0.0,)),
        [{}, {"alpha": 0.5}],
        dtypes=NUMERIC,
    ),
    _activation(
        "celu",
        np_celu,
        spread(-2, 2, (0.0,)),
        [{"alpha": 1.5}],
        error_inputs=errors(((_Z(3),), {"alpha": 0.0}, ValueError, "alpha cannot be 0")),
    ),
    _activation(
        "softplus",
        np_softplus,
        spread(-3, 3, (2.0,)),
        [{}, {"beta": 2.0}, {"beta": 0.5, "threshold": 1.0}],
        dtypes=NUMERIC,
    ),
    _activation("mish", lambda x: x * np.tanh(np.log1p(np.exp(x))), spread(-3, 3), dtypes=NUMERIC),
    _activation("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, spread(-5, 5, (-3.0, 3.0)), dtypes=NUMERIC),
    _activation("hardsigmoid", lambda x: np.clip(x + 3, 0, 6) / 6, spread(-5, 5, (-3.0, 3.0)), dtypes=NUMERIC),
    _activation(
        "hardtanh",
        lambda x, min_val=-1.0, max_val=1.0: np.clip(x, min_val, max_val),
        spread(-2, 2, (-1.0, 1.0, -0.5, 1.5)),
        [{}, {"min_val": -0.5, "max_val": 1.5}],
        dtypes=NUMERIC,
        error_inputs=errors(((_Z(3),), {"min_val": 1.0, "max_val": 0.0}, ValueError, "cannot be greater")),
    ),
    _activation("relu6", np_relu6, spread(-2, 8, (0.0, 6.0)), dtypes=NUMERIC),
    _activation("logsigmoid", lambda x: -np.log1p(np.exp(-x)), spread(-4, 4), dtypes=NUMERIC),
    _activation("softsign", lambda x: x / (1 + np.abs(x)), spread(-3, 3), dtypes=NUMERIC),
    # --- closeness: bool results
    OpInfo(
        "isclose",
        vb.isclose,
        np.isclose,
        close_samples,
        differentiable=False,
        error_inputs=errors(((_Z(3), np.zeros(3, np.int32)), {}, RuntimeError, "same dtype")),
    ),
    OpInfo(
        "allclose",
        lambda a, b, **kw: vb.tensor(vb.allclose(a, b, **kw), device=a.device),
        lambda a, b, **kw: np.array(np.allclose(a, b, **kw)),
        close_samples,
        differentiable=False,
    ),
]
