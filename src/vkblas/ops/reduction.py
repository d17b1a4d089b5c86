"""Reductions (sum, max, min, arg*), and what is composed from them: mean, var, std, logsumexp, softmax."""

from __future__ import annotations

import builtins
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from ..autograd import Node, no_grad, record
from ..backend.elementwise import define
from ..dtypes import BYTES, bool_, float32, int32, to_dtype
from ..tensor import Tensor, empty, norm_dim
from ._core import cast, elementwise, full, norm_dims, numpy_aliases
from .autocast import fp32
from .elementwise import abs, exp, log, maximum, minimum, sqrt, square
from .pointwise import where

# the softmax family, fused (rows reduced by the caller: mx = row max, s = row sum)
define("exp_sub", lambda m, x, mx: m.exp(x - mx))
define("log_softmax_out", lambda m, x, mx, s: x - mx - m.log(s))
define("log_softmax_grad", lambda m, g, y, s: g - m.exp(y) * s)
define("softmax_grad", lambda m, g, y, s: y * (g - s))

Dims = int | Sequence[int] | None
ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _raw_reduce(op: str, x: Tensor, axes: tuple[int, ...], keepdim: bool, name: str | None = None) -> Tensor:
    """The backend reduction; ``name`` is the op the user called (named in the error for an empty dim)."""
    if x.dtype in BYTES:  # 8-bit storage reduces in int32; max/min give the input's dtype back
        out = _raw_reduce(op, cast(x, int32), axes, keepdim, name)
        return cast(out, x.dtype) if op in ("max", "min") else out
    if op not in ("sum", "prod"):
        for a in axes:
            if x.shape[a] == 0:
                raise IndexError(
                    f"{name or op}(): Expected reduction dim {a} to have non-zero size (input shape {x.shape})"
                )
    odt = int32 if op.startswith("arg") else x.dtype
    out = empty(_reduced_shape(x.shape, axes, False), odt, x._backend)
    if out.numel():
        x._backend.reduce(op, out._view, x._view, axes)
    return out.reshape(_reduced_shape(x.shape, axes, True)) if keepdim else out


def _expand_back(g: Tensor, shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> Tensor:
    if not keepdim:
        g = g.reshape(_reduced_shape(shape, axes, True))
    return g.expand(shape)


def accumulated(x: Tensor, dtype: Any) -> Tensor:
    """The input of a sum or product: cast to ``dtype`` when given, else bool and 8-bit ints as int32 (PyTorch:
    int64)."""
    if dtype is not None:
        return x.to(to_dtype(dtype))
    x = fp32(x)  # under autocast a float16 sum is computed and returned in float32 (PyTorch's list)
    return cast(x, int32) if x.dtype is bool_ or x.dtype in BYTES else x


@numpy_aliases
def sum(input: Tensor, dim: Dims = None, keepdim: bool = False, dtype: Any = None) -> Tensor:  # noqa: A001,A002
    x = accumulated(input, dtype)
    axes = norm_dims(dim, x.ndim)
    if not axes and dim is not None and not isinstance(dim, int):
        return x
    out = _raw_reduce("sum", x, axes, keepdim)
    return record(
        out, "SumBackward", (x,), lambda n, g: (_expand_back(g, n.extra["shape"], axes, keepdim),), shape=x.shape
    )


@numpy_aliases
def prod(input: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """Product over ``dim`` (all dims when None); 1 over an empty dim (bool and ints give int32). Its gradient is
    the product of the other elements, also where some are zero (not ``out / x``)."""
    x = accumulated(input, dtype)
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"prod(): dim must be an int or None, got {dim!r}")
    axes = norm_dims(dim, x.ndim)
    out = _raw_reduce("prod", x, axes, keepdim)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        # d out / d x_i = the product of the other elements: out / x_i where no element is 0; else, with p the
        # product of the non-zero elements, p for the only zero and 0 * p (or 0 * p / x_i) for the rest (NaN when
        # p is inf or NaN, as the product of the others is in PyTorch)
        xs, o = n.saved
        zero = elementwise("eq", xs, 0)
        zeros = sum(cast(zero, int32), axes, keepdim=True)
        p = _raw_reduce("prod", where(zero, 1.0, xs), axes, True)
        gk = _expand_back(g, xs.shape, axes, keepdim)
        ok = _expand_back(o, xs.shape, axes, keepdim)
        at_zero = where(elementwise("eq", zeros, 1), p, p * 0.0)
        others = where(zero, at_zero, (p / xs) * 0.0)
        return (gk * where(elementwise("eq", zeros, 0), ok / xs, others),)

    return record(out, "ProdBackward", (x,), rule, (x, out.detach()))


@numpy_aliases
def mean(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    if not input.dtype.is_floating:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be floating point, got {input.dtype!r}"
        )
    axes = norm_dims(dim, input.ndim)
    count = 1
    for a in axes:
        count *= input.shape[a]
    # dtype=: a float16 mean stays float16 under autocast too (summed in float32), as PyTorch's
    return sum(input, axes, keepdim, dtype=input.dtype) * (1.0 / count if count else float("nan"))


def _minmax(op: str, input: Tensor, dim: int | None, keepdim: bool) -> Any:
    if dim is not None and input.ndim == 0:  # dim 0 / -1 of a 0-d tensor: the value itself, index 0
        norm_dim(dim, 0)
        values = record(input.clone(), op.capitalize() + "Backward", (input,), lambda n, g: (g,))
        return ValuesIndices(values, input.new_zeros((), dtype=int32))
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0.")
        out = _raw_reduce(op, input, tuple(range(input.ndim)), False)

        def rule_all(n: Node, g: Tensor) -> tuple[Tensor]:
            x, m = n.saved
            # ties share the gradient evenly, as in PyTorch; a NaN result is tied with every NaN
            tie = elementwise("logical_or", elementwise("eq", x, m), elementwise("ne", x, x) & (m != m))
            mask = cast(tie, x.dtype)
            return (mask * (g / sum(mask)),)

        return record(out, op.capitalize() + "Backward", (input,), rule_all, (input, out.detach()))
    d = norm_dim(dim, input.ndim)
    values = _raw_reduce(op, input, (d,), keepdim)
    indices = _raw_reduce("arg" + op, input, (d,), keepdim, op)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        idx = indices if keepdim else indices.unsqueeze(d)
        gg = g if keepdim else g.unsqueeze(d)
        return (n.extra["zeros"]().scatter_add(d, idx, gg),)

    record(values, op.capitalize() + "Backward", (input,), rule, zeros=lambda: input.new_zeros(input.shape))
    return ValuesIndices(values, indices)


@numpy_aliases
def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001,A002
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    return _minmax("max", input, dim, keepdim)


@numpy_aliases
def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001,A002
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    return _minmax("min", input, dim, keepdim)


def _extreme(op: str, input: Tensor, dim: Dims, keepdim: bool) -> Tensor:
    """amax / amin: the gradient is shared evenly between ties (PyTorch)."""
    name = "amax" if op == "max" else "amin"
    axes = norm_dims(dim, input.ndim)
    if dim is None and input.numel() == 0:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
            f"with the 'dim' argument (input shape {input.shape})."
        )
    out = _raw_reduce(op, input, axes, keepdim, name)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        x, m = n.saved
        mk = m if keepdim else m.reshape(_reduced_shape(x.shape, axes, True))
        mask = cast(elementwise("eq", x, mk), x.dtype)
        cnt = sum(mask, axes, keepdim=True)
        gk = g if keepdim else g.reshape(_reduced_shape(x.shape, axes, True))
        return (mask * (gk / cnt),)

    return record(out, name.capitalize() + "Backward", (input,), rule, (input, out.detach()))


@numpy_aliases
def amax(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return _extreme("max", input, dim, keepdim)


@numpy_aliases
def amin(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return _extreme("min", input, dim, keepdim)


def _arg(op: str, input: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    if dim is None or input.ndim == 0:
        if dim is not None:
            norm_dim(dim, 0)
        if input.numel() == 0:
            raise IndexError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0.")
        flat = input.reshape(-1)
        out = _raw_reduce(op, flat, (0,), False)
        return out.reshape((1,) * input.ndim) if keepdim else out
    return _raw_reduce(op, input, (norm_dim(dim, input.ndim),), keepdim)


@numpy_aliases
def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return _arg("argmax", input, dim, keepdim)


@numpy_aliases
def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return _arg("argmin", input, dim, keepdim)


def _count(input: Tensor, op: str, dim: Dims, keepdim: bool) -> Tensor:
    """How many elements are ``op`` (``ne`` / ``eq``) 0 along ``dim``: all/any by counting, so an empty reduction
    gives PyTorch's True / False (a count of 0) instead of a max/min with no identity."""
    b = elementwise(op, input, False if input.dtype is bool_ else 0)
    return _raw_reduce("sum", cast(b, int32), norm_dims(dim, input.ndim), keepdim)


@numpy_aliases
def all(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    return elementwise("eq", _count(input, "eq", dim, keepdim), 0)


@numpy_aliases
def any(input: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    return elementwise("gt", _count(input, "ne", dim, keepdim), 0)


@numpy_aliases
def var(
    input: Tensor,
    dim: Dims = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:  # noqa: A002
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = norm_dims(dim, input.ndim)
    n = 1
    for a in axes:
        n *= input.shape[a]
    # sum / max(0, n - correction), as PyTorch: inf past the count (nan where the sum is 0, e.g. one element)
    scale = 1.0 / (n - correction) if n - correction > 0 else float("inf")
    grad_scale = 2.0 / (n - correction) if n != correction else float("inf")  # unclamped, as PyTorch's
    with no_grad():
        centered = input - mean(input, axes, keepdim=True)
        out = sum(square(centered), axes, keepdim) * scale

    def rule(node: Node, g: Tensor) -> tuple[Tensor]:
        # PyTorch's rule, 2 (x - mean) g / (n - correction): the mean's own gradient term vanishes mathematically
        # (it would turn one infinite element into NaN gradients for its whole slice)
        return (_expand_back(g, input.shape, axes, keepdim) * node.saved[0] * grad_scale,)

    return record(out, "VarBackward", (input,), rule, (centered,))


@numpy_aliases
def std(
    input: Tensor,
    dim: Dims = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:  # noqa: A002
    return sqrt(var(input, dim, unbiased, keepdim, correction=correction))


@numpy_aliases
def logsumexp(input: Tensor, dim: Dims, keepdim: bool = False) -> Tensor:  # noqa: A002
    axes = norm_dims(dim, input.ndim)
    if builtins.any(input.shape[a] == 0 for a in axes):  # log(sum of nothing) = log 0
        shape = _reduced_shape(input.shape, axes, keepdim)
        return record(
            full(shape, float("-inf"), input.dtype, input._backend),
            "LogsumexpBackward",
            (input,),
            lambda n, g: (g.new_zeros(input.shape),),
        )
    with no_grad():
        m = amax(input, axes, keepdim=True)
        m = where(elementwise("eq", abs(m), float("inf")), 0.0, m)  # all -inf rows stay -inf, not nan
        out = log(sum(exp(input - m), axes, keepdim=True)) + m

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:  # PyTorch's: g * exp(x - logsumexp(x))
        x, o = n.saved
        return (_expand_back(g, x.shape, axes, keepdim) * exp(x - o),)

    out = record(out, "LogsumexpBackward", (input,), rule, (input, out))
    return out if keepdim else out.reshape(_reduced_shape(input.shape, axes, False))


def _softmax_rows(x: Tensor, dim: int, log: bool) -> Tensor:
    """softmax / log_softmax as one node: 4 dispatches forward, 2 backward (instead of ~10 and ~15 composed)."""
    if x.ndim == 0:  # dim 0 / -1 of a 0-d tensor: a row of one
        norm_dim(dim, 0)
        return _softmax_rows(x.reshape(1), 0, log).reshape(())
    d = norm_dim(dim, x.ndim)
    mx = _raw_reduce("max", x, (d,), True) if x.numel() else x.sum(d, keepdim=True)
    e = elementwise("exp_sub", x, mx)
    s = _raw_reduce("sum", e, (d,), True)
    out = elementwise("log_softmax_out", x, mx, s) if log else elementwise("div", e, s)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        y = n.saved[0]
        if log:
            return (elementwise("log_softmax_grad", g, y, _raw_reduce("sum", g, (d,), True)),)
        return (elementwise("softmax_grad", g, y, _raw_reduce("sum", elementwise("mul", g, y), (d,), True)),)

    return record(out, "LogSoftmaxBackward" if log else "SoftmaxBackward", (x,), rule, (out.detach(),))


@numpy_aliases
def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002
    x = fp32(input) if dtype is None else input.to(dtype)
    return _softmax_rows(x if x.dtype.is_floating else x.to(float32), dim, log=False)


@numpy_aliases
def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002
    x = fp32(input) if dtype is None else input.to(dtype)
    return _softmax_rows(x if x.dtype.is_floating else x.to(float32), dim, log=True)
