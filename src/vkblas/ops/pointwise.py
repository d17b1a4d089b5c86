"""Elementwise ops with their backward rules, as a table (PyTorch's derivatives.yaml in miniature).

Each rule takes the recorded node and the incoming gradient and returns one gradient per input; the engine sums
them back to each input's shape, so rules never think about broadcasting. ``x``/``y`` are the inputs, ``out`` the
result (saved as a detached alias so the graph holds no reference cycle).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..autograd import Node, is_grad_enabled, record
from ..dtypes import float32
from ..tensor import Tensor
from ._core import alias, check_inplace, elementwise, rebase_inplace, write_into

G = Tensor


def _ew(op: str, *a: Any) -> Tensor:
    return elementwise(op, *a)


# name -> (what to save, rule). Saved names: "x", "y" (inputs), "out".
UNARY_RULES: dict[str, tuple[str, Callable[[Node, G], tuple[Any, ...]]]] = {
    "neg": ("", lambda n, g: (-g,)),
    "exp": ("out", lambda n, g: (g * n.saved[0],)),
    "log": ("x", lambda n, g: (g / n.saved[0],)),
    "sqrt": ("out", lambda n, g: (g / (2 * n.saved[0]),)),
    "rsqrt": ("out", lambda n, g: (g * _ew("mul", _ew("square", n.saved[0]), n.saved[0]) * -0.5,)),
    "abs": ("x", lambda n, g: (g * _ew("sign", n.saved[0]),)),
    "sign": ("", lambda n, g: (g * 0,)),
    "sin": ("x", lambda n, g: (g * _ew("cos", n.saved[0]),)),
    "cos": ("x", lambda n, g: (-(g * _ew("sin", n.saved[0])),)),
    "tanh": ("out", lambda n, g: (_ew("tanh_grad", g, n.saved[0]),)),
    "sigmoid": ("out", lambda n, g: (_ew("sigmoid_grad", g, n.saved[0]),)),
    "relu": ("x", lambda n, g: (_ew("relu_grad", g, n.saved[0]),)),
    "silu": ("x", lambda n, g: (_ew("silu_grad", g, n.saved[0]),)),
    "gelu": ("x", lambda n, g: (_ew("gelu_grad", g, n.saved[0]),)),
    "gelu_tanh": ("x", lambda n, g: (_ew("gelu_tanh_grad", g, n.saved[0]),)),
    "square": ("x", lambda n, g: (g * n.saved[0] * 2,)),
    "reciprocal": ("out", lambda n, g: (-(g * _ew("square", n.saved[0])),)),
}


def _pick_half(g: G, a: Any, b: Any) -> G:
    """Gradient share of ``a`` in maximum(a, b): all where a wins, half on ties (PyTorch's rule)."""
    share = _ew("gt", a, b).to(g.dtype) + _ew("eq", a, b).to(g.dtype) * 0.5
    return g * share


BINARY_RULES: dict[str, tuple[str, Callable[[Node, G], tuple[Any, ...]]]] = {
    "add": ("", lambda n, g: (g, g)),
    "sub": ("", lambda n, g: (g, -g)),
    "mul": ("xy", lambda n, g: (g * n.saved[1] if n.needs[0] else None, g * n.saved[0] if n.needs[1] else None)),
    "div": (
        "y,out",
        lambda n, g: (g / n.saved[0] if n.needs[0] else None, -(g * n.saved[1]) / n.saved[0] if n.needs[1] else None),
    ),
    "pow": (
        "xy,out",
        lambda n, g: (
            g * n.saved[1] * _ew("pow", n.saved[0], n.saved[1] - 1) if n.needs[0] else None,
            g * n.saved[2] * (_ew("log", n.saved[0]) if isinstance(n.saved[0], Tensor) else math.log(n.saved[0]))
            if n.needs[1]
            else None,
        ),
    ),
    "maximum": ("xy", lambda n, g: (_pick_half(g, n.saved[0], n.saved[1]), _pick_half(g, n.saved[1], n.saved[0]))),
    "minimum": ("xy", lambda n, g: (_pick_half(g, n.saved[1], n.saved[0]), _pick_half(g, n.saved[0], n.saved[1]))),
}

_SAVE_PARSE = {
    "": (),
    "x": ("x",),
    "out": ("out",),
    "xy": ("x", "y"),
    "y,out": ("y", "out"),
    "xy,out": ("x", "y", "out"),
}


def _saved(spec: str, x: Any, y: Any, out: Tensor) -> tuple[Any, ...]:
    pick = {"x": x, "y": y, "out": out.detach()}
    return tuple(pick[k] for k in _SAVE_PARSE[spec])


def _title(op: str) -> str:
    return "".join(p.capitalize() for p in op.split("_")) + "Backward"


def unary(op: str, x: Tensor) -> Tensor:
    out = elementwise(op, x)
    if x.requires_grad and is_grad_enabled():
        save, rule = UNARY_RULES[op]
        record(out, _title(op), (x,), rule, _saved(save, x, None, out))
    return out


def binary(op: str, a: Any, b: Any) -> Tensor:
    out = elementwise(op, a, b)
    if (getattr(a, "requires_grad", False) or getattr(b, "requires_grad", False)) and is_grad_enabled():
        save, rule = BINARY_RULES[op]
        inputs = (a if isinstance(a, Tensor) else None, b if isinstance(b, Tensor) else None)
        record(out, _title(op), inputs, rule, _saved(save, a, b, out))
    return out


def _make_unary(op: str) -> Callable[[Tensor], Tensor]:
    def f(input: Tensor) -> Tensor:  # noqa: A002 - PyTorch's argument name
        return unary(op, input)

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"Elementwise ``{op}`` (differentiable)."
    return f


def _make_binary(op: str) -> Callable[[Any, Any], Tensor]:
    def f(input: Any, other: Any) -> Tensor:  # noqa: A002
        return binary(op, input, other)

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"Elementwise ``{op}`` with broadcasting (differentiable)."
    return f


def _make_compare(op: str) -> Callable[[Any, Any], Tensor]:
    def f(input: Any, other: Any) -> Tensor:  # noqa: A002
        return elementwise(op, input, other)

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"Elementwise ``{op}`` giving a bool tensor (not differentiable)."
    return f


UNARY = {op: _make_unary(op) for op in UNARY_RULES}
BINARY = {op: _make_binary(op) for op in BINARY_RULES}
COMPARE = {op: _make_compare(op) for op in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or")}


def logical_not(input: Tensor) -> Tensor:  # noqa: A002
    return elementwise("logical_not", input.to(dtype=input.dtype))


def _scaled(other: Any, alpha: float) -> Any:
    return binary("mul", other, alpha) if isinstance(other, Tensor) else other * alpha


def add(input: Any, other: Any, alpha: float = 1) -> Tensor:  # noqa: A002
    return binary("add", input, other if alpha == 1 else _scaled(other, alpha))


def sub(input: Any, other: Any, alpha: float = 1) -> Tensor:  # noqa: A002
    return binary("sub", input, other if alpha == 1 else _scaled(other, alpha))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return unary("gelu" if approximate == "none" else "gelu_tanh", input)


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
            out = binary("maximum", out, min)
        if max is not None:
            out = binary("minimum", out, max)
        return out
    if min is None:
        out = elementwise("minimum", input, hi)
    elif max is None:
        out = elementwise("maximum", input, lo)
    else:
        out = elementwise("clamp", input, lo, hi)

    def rule(n: Node, g: G) -> tuple[Any]:
        x = n.saved[0]
        keep = _ew("logical_and", _ew("ge", x, n.extra["lo"]), _ew("le", x, n.extra["hi"]))
        return (where(keep, g, 0.0),)

    return record(
        out,
        "ClampBackward",
        (input,),
        rule,
        (input,),
        lo=lo if min is not None else -3.4e38,
        hi=hi if max is not None else 3.4e38,
    )


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
def _inplace(name: str, op: str, t: Tensor, *operands: Any, functional: Callable[..., Tensor] | None = None) -> Tensor:
    if check_inplace(t, name):
        assert functional is not None, name
        return rebase_inplace(t, functional(alias(t), *operands))
    return write_into(t, op, t, *operands)


def add_(t: Tensor, other: Any, alpha: float = 1) -> Tensor:
    if alpha != 1:
        other = binary("mul", other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace("add_", "add", t, other, functional=lambda a, o: binary("add", a, o))


def sub_(t: Tensor, other: Any, alpha: float = 1) -> Tensor:
    return add_(t, other, -alpha)


def mul_(t: Tensor, other: Any) -> Tensor:
    return _inplace("mul_", "mul", t, other, functional=lambda a, o: binary("mul", a, o))


def div_(t: Tensor, other: Any) -> Tensor:
    return _inplace("div_", "div", t, other, functional=lambda a, o: binary("div", a, o))


def pow_(t: Tensor, other: Any) -> Tensor:
    return _inplace("pow_", "pow", t, other, functional=lambda a, o: binary("pow", a, o))


def _unary_inplace(op: str) -> Callable[[Tensor], Tensor]:
    def f(t: Tensor) -> Tensor:
        if check_inplace(t, op + "_"):
            return rebase_inplace(t, unary(op, alias(t)))
        return write_into(t, op, t)

    f.__name__ = op + "_"
    return f


sqrt_, neg_, exp_, relu_ = (_unary_inplace(o) for o in ("sqrt", "neg", "exp", "relu"))


def clamp_(t: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
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
        from ..creation import tensor

        src = tensor(src, dtype=t.dtype, device=t.device)
    if src._backend is not t._backend:
        src = src.to(t.device)
    if check_inplace(t, "copy_") or (is_grad_enabled() and src.requires_grad):
        return rebase_inplace(t, binary("add", src, 0) if t.dtype is src.dtype else src.to(t.dtype))
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
    return write_into(t, "lerp", t, end, float(weight))


def to_float(t: Tensor) -> Tensor:
    return t if t.dtype.is_floating else t.to(float32)
