"""Prefix sums and products (``cumsum``, ``cumprod``) on the backend's ``scan`` primitive, and ``prod``.

Backward rules: ``cumsum``'s is the reversed cumulative sum of ``g``, which is the same primitive over views that
walk the axis backwards (negative strides, no copy). ``cumprod``'s and ``prod``'s divide by the input only where
that is exact: before a row's first zero; the first zero's own gradient is the product of the other factors, and
everything after it gets zero, as in PyTorch.
"""

from __future__ import annotations

from typing import Any

from ..autograd import Node, record
from ..backend.base import View
from ..dtypes import BYTES, DType, bool_, int32, to_dtype
from ..tensor import Tensor, empty, norm_dim
from ._core import cast, elementwise
from .pointwise import where


def flip_view(v: View, dim: int) -> View:
    """``v`` walked backwards along ``dim`` (a negative stride from its last element; no copy)."""
    n, s = v.shape[dim], v.strides[dim]
    strides = v.strides[:dim] + (-s,) + v.strides[dim + 1 :]
    return View(v.storage, v.shape, strides, v.offset + (n - 1) * s if n else v.offset)


def _scan(op: str, x: Tensor, d: int, reverse: bool = False) -> Tensor:
    """The raw inclusive scan of ``x`` along ``d`` (from the end when ``reverse``); no autograd."""
    out = empty(x.shape, x.dtype, x._backend)
    if out.numel():
        xv, ov = (flip_view(x._view, d), flip_view(out._view, d)) if reverse else (x._view, out._view)
        x._backend.scan(op, ov, xv, d)
    return out


def _int_promoted(x: Tensor, dtype: Any) -> Tensor:
    """PyTorch's accumulation dtype: ``dtype`` when given, else bool and 8-bit ints as int32 (PyTorch: int64)."""
    if dtype is not None:
        return x.to(to_dtype(dtype))
    return cast(x, int32) if x.dtype is bool_ or x.dtype in BYTES else x


def cumsum(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """Cumulative sum along ``dim``."""
    x = _int_promoted(input, dtype)
    d = norm_dim(dim, x.ndim)
    out = _scan("sum", x, d) if x.ndim else x.clone()
    return record(out, "CumsumBackward", (x,), lambda n, g: (_scan("sum", g, d, reverse=True) if g.ndim else g,))


def _cumprod_grad(g: Tensor, x: Tensor, out: Tensor, d: int) -> Tensor:
    zero = elementwise("eq", x, 0)
    zeros_so_far = _scan("sum", cast(zero, int32), d)
    before = elementwise("eq", zeros_so_far, 0)  # positions before the row's first zero (x != 0 there)
    first = elementwise("logical_and", zero, elementwise("eq", zeros_so_far, 1))
    before_zero = _scan("sum", g * out, d, reverse=True) / where(before, x, 1.0)
    others = _scan("prod", where(first, 1.0, x), d)  # the products with the first zero left out
    at_zero = _scan("sum", g * others, d, reverse=True)
    return where(before, before_zero, where(first, at_zero, 0.0))


def cumprod(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """Cumulative product along ``dim``."""
    x = _int_promoted(input, dtype)
    d = norm_dim(dim, x.ndim)
    if not x.ndim:
        return record(x.clone(), "CumprodBackward", (x,), lambda n, g: (g,))
    out = _scan("prod", x, d)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        xs, o = n.saved
        return (_cumprod_grad(g, xs, o, d),)

    return record(out, "CumprodBackward", (x,), rule, (x, out.detach()))


def _as_rows(x: Tensor, d: int | None) -> tuple[Tensor, Any]:
    """``x`` (detached) with the reduced dim last (all of ``x`` as one row for ``None``), and the map from that
    layout back to ``x``'s."""
    if d is None:
        return x.detach().reshape(-1), lambda t: t.reshape(x.shape)
    order = [i for i in range(x.ndim) if i != d] + [d]
    inverse = [order.index(i) for i in range(x.ndim)]
    return x.detach().permute(order), lambda t: t.permute(inverse)


def _prod_last(x: Tensor) -> Tensor:
    """Product over the last dim (no autograd): the last element of the cumulative product (1 when empty)."""
    n = x.shape[-1]
    if n == 0:
        return x.new_ones(x.shape[:-1])
    return _scan("prod", x, x.ndim - 1)[..., n - 1]


def _prod_rows_grad(g: Tensor, rows: Tensor, out: Tensor) -> Tensor:
    """d prod / d rows times ``g`` (both per row, over the last dim), exact with zeros in a row."""
    zero = elementwise("eq", rows, 0)
    count = cast(zero, int32).sum(-1, keepdim=True)
    # with exactly one zero in the row, that element's gradient is the product of the others
    others = _prod_last(where(zero, 1.0, rows)).unsqueeze(-1)
    grad = where(
        elementwise("eq", count, 0),
        out.unsqueeze(-1) / where(zero, 1.0, rows),
        where(elementwise("logical_and", zero, elementwise("eq", count, 1)), others, 0.0),
    )
    return grad * g.unsqueeze(-1)


def prod(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    keepdim: bool = False,
    *,
    dtype: DType | None = None,
) -> Tensor:
    """Product of all elements, or over ``dim`` (bool and ints give int32)."""
    x = _int_promoted(input, dtype)
    d = None if dim is None else norm_dim(dim, x.ndim)
    rows, back = _as_rows(x, d if x.ndim else None)
    out = _prod_last(rows)
    kept = out.detach()  # the rule keeps this (the result itself would hold its own node: a cycle)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        r, o = n.saved  # saved, so an in-place change of the input before backward is caught
        gr = g.squeeze(d) if d is not None and keepdim and x.ndim else g.reshape(o.shape)
        return (back(_prod_rows_grad(gr, r, o)),)

    result = out.unsqueeze(d) if d is not None and keepdim and x.ndim else out
    return record(result, "ProdBackward", (x,), rule, (rows, kept))
