"""Writing into positions named by an index, on the backend's ``scatter`` primitive: ``scatter``,
``scatter_reduce``, ``index_add`` / ``index_copy`` / ``index_fill``, ``masked_scatter``, ``nonzero``, and their
in-place ``Tensor`` methods.

``index_*`` take a 1-D index along one dim: it becomes a ``scatter`` index broadcast over the other dims with
stride 0 (no copy). Indices are range-checked like ``gather``'s (on an asynchronous device, at its next sync point).

Gradients (PyTorch's rules): a position that a scatter overwrote gets no gradient from its old value; ``sum`` /
``mean`` pass ``g`` (divided by the count) to every contributor; ``amax`` / ``amin`` share it evenly among the
contributors equal to the result; ``prod`` gives each contributor the product of the others (exact with zeros).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd import Node, record
from ..backend.base import View
from ..dtypes import BYTES, INT32_MAX, INT32_MIN, DType, float16, float32, int32
from ..tensor import Tensor, norm_dim
from ._core import alias, cast, check_inplace, elementwise, full, rebase_inplace, same_backend, write_into
from .indexing import _check_range, check_index, gather_unchecked, scatter_add, take_along
from .pointwise import where
from .rearrange import iota
from .scan import cumsum
from .shape import stack

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _raw(op: str, out: Tensor, d: int, index: Tensor, src: Tensor) -> Tensor:
    """``out`` (owned by the caller) with ``src`` scattered into it along ``d``; no autograd. float16 reductions
    accumulate in float32, 8-bit ones in int32 (there are no 8- or 16-bit atomics)."""
    if not index.numel():
        return out
    src_v = src if src.shape == index.shape else src[tuple(slice(0, n) for n in index.shape)]
    if op != "assign" and (out.dtype is float16 or out.dtype in BYTES):  # no 8- or 16-bit atomics
        wide_dtype = float32 if out.dtype is float16 else int32
        wide = cast(out, wide_dtype)
        _raw(op, wide, d, index, cast(src_v, wide_dtype))
        return write_into(out, "copy", wide)
    out._backend.scatter(op, out._view, d, index._view, src_v._view)
    out._view.storage.version += 1
    return out


def _checked_index(op: str, input: Tensor, d: int, index: Tensor, src: Tensor | None) -> Tensor:  # noqa: A002
    same_backend(op, [input, index] + ([src] if src is not None else []))
    if index.ndim != input.ndim or (src is not None and src.ndim != input.ndim):
        shapes = f"index {index.shape}, input {input.shape}" + (f" and src {src.shape}" if src is not None else "")
        raise RuntimeError(f"{op}: {shapes} must have the same number of dimensions")
    for i, n in enumerate(index.shape):
        if (i != d and n > input.shape[i]) or (src is not None and n > src.shape[i]):
            raise RuntimeError(
                f"{op}: expected index {index.shape} to be smaller than self {input.shape} apart from dimension {d}"
                + (f" and to be smaller size than src {src.shape}" if src is not None else "")
            )
    return cast(_check_range(index, input.shape[d], d, input.shape), int32)


def _identity(op: str, dtype: DType) -> float | int:
    """The value a reduction starts from (what ``include_self=False`` puts at the scattered positions)."""
    if op in ("sum", "mean", "prod"):
        return 1 if op == "prod" else 0
    if dtype.is_floating:
        return float("-inf") if op == "amax" else float("inf")
    return INT32_MIN if op == "amax" else INT32_MAX


def _scattered(input: Tensor, d: int, index: Tensor) -> Tensor:
    """int32 count of the scattered contributions at every position of ``input``."""
    ones = full(index.shape, 1, int32, input._backend)
    return _raw("sum", full(input.shape, 0, int32, input._backend), d, index, ones)


def _overwritten(g: Tensor, d: int, idx: Tensor) -> Tensor:
    """``g`` with the positions a scatter overwrote zeroed (their old values are gone)."""
    return _raw("assign", g.clone(), d, idx, g.new_zeros(idx.shape))


def _src_grad(g: Tensor, src_shape: tuple[int, ...], d: int, index: Tensor) -> Tensor:
    """``g`` gathered at the scattered positions, in ``src``'s shape (zero beyond the index's extent)."""
    gs = gather_unchecked(g, d, index)
    if gs.shape != src_shape:
        padded = g.new_zeros(src_shape)
        write_into(padded[tuple(slice(0, k) for k in index.shape)], "copy", gs)
        gs = padded
    return gs


def scatter(
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Any = None,
    *,
    value: Any = None,
    reduce: str | None = None,
) -> Tensor:
    """``out[i][index[i][j]] = src[i][j]`` along ``dim`` (``src`` a tensor, or a number as ``src`` / ``value``);
    ``reduce="add"`` / ``"multiply"`` combine instead. With duplicate indices one of the writes wins."""
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError(f"scatter: reduce argument must be either add or multiply, got {reduce!r}")
        if not isinstance(src, Tensor):
            src = full(index.shape, src if value is None else value, input.dtype, input._backend)
        return scatter_reduce(input, dim, index, src, "sum" if reduce == "add" else "prod")
    d = norm_dim(dim, input.ndim)
    number = value if src is None else src
    if not isinstance(number, Tensor):
        if number is None:
            raise TypeError("scatter: give src (a tensor or a number) or value")
        idx = _checked_index("scatter", input, d, index, None)
        out = _raw("assign", input.detach().clone(), d, idx, full(idx.shape, number, input.dtype, input._backend))
        return record(out, "ScatterBackward", (input,), lambda n, g: (_overwritten(g, d, idx),))
    idx = _checked_index("scatter", input, d, index, number)
    out = _raw("assign", input.detach().clone(), d, idx, cast(number, input.dtype).detach())
    src_shape = number.shape

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:
        gi = _overwritten(g, d, idx) if n.needs[0] else None
        return (gi, None, _src_grad(g, src_shape, d, idx) if n.needs[2] else None)

    return record(out, "ScatterBackward", (input, None, number), rule)


def scatter_reduce(
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> Tensor:
    """``src`` reduced into ``input`` at ``index`` along ``dim`` with ``reduce`` (sum, prod, mean, amax, amin);
    ``include_self=False`` leaves the old values of the scattered positions out of the reduction."""
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"scatter_reduce: reduce argument must be one of {REDUCTIONS}, got {reduce!r}")
    d = norm_dim(dim, input.ndim)
    idx = _checked_index("scatter_reduce", input, d, index, src)
    x = input.detach()
    s = cast(src, input.dtype).detach()
    if s.shape != idx.shape:
        s = s[tuple(slice(0, k) for k in idx.shape)]
    count = _scattered(x, d, idx)
    hit = elementwise("gt", count, 0)
    out = _reduced("sum" if reduce == "mean" else reduce, x, d, idx, s, include_self, hit)
    if reduce == "mean":
        total = elementwise("add", count, 1) if include_self else elementwise("maximum", count, 1)
        mean = elementwise("div", out, total)
        out = mean if x.dtype.is_floating else cast(mean.floor(), x.dtype)  # PyTorch rounds integer means down
        out = where(hit, out, x)
    src_shape = src.shape
    saved = (x, s, out.detach())

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:
        xs, ss, o = n.saved
        g_self, g_src = _reduce_grads(reduce, include_self, g, xs, ss, o, d, idx, count, hit)
        gi = g_self if n.needs[0] else None
        return (gi, None, _pad_to(g_src, src_shape) if n.needs[2] else None)

    return record(out, "ScatterReduceBackward", (input, None, src), rule, saved)


def _pad_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    if t.shape == shape:
        return t
    padded = t.new_zeros(shape)
    write_into(padded[tuple(slice(0, k) for k in t.shape)], "copy", t)
    return padded


def _reduced(op: str, x: Tensor, d: int, idx: Tensor, s: Tensor, include_self: bool, hit: Tensor) -> Tensor:
    """``x.scatter_reduce(d, idx, s, op, include_self)`` for sum / prod / amax / amin (no autograd)."""
    start = x if include_self else where(hit, _identity(op, x.dtype), x)
    return _raw(op, start.clone(), d, idx, s)


def _reduce_grads(
    op: str,
    include_self: bool,
    g: Tensor,
    x: Tensor,
    s: Tensor,
    out: Tensor,
    d: int,
    idx: Tensor,
    count: Tensor,
    hit: Tensor,
) -> tuple[Tensor, Tensor]:
    """(gradient of ``input``, of the index-shaped part of ``src``) of ``scatter_reduce``: PyTorch's formulas
    (``scatter_reduce_backward``), so that NaN, infinities and ties give its results too."""
    at = lambda t: gather_unchecked(t, d, idx)  # noqa: E731
    if op in ("sum", "mean"):
        if op == "mean":
            n = elementwise("add", count, 1) if include_self else elementwise("maximum", count, 1)
            g = g / cast(n, g.dtype)
        g_self, g_src = g, at(g)
    elif op in ("amax", "amin"):
        # ties share evenly: the contributors equal to the result (PyTorch counts the old value among them also
        # without include_self; a NaN result has none, and its gradient is NaN, as there)
        self_eq = cast(elementwise("eq", x, out), g.dtype)
        src_eq = cast(elementwise("eq", s, at(out)), g.dtype)
        share = g / _raw("sum", self_eq.clone(), d, idx, src_eq)
        g_self, g_src = self_eq * share, src_eq * at(share)
    else:  # prod: each contributor gets the product of the others, exact where zeros take part
        masked_x = where(elementwise("eq", x, 0), 1.0, x)
        g_self = g * _reduced("prod", masked_x, d, idx, s, include_self, hit) / masked_x
        zero_s = elementwise("eq", s, 0)
        zeros = at(_raw("sum", x.new_zeros(x.shape), d, idx, cast(zero_s, x.dtype)))
        lone = elementwise("logical_and", zero_s, elementwise("eq", zeros, 1))
        others = _reduced("prod", x, d, idx, where(lone, 1.0, s), include_self, hit)
        g_src = where(lone, at(g * others), at(g * out) / where(zero_s, 1.0, s))
    # without include_self the old values of the scattered positions are gone
    return (g_self if include_self else where(hit, 0.0, g_self)), g_src


def _expanded_index(index: Tensor, like: Tensor, d: int) -> Tensor:
    """A 1-D index as a scatter index of ``like``'s shape: stride 0 everywhere but ``d`` (no copy)."""
    v = index._view
    strides = tuple(v.strides[0] if i == d else 0 for i in range(like.ndim))
    return Tensor._make(View(v.storage, like.shape, strides, v.offset), index._backend)


def _index_1d(op: str, input: Tensor, d: int, index: Tensor, source: Tensor | None) -> Tensor:  # noqa: A002
    if index.ndim > 1 or index.dtype.is_floating:
        raise IndexError(f"{op}(): Index is supposed to be a vector of integers, got {index.dtype!r} {index.shape}")
    index = index.reshape(-1)
    if source is not None:
        want = input.shape[:d] + (index.shape[0],) + input.shape[d + 1 :] if input.ndim else (index.shape[0],)
        if (source.shape if source.ndim else (1,)) != (want if input.ndim else (1,)):
            raise RuntimeError(
                f"{op}(): source {source.shape} should have the shape of self {input.shape} with dim {d} of the "
                f"index's length {index.shape[0]}"
            )
    return cast(_check_range(index, input.shape[d] if input.ndim else 1, d, input.shape), int32)


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:  # noqa: A002
    """``out.narrow(dim, index[i], 1) += alpha * source.narrow(dim, i, 1)`` for every i (duplicates add up)."""
    d = norm_dim(dim, input.ndim)
    idx = _index_1d("index_add", input, d, index, source)
    scaled = source if alpha == 1 else source * alpha
    values = cast(scaled, input.dtype).detach()
    out = _raw("sum", input.detach().clone(), d, _expanded_index(idx, scaled, d), values)

    def rule(n: Node, g: Tensor) -> tuple[Tensor, None, Tensor | None]:
        return (g, None, take_along(g, d, idx) * alpha if n.needs[2] else None)

    return record(out, "IndexAddBackward", (input, None, source), rule)


def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``out.narrow(dim, index[i], 1) = source.narrow(dim, i, 1)`` for every i."""
    d = norm_dim(dim, input.ndim)
    idx = _index_1d("index_copy", input, d, index, source)
    values = cast(source, input.dtype).detach()
    out = _raw("assign", input.detach().clone(), d, _expanded_index(idx, source, d), values)

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:
        gi = index_fill(g, d, idx, 0) if n.needs[0] else None
        return (gi, None, take_along(g, d, idx) if n.needs[2] else None)

    return record(out, "IndexCopyBackward", (input, None, source), rule)


def index_fill(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:  # noqa: A002
    """``input`` with the slices ``index`` along ``dim`` set to ``value``."""
    d = norm_dim(dim, input.ndim)
    idx = _index_1d("index_fill", input, d, index, None)
    shape = input.shape[:d] + (idx.shape[0],) + input.shape[d + 1 :]
    values = full(shape, value.item() if isinstance(value, Tensor) else value, input.dtype, input._backend)
    out = _raw("assign", input.detach().clone(), d, _expanded_index(idx, values, d), values)
    return record(out, "IndexFillBackward", (input,), lambda n, g: (index_fill(g, d, idx, 0),))


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``input`` with the positions where ``mask`` (broadcast) is True filled, in order, from ``source``'s
    elements (row-major). ``source`` must have at least as many elements as ``mask`` has True values (checked on
    the device)."""
    if not mask.dtype.is_bool:
        raise RuntimeError(f"masked_scatter: expected a bool mask, got {mask.dtype!r}")
    same_backend("masked_scatter", [input, mask, source])
    m = mask.expand(input.shape).contiguous().reshape(-1)
    pos = elementwise("sub", cumsum(m, 0), 1)  # the source element each True position takes
    take = where(m, pos, 0)
    numel = source.numel()
    if m.numel():
        why = f"masked_scatter: source has {numel} elements, fewer than the mask's True values (needs index {{bad}})"
        check_index(take, 0, max(numel, 1), why, RuntimeError)
    x = input.detach()
    vals = take_along(cast(source.detach().reshape(-1), x.dtype), 0, take) if numel else x.reshape(-1)
    keep = m.reshape(input.shape)
    out = where(keep, vals.reshape(input.shape), x)
    spare = where(m, pos, numel)  # False positions add into a spare slot past the end

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:
        gi = where(keep, 0.0, g) if n.needs[0] else None
        if not n.needs[2]:
            return (gi, None, None)
        gs = _raw("sum", g.new_zeros((numel + 1,)), 0, spare, where(keep, g, 0.0).reshape(-1))
        return (gi, None, gs[:numel].reshape(source.shape))

    return record(out, "MaskedScatterBackward", (input, None, source), rule)


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:  # noqa: A002
    """int32 coordinates (one row each, in C order) of the non-zero elements. The count is read back to size the
    result (a sync point, as in PyTorch)."""
    flat = elementwise("ne", input.reshape(-1), 0) if input.ndim else elementwise("ne", input.reshape(1), 0)
    count = int(cast(flat, int32).sum().item())
    ndim = input.ndim
    b = input._backend
    dump = where(flat, elementwise("sub", cumsum(flat, 0), 1), count)  # the output row of each non-zero element
    out = full((count + 1, ndim), 0, int32, b)
    if ndim and flat.numel():
        # the coordinates of every element: an arange along each dim, broadcast over the others
        coords = [_along(iota(b, n), k, input.shape).reshape(-1) for k, n in enumerate(input.shape)]
        _raw("assign", out, 0, dump.unsqueeze(1).expand(flat.shape[0], ndim), stack(coords, 1))
    result = out[:count]
    return tuple(result[:, k] for k in range(ndim)) if as_tuple else result


def _along(t: Tensor, k: int, shape: tuple[int, ...]) -> Tensor:
    """A 1-D ``t`` as dim ``k`` of ``shape``, broadcast over the others."""
    return t.reshape(*(1,) * k, shape[k], *(1,) * (len(shape) - k - 1)).expand(shape)


# ---------------------------------------------------------------- in-place Tensor methods
def _inplace(name: str, functional: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``Tensor.<name>``: ``functional``'s result written into the tensor (recorded when autograd needs it)."""

    def method(t: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if check_inplace(t, name):
            return rebase_inplace(t, functional(alias(t), *args, **kwargs))
        return write_into(t, "copy", functional(t.detach(), *args, **kwargs))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In-place ``{name[:-1]}``."
    return method


scatter_ = _inplace("scatter_", scatter)
scatter_add_ = _inplace("scatter_add_", scatter_add)
scatter_reduce_ = _inplace("scatter_reduce_", scatter_reduce)
index_add_ = _inplace("index_add_", index_add)
index_copy_ = _inplace("index_copy_", index_copy)
index_fill_ = _inplace("index_fill_", index_fill)
masked_scatter_ = _inplace("masked_scatter_", masked_scatter)
