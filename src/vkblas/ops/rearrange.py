"""Ops that rearrange elements: ``flip``, ``roll``, ``tril`` / ``triu``, ``diagonal`` (a view), ``Tensor.unfold``
(a view of sliding windows) and ``repeat_interleave``.

They are composed from views and the elementwise / gather / scatter primitives. Index tensors they need (the
positions of a triangle, of the windows) come from :func:`iota`, an ``arange`` uploaded once per device and
length, so that these ops can run inside a graph capture (which forbids uploads) once they ran eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..autograd import Node, record
from ..backend.base import Backend, View
from ..dtypes import INT32_MAX, int32
from ..tensor import Tensor, from_host, norm_dim
from ._core import cast, contiguous_copy, elementwise, full, write_into
from .indexing import check_index, index_select
from .pointwise import where
from .scan import cumsum, flip_view
from .shape import cat

_IOTA: dict[tuple[int, int], Tensor] = {}


def iota(backend: Backend, n: int) -> Tensor:
    """int32 ``arange(n)`` on ``backend``, uploaded once per (device, n)."""
    key = (id(backend), n)
    t = _IOTA.get(key)
    if t is None:
        t = _IOTA[key] = from_host(np.arange(n, dtype=np.int32), int32, backend)
    return t


def _dims(dims: int | Sequence[int], ndim: int, op: str) -> tuple[int, ...]:
    ds = (dims,) if isinstance(dims, int) else tuple(dims)
    out = tuple(norm_dim(d, ndim) for d in ds)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dims {ds} has a repeated dim")
    return out


def flip(input: Tensor, dims: int | Sequence[int]) -> Tensor:  # noqa: A002
    """A copy of ``input`` with the order of elements reversed along ``dims``."""
    ds = _dims(dims, input.ndim, "flip")
    v = input._view
    for d in ds:
        v = flip_view(v, d)
    out = contiguous_copy(Tensor._make(v, input._backend))
    return record(out, "FlipBackward", (input,), lambda n, g: (flip(g, ds),))


def roll(input: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # noqa: A002
    """Elements shifted by ``shifts`` along ``dims`` (those pushed off one end come back at the other); with no
    ``dims``, over the flattened tensor."""
    if dims is None:
        if not isinstance(shifts, int) and len(shifts) != 1:
            raise RuntimeError(f"roll: shifts {shifts} needs dims (one shift per dim)")
        s = shifts if isinstance(shifts, int) else shifts[0]
        return roll(input.reshape(-1), s, 0).reshape(input.shape)
    sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    ds = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(sh) != len(ds):
        raise RuntimeError(f"roll: shifts {sh} and dims {ds} must have the same length")
    out = input
    for s, dim in zip(sh, ds, strict=True):
        d = norm_dim(dim, input.ndim)
        n = input.shape[d]
        k = s % n if n else 0
        if k:
            out = cat([out.narrow(d, n - k, k), out.narrow(d, 0, n - k)], d)
    return out if out is not input else input.clone()


def _triangle(input: Tensor, diagonal: int, lower: bool) -> Tensor:
    if input.ndim < 2:
        name = "tril" if lower else "triu"
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions, got {input.shape}")
    rows, cols = input.shape[-2:]
    b = input._backend
    offset = elementwise("sub", iota(b, cols).unsqueeze(0), iota(b, rows).unsqueeze(1))  # j - i
    keep = elementwise("le" if lower else "ge", offset, int(diagonal))
    return where(keep, input, False if input.dtype.is_bool else 0)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """The lower triangle of the last two dims (``j - i <= diagonal``), zeros elsewhere."""
    return _triangle(input, diagonal, True)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """The upper triangle of the last two dims (``j - i >= diagonal``), zeros elsewhere."""
    return _triangle(input, diagonal, False)


def _diagonal_view(v: View, offset: int, d1: int, d2: int) -> View:
    n1, n2, s1, s2 = v.shape[d1], v.shape[d2], v.strides[d1], v.strides[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    start = v.offset + (offset * s2 if offset >= 0 else -offset * s1) if length else v.offset
    keep = [i for i in range(len(v.shape)) if i not in (d1, d2)]
    shape = tuple(v.shape[i] for i in keep) + (length,)
    strides = tuple(v.strides[i] for i in keep) + (s1 + s2,)
    return View(v.storage, shape, strides, start)


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """A view of the diagonal ``(i, i + offset)`` of dims ``dim1`` and ``dim2``, as the last dim."""
    d1, d2 = norm_dim(dim1, input.ndim), norm_dim(dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 cannot be identical, got {dim1} and {dim2}")
    out = Tensor._make(_diagonal_view(input._view, offset, d1, d2), input._backend)
    shape = input.shape

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        z = g.new_zeros(shape)
        write_into(Tensor._make(_diagonal_view(z._view, offset, d1, d2), z._backend), "copy", g)
        return (z,)

    return record(out, "DiagonalBackward", (input,), rule)


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:  # noqa: A002
    """``Tensor.unfold``: a view of every window of ``size`` elements along ``dimension``, ``step`` apart, as a
    new last dim (the windows' dim replaces ``dimension``). Overlapping windows share memory; their gradients add."""
    d = norm_dim(dimension, input.ndim)
    n = input.shape[d] if input.ndim else 1
    if size < 0 or size > n:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    v = input._view
    windows = (n - size) // step + 1
    if not input.ndim:
        out_view = View(v.storage, (size,), (0,), v.offset)
    else:
        shape = v.shape[:d] + (windows,) + v.shape[d + 1 :] + (size,)
        strides = v.strides[:d] + (v.strides[d] * step,) + v.strides[d + 1 :] + (v.strides[d],)
        out_view = View(v.storage, shape, strides, v.offset)
    out = Tensor._make(out_view, input._backend)
    in_shape = input.shape

    def rule(node: Node, g: Tensor) -> tuple[Tensor]:
        if not in_shape:
            return (g.sum(),)
        b = g._backend
        # window w, tap k reads position w * step + k: the index of every (w, k), in that order
        pos = elementwise("add", elementwise("mul", iota(b, windows).unsqueeze(1), step), iota(b, size).unsqueeze(0))
        moved = g.permute(*range(d + 1), g.ndim - 1, *range(d + 1, g.ndim - 1))  # taps right after the windows
        flat = moved.reshape(*in_shape[:d], windows * size, *in_shape[d + 1 :])
        return (g.new_zeros(in_shape).index_add(d, pos.reshape(-1), flat),)

    return record(out, "UnfoldBackward", (input,), rule)


def _segment_of(repeats: Tensor, total: int) -> Tensor:
    """For each of ``total`` output positions, the index of the segment (of ``repeats[i]`` positions each) it lies
    in: the count of segment ends at or before it (a scatter-add of ones at the ends, then a cumulative sum)."""
    ends = cumsum(repeats, 0)
    ones = repeats.new_ones(ends.shape, dtype=int32)
    marks = full((total + 1,), 0, int32, repeats._backend).scatter_add(0, elementwise("minimum", ends, total), ones)
    return cumsum(marks[:total], 0)


def repeat_interleave(
    input: Tensor,  # noqa: A002
    repeats: int | Tensor | None = None,
    dim: int | None = None,
    *,
    output_size: int | None = None,
) -> Tensor:
    """Each element (or slice along ``dim``) repeated ``repeats`` times in place; ``repeats`` an int or a 1-D
    tensor (one count per slice). ``repeat_interleave(repeats_tensor)`` alone gives the indices
    ``[0]*r0 + [1]*r1 + ...``. A tensor ``repeats`` without ``output_size`` reads the total back (a sync point)."""
    if repeats is None:
        counts = input
        if counts.ndim != 1 or counts.dtype.is_floating:
            raise RuntimeError(f"repeat_interleave: repeats must be a 1-D integer tensor, got {counts.shape}")
        return repeat_interleave(iota(counts._backend, counts.shape[0]), counts, 0, output_size=output_size)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else norm_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if isinstance(repeats, int) or (isinstance(repeats, Tensor) and repeats.numel() == 1 and n != 1):
        r = repeats if isinstance(repeats, int) else int(repeats.item())
        if r < 0:
            raise RuntimeError(f"repeat_interleave: repeats can not be negative, got {r}")
        if not x.ndim:
            x = x.reshape(1)
        big = x.unsqueeze(d + 1).expand(*x.shape[: d + 1], r, *x.shape[d + 1 :])
        return big.reshape(*x.shape[:d], n * r, *x.shape[d + 1 :])
    if repeats.ndim != 1 or repeats.shape[0] != n or repeats.dtype.is_floating:
        raise RuntimeError(
            f"repeat_interleave: repeats must be an int or a 1-D integer tensor of size {n} (input shape "
            f"{input.shape}, dim {dim}), got {repeats.dtype!r} of shape {repeats.shape}"
        )
    counts = cast(repeats, int32)
    check_index(counts, 0, INT32_MAX, "repeat_interleave: repeats can not be negative, got {bad}", RuntimeError)
    total = int(counts.sum().item()) if output_size is None else int(output_size)
    return index_select(x, d, _segment_of(counts, total))
