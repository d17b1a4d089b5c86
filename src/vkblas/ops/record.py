"""One record per elementwise op, and how a record becomes everything else.

A record is made by :func:`unary_op` or :func:`binary_op` (``ops/elementwise.py`` holds them all) and says, in one
place: the formula (a function of the math namespace ``m``, evaluated by numpy on cpu and turned into WGSL on
Vulkan; a record can bring a new math function with ``math=``), the dtype rule (``float_only``, ``returns_bool``),
the backward rule, and whether it is a Tensor method (``method``, and ``inplace`` for ``Tensor.<name>_``) and a
``vkblas.<name>`` function (``export``). From it follow: the formula in the backend's table, the differentiable
function, the fused backward kernel, the Tensor methods (``ops/methods.py``), the ``vkblas`` function (a star import
of ``ops/elementwise.py``) and the check that the op has an OpInfo (``tests/test_ops.py``).

Backward rules name what they need by their parameter names: ``g`` (the incoming gradient), ``x`` / ``y`` (the
inputs), ``out`` (the result). A unary op's ``grad`` is one rule; a binary op's is a pair, one rule per input, each
run only when that input needs a gradient (PyTorch's ``derivatives.yaml``: ``self: grad * other``). ``fused_grad``
instead gives the gradient as a formula ``(m, g, x or out)`` compiled into one kernel, ``<name>_grad``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..autograd import Node, autocast_off, is_grad_enabled, record
from ..backend.elementwise import OPS, MathFunction, define, define_math
from ..tensor import Tensor
from ._core import alias, check_inplace, elementwise, rebase_inplace, write_into
from .autocast import FLOAT32_OPS, fp32

GradRule = Callable[..., Any]
_SAVABLE = ("x", "y", "out")


@dataclass(frozen=True, eq=False)
class OpRecord:
    name: str
    arity: int
    #: the differentiable function ``vkblas.<name>`` (``export``) / ``Tensor.<name>`` (``method``)
    function: Callable[..., Tensor]
    #: one backward rule per input, or None for an op with no gradient (comparisons)
    grads: tuple[GradRule, ...] | None
    #: what a recorded node keeps (some of x, y, out, in this order), and the node's backward rule
    saves: tuple[str, ...]
    rule: Callable[[Node, Tensor], tuple[Any, ...]] | None
    method: bool
    inplace: bool
    export: bool

    @property
    def title(self) -> str:
        return "".join(p.capitalize() for p in self.name.split("_")) + "Backward"


#: every elementwise op record, by name
RECORDS: dict[str, OpRecord] = {}


def unary_op(
    name: str,
    formula: Callable[..., Any] | None = None,
    *,
    math: MathFunction | None = None,
    grad: GradRule | None = None,
    fused_grad: Callable[..., Any] | None = None,
    float_only: bool = False,
    integer_only: bool = False,
    returns_bool: bool = False,
    method: bool = True,
    inplace: bool = False,
    export: bool = True,
) -> Callable[[Tensor], Tensor]:
    """Record a one-operand elementwise op; returns its function (see the module docstring)."""
    formula = _formula(name, formula, math, 1)
    define(name, formula, float_only=float_only, integer_only=integer_only, returns_bool=returns_bool)
    grads = None if grad is None and fused_grad is None else (grad or _fused(name, fused_grad, float_only),)

    def function(input: Tensor) -> Tensor:  # noqa: A002 - PyTorch's argument name
        out = elementwise(name, input)
        if input.requires_grad and is_grad_enabled() and grads is not None:
            _attach(RECORDS[name], out, input, None)
        return out

    if integer_only:
        function = _integers_only(name, function)
    if name in FLOAT32_OPS:
        function = _float32_under_autocast(function)

    _register(name, 1, function, grads, method, inplace, export, f"Elementwise ``{name}``")
    return function


def binary_op(
    name: str,
    formula: Callable[..., Any] | None = None,
    *,
    math: MathFunction | None = None,
    grad: tuple[GradRule, GradRule] | None = None,
    float_only: bool = False,
    integer_only: bool = False,
    returns_bool: bool = False,
    check: Callable[[Any, Any], None] | None = None,
    method: bool = True,
    export: bool = True,
) -> Callable[[Any, Any], Tensor]:
    """Record a two-operand elementwise op (broadcasting, Python numbers on either side); returns its function.
    ``check(input, other)`` runs first: a rule on the operands' values (a negative integer power, an integer
    division by zero) that raises as PyTorch does."""
    formula = _formula(name, formula, math, 2)
    define(name, formula, float_only=float_only, integer_only=integer_only, returns_bool=returns_bool)

    def function(input: Any, other: Any) -> Tensor:  # noqa: A002
        out = elementwise(name, input, other)
        if (getattr(input, "requires_grad", False) or getattr(other, "requires_grad", False)) and is_grad_enabled():
            if grad is not None:
                _attach(RECORDS[name], out, input, other)
        return out

    if check is not None:
        unchecked = function

        def function(input: Any, other: Any) -> Tensor:  # noqa: A002
            check(input, other)
            return unchecked(input, other)

    if integer_only:
        function = _integers_only(name, function)
    if name in FLOAT32_OPS:
        function = _float32_under_autocast(function)

    _register(name, 2, function, grad, method, False, export, f"Elementwise ``{name}`` with broadcasting")
    return function


# ---------------------------------------------------------------- derived parts
def _integers_only(name: str, function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Refuse float operands (bitwise ops) as PyTorch does, before the op runs: the common path of every other
    op pays nothing for the rule."""

    def checked(*operands: Any) -> Tensor:
        for o in operands:
            if isinstance(o, float) or (isinstance(o, Tensor) and o.dtype.is_floating):
                what = repr(o.dtype) if isinstance(o, Tensor) else "a Python float"
                raise NotImplementedError(f"{name} is only implemented for integer and bool tensors, got {what}")
        return function(*operands)

    return checked


def _float32_under_autocast(function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The op with its float16 operands cast to float32 under autocast (``ops/autocast.py``)."""

    def upcast(*operands: Any) -> Tensor:
        return function(*(fp32(o) for o in operands))

    return upcast


def _formula(name: str, formula: Callable[..., Any] | None, math: MathFunction | None, arity: int) -> Any:
    """The record's formula; ``math=`` adds a math function of the op's name and makes the formula a call of it."""
    if math is None:
        if formula is None:
            raise TypeError(f"op {name!r}: give a formula or math=")
        return formula
    define_math(name, math)
    if arity == 1:
        return formula or (lambda m, a: getattr(m, name)(a))
    return formula or (lambda m, a, b: getattr(m, name)(a, b))


def _fused(name: str, fused_grad: Callable[..., Any] | None, float_only: bool) -> GradRule:
    """The fused backward formula as kernel ``<name>_grad`` and the rule that runs it."""
    assert fused_grad is not None
    kernel = define(name + "_grad", fused_grad, float_only=float_only)
    saved = list(inspect.signature(fused_grad).parameters)[2]  # (m, g, x or out)
    if saved == "x":
        return lambda g, x: elementwise(kernel, g, x)
    return lambda g, out: elementwise(kernel, g, out)


def _register(
    name: str,
    arity: int,
    function: Callable[..., Tensor],
    grads: tuple[GradRule, ...] | None,
    method: bool,
    inplace: bool,
    export: bool,
    doc: str,
) -> None:
    if name in RECORDS:
        raise ValueError(f"elementwise op {name!r} is recorded twice")
    function.__name__ = function.__qualname__ = name
    function.__module__ = "vkblas.ops.elementwise"
    function.__doc__ = doc + (" (differentiable)." if grads is not None else " (not differentiable).")
    params = [list(inspect.signature(r).parameters)[1:] for r in grads or ()]
    for p in params:
        if not set(p) <= set(_SAVABLE[:arity] + ("out",)):
            raise TypeError(f"op {name!r}: a backward rule takes g and then only {_SAVABLE[:arity]} or out, got {p}")
    saves = tuple(k for k in _SAVABLE if any(k in p for p in params))
    rule = None if grads is None else _rule(grads, tuple(tuple(saves.index(k) for k in p) for p in params))
    RECORDS[name] = OpRecord(name, arity, function, grads, saves, rule, method, inplace, export)


def _attach(rec: OpRecord, out: Tensor, a: Any, b: Any) -> None:
    """Record the autograd node of ``out = rec(a, b)``, keeping what the rules need (``out`` detached: no cycle)."""
    saved = tuple([out.detach() if k == "out" else a if k == "x" else b for k in rec.saves])
    inputs = (a,) if rec.arity == 1 else (a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None)
    assert rec.rule is not None
    record(out, rec.title, inputs, rec.rule, saved)


def _rule(grads: tuple[GradRule, ...], picks: tuple[tuple[int, ...], ...]) -> Callable[[Node, Tensor], tuple[Any, ...]]:
    """The node's rule: each input's gradient from ``g`` and the saved values its rule names, where needed."""

    def rule(n: Node, g: Tensor) -> tuple[Any, ...]:
        s = n.saved
        return tuple(
            [fn(g, *[s[i] for i in idx]) if need else None for fn, idx, need in zip(grads, picks, n.needs, strict=True)]
        )

    return rule


def inplace_function(rec: OpRecord) -> Callable[[Tensor], Tensor]:
    """``Tensor.<name>_`` of a unary record: written through the tensor's view, recorded when autograd needs it."""
    name = rec.name
    float_only = OPS[name].float_only

    def function(t: Tensor) -> Tensor:
        if float_only and not t.dtype.is_floating:  # PyTorch: the float result cannot be stored in place
            raise RuntimeError(f"{name}_: result type float32 can't be cast to the desired output type {t.dtype.name}")
        if check_inplace(t, name + "_"):
            with autocast_off():  # in place keeps the tensor's dtype, autocast or not (PyTorch's rule)
                return rebase_inplace(t, rec.function(alias(t)))
        return write_into(t, name, t)

    function.__name__ = function.__qualname__ = name + "_"
    function.__doc__ = f"In-place ``{name}``."
    return function
