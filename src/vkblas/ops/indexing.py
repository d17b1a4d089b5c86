"""Indexing: basic slicing (views), integer-array indexing (gather), scatter-add, one_hot, setitem.

Index tensors are checked against the indexed size before use, so a bad index raises IndexError instead of reading
out of bounds: at once on the cpu, at the next sync point on an asynchronous device (``Backend.check_values``; see
README "Differences").
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..autograd import Node, is_grad_enabled, record
from ..backend.base import View, numel
from ..dtypes import bool_, int32
from ..tensor import Tensor, empty, from_host, norm_dim
from ._core import broadcast_shapes, cast, elementwise, numpy_aliases, same_backend, write_into
from .pointwise import where

Index = Any


def _as_index_tensor(idx: Any, like: Tensor) -> Tensor:
    """An index on ``like``'s device: host data (a list, an array) is uploaded; a cpu index tensor is moved, as
    PyTorch moves cpu indices for CUDA tensors. An index on another accelerator is refused."""
    if isinstance(idx, Tensor):
        if idx._backend is like._backend:
            return idx
        if idx.device.type == "cpu":
            return idx.to(like.device)
        raise RuntimeError(
            f"indices should be either on cpu or on the same device as the indexed tensor ({like.device}), "
            f"got indices on {idx.device}"
        )
    arr = np.asarray(idx)
    return from_host(arr if arr.size else arr.astype(np.int32), None, like._backend)  # x[[]] is an int index


def _check_range(idx: Tensor, size: int, dim: int, shape: tuple[int, ...]) -> Tensor:
    """Validate ``-size <= idx < size`` (on an asynchronous device: at its next sync point) and wrap negatives."""
    if idx.dtype.is_floating or idx.dtype is bool_:
        raise IndexError(f"tensors used as indices must be long, int or bool tensors (got {idx.dtype!r})")
    if idx.numel() == 0:
        return idx
    check_index(
        idx, -size, size, f"index {{bad}} is out of bounds for dimension {dim} with size {size} (tensor shape {shape})"
    )
    return where(elementwise("lt", idx, 0), elementwise("add", idx, size), idx)


def check_index(
    idx: Tensor, low: int, high: int, message: str, error: type[Exception] = IndexError, allow: int | None = None
) -> None:
    """Raise ``error`` (formatted with ``bad=``) if a value of ``idx`` other than ``allow`` is outside
    ``[low, high)``; see ``Backend.check_values`` for when an asynchronous device reports it."""
    if idx.numel():
        idx._backend.check_values(idx._view, low, high - 1, message, error, allow=allow)


@numpy_aliases
def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    same_backend("gather", [input, index])
    if index.ndim != input.ndim:
        raise RuntimeError(
            f"gather: index tensor must have the same number of dimensions as input tensor "
            f"(index {index.shape}, input {input.shape})"
        )
    for i, (a, b) in enumerate(zip(index.shape, input.shape, strict=True)):
        if i != d and a > b:
            raise RuntimeError(f"gather: size of index {index.shape} exceeds input {input.shape} at dimension {i}")
    index = cast(_check_range(index, input.shape[d], d, input.shape), int32)
    return gather_unchecked(input, d, index)


def gather_unchecked(x: Tensor, d: int, index: Tensor) -> Tensor:
    """``gather`` for an int32 index already known to be in range (no check, no sync)."""
    out = empty(index.shape, x.dtype, x._backend)
    if out.numel():
        x._backend.gather(out._view, x._view, d, index._view)

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        return (_scatter_add_into(g.new_zeros(n.extra["shape"]), d, index, g),)

    return record(out, "GatherBackward", (x,), rule, shape=x.shape)


def _scatter_add_into(out: Tensor, d: int, index: Tensor, src: Tensor) -> Tensor:
    if index.numel():
        src_v = src._view if src.shape == index.shape else src[tuple(slice(0, n) for n in index.shape)]._view
        out._backend.scatter_add(out._view, d, index._view, src_v)
    out._view.storage.version += 1
    return out


@numpy_aliases
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    same_backend("scatter_add", [input, index, src])
    if not (index.ndim == input.ndim == src.ndim):
        raise RuntimeError(
            f"scatter_add: index {index.shape}, input {input.shape} and src {src.shape} must have the "
            "same number of dimensions"
        )
    index = cast(_check_range(index, input.shape[d], d, input.shape), int32)
    out = _scatter_add_into(input.detach().clone(), d, index, cast(src, input.dtype).detach())

    src_shape = src.shape

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:
        if not n.needs[2]:
            return (g, None, None)
        gs = gather_unchecked(g, d, index)
        if gs.shape != src_shape:  # src beyond index's extent gets no gradient
            padded = g.new_zeros(src_shape)
            write_into(padded[tuple(slice(0, k) for k in index.shape)], "copy", gs)
            gs = padded
        return (g, None, gs)

    return record(out, "ScatterAddBackward", (input, None, src), rule)


@numpy_aliases
def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    idx = _as_index_tensor(index, input)
    if idx.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape {idx.shape}")
    idx = cast(_check_range(idx.reshape(-1), input.shape[d], d, input.shape), int32)
    return take_along(input, d, idx)


def take_along(x: Tensor, d: int, flat_idx: Tensor) -> Tensor:
    """x indexed by a 1-D int32 index (already in range) at dim d: the index broadcast over the other dims with
    stride 0, then one gather."""
    k = flat_idx.shape[0]
    shape = x.shape[:d] + (k,) + x.shape[d + 1 :]
    strides = tuple(0 for _ in x.shape[:d]) + (flat_idx._view.strides[0],) + tuple(0 for _ in x.shape[d + 1 :])
    iv = View(flat_idx._view.storage, shape, strides, flat_idx._view.offset)
    return gather_unchecked(x, d, Tensor._make(iv, x._backend))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int32 one-hot encoding (PyTorch returns int64; there is no int64 storage here)."""
    if tensor.dtype.is_floating:
        raise RuntimeError("one_hot is only applicable to index tensor (got a floating point tensor)")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    _check_range(tensor, num_classes, -1, tensor.shape)
    classes = from_host(np.arange(num_classes), int32, tensor._backend)
    return cast(elementwise("eq", tensor.unsqueeze(-1), classes), int32)


# ------------------------------------------------------------------ __getitem__ / __setitem__
def _expand_items(x: Tensor, index: Index) -> list[Any]:
    items = list(index) if isinstance(index, tuple) else [index]
    consumed = builtins.sum(
        1
        for it in items
        if it is not None and it is not Ellipsis and not (isinstance(it, Tensor) and it.dtype is bool_ and it.ndim > 1)
    )
    consumed += builtins.sum(
        it.ndim - 1 for it in items if isinstance(it, Tensor) and it.dtype is bool_ and it.ndim > 1
    )
    if builtins.sum(1 for it in items if it is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim} (shape {x.shape})")
    if any(it is Ellipsis for it in items):  # (identity: `in` would compare arrays elementwise)
        pos = next(i for i, it in enumerate(items) if it is Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (x.ndim - consumed)
    else:
        items += [slice(None)] * (x.ndim - consumed)
    return items


def _is_advanced(it: Any) -> bool:
    return isinstance(it, (Tensor, list, np.ndarray)) and not isinstance(it, (str, bytes))


def _basic(x: Tensor, items: list[Any]) -> tuple[View, list[tuple[int, Any]]]:
    """Apply ints/slices/None; return the view and the advanced indices with their dim in that view."""
    v = x._view
    shape, strides, offset = [], [], v.offset
    advanced: list[tuple[int, Any]] = []
    d = 0
    for it in items:
        if it is None:
            shape.append(1)
            strides.append(0)
            continue
        n, s = v.shape[d], v.strides[d]
        if isinstance(it, slice):
            start, stop, step = it.indices(n)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            length = builtins.max(0, (stop - start + step - 1) // step)
            offset += start * s if length else 0
            shape.append(length)
            strides.append(s * step)
        elif _is_advanced(it):
            advanced.append((len(shape), it))
            shape.append(n)
            strides.append(s)
        else:
            try:
                i = int(it.__index__() if hasattr(it, "__index__") else it)
            except TypeError:
                raise IndexError(
                    f"unsupported index {it!r}: only integers, slices, None, ..., and integer or "
                    "bool tensors are valid indices"
                ) from None
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n} (shape {x.shape})")
            offset += (i % n) * s
        d += 1
    return View(v.storage, tuple(shape), tuple(strides), offset), advanced


def _index_items(x: Tensor, index: Index) -> Index:
    """Lists, arrays and cpu tensors among the indices as index tensors on ``x``'s device (so a bool list is a
    mask, as in PyTorch)."""
    if _is_advanced(index):
        return _as_index_tensor(index, x)
    if isinstance(index, tuple):
        return tuple(_as_index_tensor(it, x) if _is_advanced(it) else it for it in index)
    return index


def getitem(x: Tensor, index: Index) -> Tensor:
    cls = index.__class__
    if (cls is int or cls is slice) and x._view.shape:  # x[i], x[a:b] (a batch): the general steps give this
        items = [index, *[slice(None)] * (len(x._view.shape) - 1)]
    else:
        index = _index_items(x, index)
        if isinstance(index, Tensor) and index.dtype is bool_:
            return _mask_select(x, index)
        items = _expand_items(x, index)
        # bool tensor masks inside a tuple become integer indices (host round trip; data-dependent shape)
        items = [_bool_to_int(it, x) if isinstance(it, Tensor) and it.dtype is bool_ else it for it in items]
    view, advanced = _basic(x, items)
    out = Tensor._make(view, x._backend)
    in_shape = x.shape

    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        z = g.new_zeros(in_shape)
        zv, _ = _basic(z, items)
        write_into(Tensor._make(zv, z._backend), "copy", g)
        return (z,)

    out = record(out, "SliceBackward", (x,), rule)
    if advanced:
        out = _advanced(out, advanced)
    return out


def _bool_to_int(mask: Tensor, x: Tensor) -> Tensor:
    if mask.ndim != 1:
        raise IndexError("multi-dimensional bool masks are only supported as the sole index")
    return _as_index_tensor(np.nonzero(mask.numpy())[0], x)


def _mask_select(x: Tensor, mask: Tensor) -> Tensor:
    if mask.shape != x.shape[: mask.ndim]:
        raise IndexError(f"The shape of the mask {mask.shape} does not match the shape of the indexed tensor {x.shape}")
    flat = x.reshape((numel(mask.shape),) + x.shape[mask.ndim :])  # not -1: x may have no elements
    idx = _as_index_tensor(np.flatnonzero(mask.numpy()), x)
    return take_along(flat, 0, cast(idx, int32))


def _advanced(x: Tensor, advanced: list[tuple[int, Any]]) -> Tensor:
    dims = [d for d, _ in advanced]
    idxs = [_as_index_tensor(it, x) for _, it in advanced]
    bshape = broadcast_shapes(*(i.shape for i in idxs), op="indexing")
    checked = [cast(_check_range(i, x.shape[d], d, x.shape), int32) for d, i in zip(dims, idxs, strict=True)]
    # move the indexed dims to the front, merge them into one, and index it with the combined flat index
    rest = [d for d in range(x.ndim) if d not in dims]
    xp = x.permute(dims + rest)
    merged = xp.reshape((numel([x.shape[d] for d in dims]),) + tuple(x.shape[d] for d in rest))
    flat = None
    for d, i in zip(dims, checked, strict=True):
        flat = i if flat is None else elementwise("add", elementwise("mul", flat, x.shape[d]), i)
    assert flat is not None
    flat = flat.expand(bshape).reshape(-1) if flat.shape != bshape or not flat.is_contiguous() else flat.reshape(-1)
    out = take_along(merged, 0, flat.contiguous() if not flat.is_contiguous() else flat)
    out = out.reshape(bshape + tuple(x.shape[d] for d in rest))
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:  # numpy/PyTorch keep adjacent advanced dims in place
        nb = len(bshape)
        order = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], out.ndim))
        out = out.permute(order)
    return out


def setitem(x: Tensor, index: Index, value: Any) -> None:
    if is_grad_enabled() and (x.requires_grad or (isinstance(value, Tensor) and value.requires_grad)):
        raise RuntimeError(
            "item assignment into a tensor that takes part in autograd is not supported; build the result with "
            "vkblas.where / vkblas.cat, or assign inside vkblas.no_grad()"
        )
    index = _index_items(x, index)
    if isinstance(value, Tensor) and value._backend is not x._backend:
        value = value.to(x.device)  # as copy_ does
    if isinstance(index, Tensor) and index.dtype is bool_:
        if isinstance(value, Tensor):
            raise NotImplementedError("x[mask] = tensor is not supported; use vkblas.where(mask, value, x)")
        mask = index if index.shape == x.shape else index.reshape(index.shape + (1,) * (x.ndim - index.ndim))
        write_into(x, "where", mask, value, x)
        return
    items = _expand_items(x, index)
    view, advanced = _basic(x, items)
    if advanced:
        raise NotImplementedError(
            "assignment through integer-array indices is not supported; use scatter_add or index with slices"
        )
    target = Tensor._make(view, x._backend)
    write_into(target, "copy", value)
