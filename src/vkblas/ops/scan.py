"""Prefix sums and products (``cumsum``, ``cumprod``) on the backend's ``scan`` primitive (``prod`` is a reduction:
``ops/reduction.py``).

Backward rules: ``cumsum``'s is the reversed cumulative sum of ``g``, which is the same primitive over views that
walk the axis backwards (negative strides, no copy). ``cumprod``'s divides by the input only where that is exact:
before a row's first zero; the first zero's own gradient is the product of the other factors, and everything after
it gets zero, as in PyTorch.
"""

from __future__ import annotations

from ..autograd import Node, record
from ..backend.base import View
from ..dtypes import DType, int32
from ..tensor import Tensor, empty, norm_dim
from ._core import cast, elementwise
from .pointwise import where
from .reduction import accumulated


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


def cumsum(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """Cumulative sum along ``dim``."""
    x = accumulated(input, dtype)
    d = norm_dim(dim, x.ndim)
    out = _scan("sum", x, d) if x.ndim else x.clone()
    return record(out, "CumsumBackward", (x,), lambda n, g: (_scan("sum", g, d, reverse=True) if g.ndim else g,))


def _cumprod_grad(g: Tensor, x: Tensor, out: Tensor, d: int) -> Tensor:
    """PyTorch's O(n) rule (``cumprod_backward``), in its order of operations so that infinities and NaN give its
    results. With z1 and z2 a row's first and second zeros: before z1, the reversed cumulative sum of ``g * out``
    over [0, z1) divided by ``x``; at z1, ``prod(x[:z1]) * sum_j g_j * prod(x[z1 + 1 : min(j, z2 - 1) + 1])``
    with ``g_j`` zeroed outside [z1, z2); zero after z1."""
    zero = elementwise("eq", x, 0)
    zeros_so_far = _scan("sum", cast(zero, int32), d)
    before = elementwise("eq", zeros_so_far, 0)  # positions before the row's first zero (x != 0 there)
    one_zero = elementwise("eq", zeros_so_far, 1)  # [z1, z2)
    first = elementwise("logical_and", zero, one_zero)
    before_zero = _scan("sum", where(before, g * out, 0.0), d, reverse=True) / where(before, x, 1.0)
    between = elementwise("logical_and", one_zero, elementwise("logical_not", first))  # (z1, z2)
    tail = _scan("prod", where(between, x, 1.0), d)
    after = _scan("sum", tail * where(one_zero, g, 0.0), d, reverse=True)  # at z1: the sum over j >= z1
    at_zero = _scan("prod", where(before, x, 1.0), d) * after  # prod(x[:z1]) at z1
    return where(before, before_zero, where(first, at_zero, 0.0))


def cumprod(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """Cumulative product along ``dim``."""
    x = accumulated(input, dtype)
    d = norm_dim(dim, x.ndim)
    if not x.ndim or x.shape[d] == 1:  # a product of one factor: the gradient passes (PyTorch's, also for NaN)
        return record(x.clone(), "CumprodBackward", (x,), lambda n, g: (g,))
    out = _scan("prod", x, d)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        xs, o = n.saved
        return (_cumprod_grad(g, xs, o, d),)

    return record(out, "CumprodBackward", (x,), rule, (x, out.detach()))
