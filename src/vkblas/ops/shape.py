"""Movement ops: views that only change shape/strides/offset (no copy), plus cat/stack/split and the transfers."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from .. import device as _dev
from ..autograd import Node, record
from ..backend.base import View, contiguous_strides, numel
from ..dtypes import DType, promote
from ..tensor import Tensor, check_backend, empty, norm_dim
from ._core import cast, clone, expand_view, numpy_aliases, same_backend, write_into


def _view_of(x: Tensor, view: View, name: str, rule: Any) -> Tensor:
    out = Tensor._make(view, x._backend)
    return record(out, name, (x,), rule)


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def _infer(shape: tuple[int, ...], n: int, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"invalid shape dimension {s}")
            known *= s
    if -1 in shape:
        if known == 0 or n % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n} (input shape {x_shape})")
        shape = tuple(n // known if s == -1 else s for s in shape)
    elif known != n:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {n} (input shape {x_shape})")
    return shape


def _strides_for_view(v: View, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that express ``shape`` over the same memory without a copy, or None (PyTorch's computeStride)."""
    if v.is_contiguous() or v.numel == 0 or not v.shape:
        return contiguous_strides(shape)
    old_shape, old_strides = v.shape, v.strides
    new_strides = [0] * len(shape)
    view_d = len(shape) - 1
    chunk_base = old_strides[-1]
    tensor_numel = view_numel = 1
    for d in reversed(range(len(old_shape))):
        tensor_numel *= old_shape[d]
        # a chunk of old dims ends where the next one out is not laid out right after it
        if d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = old_strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def reshape(input: Tensor, *shape: Any) -> Tensor:  # noqa: A002
    x = input
    v = x._view
    if len(shape) == 1 and type(shape[0]) is tuple:
        shape = shape[0]
    if v.is_contiguous():  # the common case, written out: a contiguous tensor to a shape of Python ints
        n = 1
        for k in shape:
            if type(k) is not int or k < 0:
                break
            n *= k
        else:
            if shape == v.shape:
                return x
            if n == numel(v.shape):
                out = View(v.storage, shape, contiguous_strides(shape), v.offset)
                return _view_of(x, out, "ViewBackward", lambda _, g, s=v.shape: (g.reshape(s),))
    new = _infer(_shape_arg(shape), x.numel(), x.shape)
    if new == x.shape:
        return x
    strides = _strides_for_view(x._view, new)
    if strides is None:
        x = contiguous(x)
        strides = contiguous_strides(new)
    in_shape = input.shape
    return _view_of(
        x, View(x._view.storage, new, strides, x._view.offset), "ViewBackward", lambda n, g: (g.reshape(in_shape),)
    )


def view(input: Tensor, *shape: Any) -> Tensor:  # noqa: A002
    if len(shape) == 1 and isinstance(shape[0], DType):
        raise NotImplementedError("view(dtype) reinterpretation is not supported")
    new = _infer(_shape_arg(shape), input.numel(), input.shape)
    if _strides_for_view(input._view, new) is None:
        raise RuntimeError(
            f"view size is not compatible with input tensor's size and stride (shape {input.shape}, "
            f"strides {input._view.strides}); use .reshape(...) instead."
        )
    return reshape(input, new)


def view_as(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    return view(input, other.shape)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # noqa: A002
    if input.ndim == 0:
        return reshape(input, (1,))
    s, e = norm_dim(start_dim, input.ndim), norm_dim(end_dim, input.ndim)
    shape = input.shape
    return reshape(input, (*shape[:s], numel(shape[s : e + 1]), *shape[e + 1 :]))


@numpy_aliases
def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:  # noqa: A002
    if dim is None:
        dims = {i for i, n in enumerate(input.shape) if n == 1}
    else:
        dims = {norm_dim(d, input.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
        dims = {d for d in dims if input.ndim and input.shape[d] == 1}  # a 0-d tensor takes dim 0 / -1
    return reshape(input, tuple(n for i, n in enumerate(input.shape) if i not in dims))


@numpy_aliases
def unsqueeze(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    d = norm_dim(dim, input.ndim + 1)
    return reshape(input, (*input.shape[:d], 1, *input.shape[d:]))


def permute(input: Tensor, *dims: Any) -> Tensor:  # noqa: A002
    order = tuple(norm_dim(d, input.ndim) for d in _shape_arg(dims))
    if input.ndim == 0 and order in ((), (0,)):  # permute(0) of a 0-d tensor
        return input
    if sorted(order) != list(range(input.ndim)):
        raise RuntimeError(f"permute: dims {order} are not a permutation of the {input.ndim} dims of {input.shape}")
    v = input._view
    inverse = tuple(order.index(i) for i in range(len(order)))
    return _view_of(
        input,
        View(v.storage, tuple(v.shape[i] for i in order), tuple(v.strides[i] for i in order), v.offset),
        "PermuteBackward",
        lambda n, g: (g.permute(inverse),),
    )


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:  # noqa: A002
    ndim = len(input._view.shape)
    a, b = norm_dim(dim0, ndim), norm_dim(dim1, ndim)
    if ndim == 0:  # dims 0 / -1 of a 0-d tensor
        return input
    # the swap written out, not a permute: ``mT`` runs it in every linear layer's backward
    v = input._view
    shape, strides = list(v.shape), list(v.strides)
    shape[a], shape[b], strides[a], strides[b] = shape[b], shape[a], strides[b], strides[a]
    return _view_of(
        input,
        View(v.storage, tuple(shape), tuple(strides), v.offset),
        "TransposeBackward",
        lambda n, g: (g.transpose(a, b),),
    )


def t(input: Tensor) -> Tensor:  # noqa: A002
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return permute(input, tuple(reversed(range(input.ndim))))


def expand(input: Tensor, *shape: Any) -> Tensor:  # noqa: A002
    target = list(_shape_arg(shape))
    lead = len(target) - input.ndim
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(target)}) must be greater or equal to the "
            f"number of dimensions in the tensor ({input.ndim})"
        )
    for i, n in enumerate(target):
        if n == -1:
            if i < lead:
                raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
            target[i] = input.shape[i - lead]
    v = expand_view(input._view, tuple(target))
    return _view_of(input, v, "ExpandBackward", lambda n, g: (g,))  # the engine sums g back to input's shape


def expand_as(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    return expand(input, other.shape)


def repeat(input: Tensor, *sizes: Any) -> Tensor:  # noqa: A002
    reps = _shape_arg(sizes)
    if len(reps) < input.ndim:
        raise RuntimeError(
            f"repeat: number of repeat dims ({len(reps)}) can not be smaller than number of "
            f"dimensions of tensor ({input.ndim})"
        )
    x = reshape(input, (1,) * (len(reps) - input.ndim) + input.shape)
    inter: list[int] = []
    for n in x.shape:
        inter += [1, n]
    big: list[int] = []
    for r, n in zip(reps, x.shape, strict=True):
        big += [r, n]
    return reshape(
        expand(reshape(x, tuple(inter)), tuple(big)), tuple(r * n for r, n in zip(reps, x.shape, strict=True))
    )


def contiguous(input: Tensor) -> Tensor:  # noqa: A002
    if input.is_contiguous():
        return input
    return clone(input)


@numpy_aliases
def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    return input[(slice(None),) * d + (slice(start, start + length),)]


@numpy_aliases
def split(input: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size_or_sections}")
        sizes = [builtins.min(split_size_or_sections, n - i) for i in range(0, n, split_size_or_sections)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                f"dimension {d}), but got split_sizes={sizes}"
            )
    out, start = [], 0
    for s in sizes:
        out.append(narrow(input, d, start, s))
        start += s
    return tuple(out)


@numpy_aliases
def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    n = input.shape[norm_dim(dim, input.ndim)]
    return split(input, builtins.max(1, -(-n // chunks)), dim)


@numpy_aliases
def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    d = norm_dim(dim, input.ndim)
    return tuple(input[(slice(None),) * d + (i,)] for i in range(input.shape[d]))


@numpy_aliases
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if x.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    ref = builtins.max(tensors, key=lambda x: x.ndim)
    d = norm_dim(dim, ref.ndim)
    backend = same_backend("cat", tensors)
    dtype = tensors[0].dtype
    for x in tensors[1:]:
        dtype = promote(dtype, x.dtype)
    parts = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)]  # PyTorch skips legacy empty (0,)
    for x in parts:
        if x.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, ref.shape, strict=True)) if i != d):
            raise RuntimeError(
                f"cat(): sizes of tensors must match except in dimension {d}; got shapes "
                f"{[tuple(p.shape) for p in tensors]}"
            )
    if not parts:
        return empty((0,), dtype, backend)
    shape = list(parts[0].shape)
    shape[d] = builtins.sum(x.shape[d] for x in parts)
    out = empty(tuple(shape), dtype, backend)
    offsets, start = [], 0
    for x in parts:
        if x.shape[d]:
            write_into(out.narrow(d, start, x.shape[d]).detach(), "copy", x)
        offsets.append((start, x.shape[d]))
        start += x.shape[d]
    out._view.storage.version = 0

    def rule(n: Node, g: Tensor) -> tuple[Tensor, ...]:
        return tuple(narrow(g, d, s, k) for s, k in offsets)

    return record(out, "CatBackward", parts, rule)


@numpy_aliases
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shapes = {tuple(x.shape) for x in tensors}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {sorted(shapes)}")
    d = norm_dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(x, d) for x in tensors], d)


def to(input: Tensor, device: _dev.DeviceLike = None, dtype: DType | None = None) -> Tensor:  # noqa: A002
    x = input
    if device is not None:
        target = _dev.resolve(device)
        if target is not x._backend:
            src_backend = x._backend
            want = dtype or x.dtype
            check_backend(target, want, "to")
            arr = src_backend.to_numpy(x._view)
            moved = Tensor._make(View.of(target.from_numpy(arr, want), x.shape), target)
            x = record(
                moved,
                "ToCopyBackward",
                (x,),
                lambda n, g: (to(g, _dev.of_backend(src_backend), n.extra["dt"]),),
                dt=input.dtype,
            )
            return x
    if dtype is not None and dtype is not x.dtype:
        out = cast(x, dtype)
        if dtype.is_floating and x.dtype.is_floating:
            return record(out, "ToCopyBackward", (x,), lambda n, g: (cast(g, input.dtype),))
        return out
    return x
