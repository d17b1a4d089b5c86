"""Elementwise operations as data: the registry of formulas every backend evaluates, and the one table of math
functions a formula may call, with how numpy and WGSL spell each.

A formula is a function of a math namespace ``m`` and the operand values. The cpu backend passes
:data:`numpy_math` as ``m`` and gets arrays back; the Vulkan backend passes a builder whose values are WGSL
expressions and gets kernel source back (``vulkan/kernels/wgsl.py``). Both namespaces are made from :data:`MATH`,
so a formula is written once and the backends cannot disagree on a function: a name missing from the table fails
when the formula is defined, naming the op, on every backend alike.

The registry is owned here and filled from above by :func:`define`: ``ops/`` defines every op's formula (one record
per op, ``ops/elementwise.py``; the softmax family in ``ops/reduction.py``), ``optim/`` its fused updates
(``optim/fused.py``). This module defines only what the backends' own primitives use: ``copy`` (casts, fills,
contiguous copies), ``out_of_range`` and ``flag_or`` (index checks).

Operand rules (enforced by ``vkblas.ops``, not here): all tensor operands of one op share the *compute dtype*, except
the condition of ``where`` (bool). Python-number operands are allowed anywhere and act as that dtype. The result has
the compute dtype unless ``returns_bool``, and integer operands compute in float32 when ``float_only``; any other
output dtype is a cast done by the backend when it stores.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MathFunction:
    """A function formulas may call as ``m.<name>(...)``: numpy's implementation, and the WGSL it becomes."""

    numpy: Callable[..., Any]
    #: WGSL template: ``{0}``, ``{1}``, ... are the operands (typed by ``operands``), ``{T}`` the result type; a
    #: mapping gives a template per result type, ``"*"`` for the other types
    wgsl: str | Mapping[str, str]
    #: how operands are typed: ``float`` (one common type; ints become f32), ``same`` (as it is), ``arith`` (one
    #: common type, bool as i32), ``logic`` (each as bool; the result is bool), ``select`` (a bool condition, then
    #: two values of one common type)
    operands: str
    #: WGSL source of the helper function(s) the template calls (``{T}``: the type; a mapping per type like
    #: ``wgsl``), emitted once per kernel
    helper: str | Mapping[str, str] | None = None


# WGSL helpers, per type T. pow follows numpy: pow(x, 0) = 1 (NaN included), negative bases only with
# integral exponents (sign from the exponent's parity), 0 ** negative = inf; ints by repeated squaring (wrapping).
_POW_FLOAT = """
fn vk_pow_{T}(a: {T}, b: {T}) -> {T} {
    if (b == {T}(0)) { return {T}(1); }
    if (a == {T}(0)) {
        if (b > {T}(0)) { return {T}(0); }
        return {T}(bitcast<f32>(0x7f800000u));
    }
    let r = pow(abs(a), b);
    if (a > {T}(0)) { return r; }
    if (floor(b) != b) { return {T}(bitcast<f32>(0x7fc00000u)); }
    if (floor(b * {T}(0.5)) != b * {T}(0.5)) { return -r; }
    return r;
}
"""
_POW_INT = """
fn vk_pow_i32(a: i32, b: i32) -> i32 {
    if (b < 0) { return select(select(0, 1, a == 1), select(1, -1, (b & 1) != 0), a == -1); }
    var r = 1;
    var base = a;
    var e = b;
    loop {
        if (e == 0) { break; }
        if ((e & 1) != 0) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
"""

_SIGN = "select(select({T}(0), -{T}(1), {0} < {T}(0)), {T}(1), {0} > {T}(0))"
_SIGN_NAN = f"select({_SIGN}, {{0}}, {{0}} != {{0}})"  # sign(nan) = nan, as numpy

#: every math function a formula may call (ops may add one with :func:`define_math`)
MATH: dict[str, MathFunction] = {
    "exp": MathFunction(np.exp, "exp({0})", "float"),
    "log": MathFunction(np.log, "log({0})", "float"),
    "sqrt": MathFunction(np.sqrt, "sqrt({0})", "float"),
    "sin": MathFunction(np.sin, "sin({0})", "float"),
    "cos": MathFunction(np.cos, "cos({0})", "float"),
    # clamped: some drivers compute tanh through exp and return NaN for large |x|; tanh(15) rounds to 1 in f32
    "tanh": MathFunction(np.tanh, "tanh(clamp({0}, {T}(-15.0), {T}(15.0)))", "float"),
    "abs": MathFunction(np.abs, {"bool": "{0}", "*": "abs({0})"}, "same"),
    # sign(nan) = nan, as numpy
    "sign": MathFunction(
        np.sign, {"bool": "{0}", "i32": _SIGN, "*": f"select({_SIGN}, {{0}}, {{0}} != {{0}})"}, "same"
    ),
    "where": MathFunction(np.where, "select({2}, {1}, {0})", "select"),
    "maximum": MathFunction(np.maximum, "max({0}, {1})", "arith"),
    "minimum": MathFunction(np.minimum, "min({0}, {1})", "arith"),
    "pow": MathFunction(np.power, "vk_pow_{T}({0}, {1})", "arith", helper={"i32": _POW_INT, "*": _POW_FLOAT}),
    "logical_not": MathFunction(np.logical_not, "!{0}", "logic"),
    "logical_and": MathFunction(np.logical_and, "({0} && {1})", "logic"),
    "logical_or": MathFunction(np.logical_or, "({0} || {1})", "logic"),
}

#: numpy as the math namespace of the formulas (the cpu backend's ``m``)
numpy_math = types.SimpleNamespace(**{name: f.numpy for name, f in MATH.items()})


def define_math(name: str, function: MathFunction) -> None:
    """Add a math function to :data:`MATH` (an op that brings a new one, e.g. ``atan2``)."""
    if MATH.get(name, function) != function:
        raise ValueError(f"math function {name!r} is already defined differently")
    MATH[name] = function
    setattr(numpy_math, name, function.numpy)


@dataclass(frozen=True)
class ElementwiseOp:
    name: str
    arity: int
    fn: Callable[..., Any]
    returns_bool: bool = False
    #: operand i (if set) is a bool condition, the others share the compute dtype
    bool_operand: int | None = None
    #: integer (and bool) operands compute in float32: exp, div, ...
    float_only: bool = False


OPS: dict[str, ElementwiseOp] = {}


class _Probe:
    """A math namespace that checks a formula's calls against :data:`MATH` (numpy does the arithmetic)."""

    def __init__(self, op: str) -> None:
        self.op = op

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in MATH:
            raise AttributeError(
                f"elementwise op {self.op!r} calls m.{name}, which is not in the math table (backend/elementwise.py "
                "MATH); add it there, or with define_math from the op's record"
            )
        return MATH[name].numpy


def define(
    name: str,
    fn: Callable[..., Any],
    *,
    returns_bool: bool = False,
    bool_operand: int | None = None,
    float_only: bool = False,
) -> str:
    """Register the formula ``fn(m, *operands)`` as elementwise op ``name``; returns ``name``.

    The formula is evaluated once here on numpy scalars, so that a call to a function the math table lacks fails
    now, naming the op, instead of at its first use on one backend."""
    arity = len(inspect.signature(fn).parameters) - 1
    op = ElementwiseOp(name, arity, fn, returns_bool, bool_operand, float_only)
    if name in OPS and OPS[name] != op:
        raise ValueError(f"elementwise op {name!r} is already defined")
    with np.errstate(all="ignore"):
        fn(_Probe(name), *[np.float64(0.5)] * arity)
    OPS[name] = op
    return name


# ---------------------------------------------------------------- what the backends' primitives use themselves
define("copy", lambda m, a: a)
# index validation: true where low <= v < high fails
define("out_of_range", lambda m, v, lo, hi: m.logical_or(v < lo, v >= hi), returns_bool=True)
# the device-side index checks merge the flags of several steps
define("flag_or", lambda m, a, b: m.maximum(a, b))
