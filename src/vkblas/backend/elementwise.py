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
contiguous copies), ``outside`` / ``inside`` and ``flag_or`` (the device-side value checks).

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

from . import mathlib


@dataclass(frozen=True)
class MathFunction:
    """A function formulas may call as ``m.<name>(...)``: numpy's implementation, and the WGSL it becomes."""

    numpy: Callable[..., Any]
    #: WGSL template: ``{0}``, ``{1}``, ... are the operands (typed by ``operands``), ``{T}`` the result type; a
    #: mapping gives a template per result type, ``"*"`` for the other types
    wgsl: str | Mapping[str, str]
    #: how operands are typed: ``float`` (one common type; ints become f32), ``same`` (as it is), ``same2`` (two
    #: operands of one common type, bool kept as bool), ``arith`` (one common type, bool as i32), ``logic`` (each as
    #: bool; the result is bool), ``select`` (a bool condition, then two values of one common type)
    operands: str
    #: WGSL source of the helper function(s) the template calls (``{T}``: the type; a mapping per type like
    #: ``wgsl``), emitted once per kernel
    helper: str | Mapping[str, str] | None = None


#: every math function a formula may call (ops may add one with :func:`define_math`). The ones whose edge cases
#: (NaN, infinities, signed zeros, huge arguments, integer corners) need code have it in ``mathlib.py``.
MATH: dict[str, MathFunction] = {
    "exp": MathFunction(np.exp, "exp({0})", "float"),
    "log": MathFunction(np.log, "vk_log_{T}({0})", "float", helper=mathlib.LOG),
    "sqrt": MathFunction(np.sqrt, "vk_sqrt_{T}({0})", "float", helper=mathlib.SQRT),
    # range-reduced in the kernel: some drivers' sin/cos do no range reduction
    "sin": MathFunction(np.sin, "vk_sin_{T}({0})", "float", helper=mathlib.SIN),
    "cos": MathFunction(np.cos, "vk_cos_{T}({0})", "float", helper=mathlib.COS),
    "tanh": MathFunction(mathlib.np_tanh, "vk_tanh_{T}({0})", "float", helper=mathlib.TANH),
    "abs": MathFunction(np.abs, {"bool": "{0}", "*": "abs({0})"}, "same"),
    # PyTorch's sign: 0 for NaN
    "sign": MathFunction(mathlib.np_sign, {"bool": "{0}", "*": "vk_sign_{T}({0})"}, "same", helper=mathlib.SIGN),
    "where": MathFunction(np.where, "select({2}, {1}, {0})", "select"),
    # NaN propagates; ties return the first operand (PyTorch)
    "maximum": MathFunction(mathlib.np_maximum, "vk_maximum_{T}({0}, {1})", "arith", helper=mathlib.MAXIMUM),
    "minimum": MathFunction(mathlib.np_minimum, "vk_minimum_{T}({0}, {1})", "arith", helper=mathlib.MINIMUM),
    "pow": MathFunction(mathlib.np_pow, "vk_pow_{T}({0}, {1})", "arith", helper=mathlib.POW),
    # a * b + c rounded once where the device has it (WGSL's fma; numpy rounds twice, in float64 on cpu)
    "fma": MathFunction(lambda a, b, c: a * b + c, "fma({0}, {1}, {2})", "float3"),
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
    #: float operands are refused (bitwise ops): ``ops`` raises naming the dtype
    integer_only: bool = False


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
    integer_only: bool = False,
) -> str:
    """Register the formula ``fn(m, *operands)`` as elementwise op ``name``; returns ``name``.

    The formula is evaluated once here on numpy scalars, so that a call to a function the math table lacks fails
    now, naming the op, instead of at its first use on one backend."""
    arity = len(inspect.signature(fn).parameters) - 1
    op = ElementwiseOp(name, arity, fn, returns_bool, bool_operand, float_only, integer_only)
    if name in OPS and OPS[name] != op:
        raise ValueError(f"elementwise op {name!r} is already defined")
    with np.errstate(all="ignore"):
        fn(_Probe(name), *[np.int32(1) if integer_only else np.float64(0.5)] * arity)
    OPS[name] = op
    return name


# ---------------------------------------------------------------- what the backends' primitives use themselves
define("copy", lambda m, a: a)
# value checks (device_checks.py): true where lo <= v <= hi fails (NaN fails), or where it holds
define("outside", lambda m, v, lo, hi: m.logical_not(m.logical_and(v >= lo, v <= hi)), returns_bool=True)
define("inside", lambda m, v, lo, hi: m.logical_and(v >= lo, v <= hi), returns_bool=True)
# the same, where v == a passes whatever the interval says
define(
    "outside_but",
    lambda m, v, lo, hi, a: m.logical_and(m.logical_not(m.logical_and(v >= lo, v <= hi)), v != a),
    returns_bool=True,
)
define("inside_but", lambda m, v, lo, hi, a: m.logical_and(m.logical_and(v >= lo, v <= hi), v != a), returns_bool=True)
# the device-side index checks merge the flags of several steps
define("flag_or", lambda m, a, b: m.maximum(a, b))
