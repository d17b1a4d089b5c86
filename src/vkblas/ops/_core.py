"""Shared plumbing of the ops: device and dtype checks, broadcasting, allocation, running a backend primitive."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autograd import is_grad_enabled, record
from ..backend.base import Backend, ForeachProgram, View
from ..backend.elementwise import OPS
from ..dtypes import INT32_MAX, INT32_MIN, DType, bool_, float32, int32, promote, result_type
from ..tensor import Tensor, empty, norm_dim

Scalar = bool | int | float


def norm_dims(dims: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """The reduced dims, sorted; a 0-d tensor accepts dim 0 and -1 (PyTorch) and has none to reduce."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({norm_dim(d, ndim) for d in dims}))
    if len(out) != len(tuple(dims)):
        raise RuntimeError(f"dim {tuple(dims)} appears multiple times in the list of dims")
    return out if ndim else ()


_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim"}


def numpy_aliases(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Accept PyTorch's NumPy-style keyword aliases: ``axis=`` for ``dim=``, ``keepdims=`` for ``keepdim=``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "axis" in kwargs or "keepdims" in kwargs:
            for alias, name in _NUMPY_NAMES.items():
                if alias in kwargs:
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {name!r} and its alias {alias!r}")
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    return wrapper


def full(shape: tuple[int, ...], value: Scalar, dtype: DType, backend: Backend) -> Tensor:
    out = empty(shape, dtype, backend)
    if out.numel():
        backend.elementwise("copy", out._view, [coerce_scalar(value, dtype)])
    return out


def coerce_scalar(v: Any, dtype: DType) -> Scalar:
    if isinstance(v, Tensor):
        raise TypeError("expected a Python number, got a Tensor")
    if dtype.is_floating:
        return float(v)
    if dtype is bool_:
        return bool(v)
    i = int(v)
    if not INT32_MIN <= i <= INT32_MAX:  # PyTorch's check (a kernel parameter could not hold it either)
        raise RuntimeError(f"value {i} cannot be converted to type {dtype.name} without overflow")
    return i


def same_backend(op: str, tensors: Sequence[Tensor]) -> Backend:
    b = tensors[0]._backend
    for t in tensors[1:]:
        if t._backend is not b:
            devs = ", ".join(f"{x.device} {tuple(x.shape)}" for x in tensors)
            raise RuntimeError(f"Expected all tensors to be on the same device, but {op} got tensors on: {devs}")
    return b


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "broadcast") -> tuple[int, ...]:
    if shapes and all(s == shapes[0] for s in shapes):  # the common case (every same-shape binary op): no loop
        return tuple(shapes[0])
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        size = 1
        for s in shapes:
            n = s[i - nd + len(s)] if i - nd + len(s) >= 0 else 1
            if n != 1:
                if size not in (1, n):
                    raise RuntimeError(
                        f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} cannot be broadcast together "
                        f"(size {size} vs {n} at dim {i - nd})"
                    )
                size = n
        out.append(size)
    return tuple(out)


def expand_view(v: View, shape: tuple[int, ...]) -> View:
    """The view broadcast to ``shape`` with stride 0 on new or size-1 dims (no copy)."""
    if v.shape == shape:
        return v
    lead = len(shape) - len(v.shape)
    strides = [0] * lead
    for i, (n, s) in enumerate(zip(v.shape, v.strides, strict=True)):
        if n == shape[lead + i]:
            strides.append(s if n != 1 else 0)
        elif n == 1:
            strides.append(0)
        else:
            raise RuntimeError(
                f"the expanded size of the tensor ({shape[lead + i]}) must match the existing size "
                f"({n}) at non-singleton dimension {i}; target size {shape}, tensor size {v.shape}"
            )
    return View(v.storage, shape, tuple(strides), v.offset)


def compute_dtype(op: str, operands: Sequence[Any]) -> DType:
    spec = OPS[op]
    dt: DType | None = None
    scalars = []
    for i, o in enumerate(operands):
        if i == spec.bool_operand:
            continue
        if isinstance(o, Tensor):
            d = o._view.storage.dtype
            dt = d if dt is None or dt is d else promote(dt, d)
        else:
            scalars.append(o)
    if dt is None:
        dt = int32 if scalars and isinstance(scalars[0], (int, np.integer)) else float32
        dt = result_type(dt, scalars[0]) if scalars else dt
    for o in scalars:
        dt = result_type(dt, o)
    if not dt.is_floating and spec.float_only:
        dt = float32
    return dt


def elementwise(op: str, *operands: Any, out_dtype: DType | None = None, dtype: DType | None = None) -> Tensor:
    """Run an elementwise op with broadcasting and promotion. No autograd here (see ops/record.py).

    This is the hottest path of the framework (every op of a training step passes here), so the common case
    (tensors of one shape and dtype, plain Python numbers) avoids the general broadcasting and promotion code.
    """
    spec = OPS[op]
    if dtype is None and out_dtype is None:
        if len(operands) == 2:
            fast = _binary_fast(op, spec, operands[0], operands[1])
            if fast is not None:
                return fast
        elif len(operands) == 1 and operands[0].__class__ is Tensor and spec.bool_operand is None:
            # one tensor (relu, exp ...): its dtype is the result's unless the op computes in float
            a = operands[0]
            va = a._view
            dt = va.storage.dtype
            if dt.is_floating or not spec.float_only:
                out = empty(va.shape, bool_ if spec.returns_bool else dt, a._backend)
                if out._view.storage.numel:
                    a._backend.elementwise(op, out._view, [va])
                return out
    tensors = [o for o in operands if isinstance(o, Tensor)]
    if not tensors:
        raise TypeError(f"{op}: expected at least one Tensor operand")
    backend = tensors[0]._backend
    shape = tensors[0]._view.shape
    uniform = True
    for t in tensors[1:]:
        if t._backend is not backend:
            same_backend(op, tensors)
        if t._view.shape != shape:
            uniform = False
    if not uniform:
        shape = broadcast_shapes(*(t.shape for t in tensors), op=op)
    cdt = dtype or compute_dtype(op, operands)
    args: list[View | Scalar] = []
    for i, o in enumerate(operands):
        want = bool_ if i == spec.bool_operand else cdt
        if isinstance(o, Tensor):
            if o._view.storage.dtype is not want:
                o = cast(o, want)
            args.append(o._view if uniform else expand_view(o._view, shape))
        elif isinstance(o, (bool, int, float, np.number, np.bool_)):
            args.append(coerce_scalar(o, want))
        else:
            raise TypeError(f"{op}: unsupported operand type {type(o).__name__}")
    out = empty(shape, out_dtype or (bool_ if spec.returns_bool else cdt), backend)
    if out._view.storage.numel:
        backend.elementwise(op, out._view, args)
    return out


def _binary_fast(op: str, spec: Any, a: Any, b: Any) -> Tensor | None:
    """``tensor op tensor`` of one shape and dtype, or ``tensor op number`` that keeps the tensor's dtype: the bulk
    of a training step. Returns None for anything needing promotion or broadcasting (the general path)."""
    if a.__class__ is not Tensor:
        return None
    va = a._view
    dt = va.storage.dtype
    if not dt.is_floating and spec.float_only:
        return None
    bc = b.__class__
    if bc is Tensor:
        vb = b._view
        if vb.shape != va.shape or vb.storage.dtype is not dt or b._backend is not a._backend:
            return None
        arg: View | Scalar = vb
    elif bc is float and dt.is_floating:
        arg = b
    elif bc is int and dt is not bool_:
        if dt.is_floating:
            arg = float(b)
        elif INT32_MIN <= b <= INT32_MAX:
            arg = b
        else:
            return None  # the general path raises, naming the value
    else:
        return None
    out = empty(va.shape, bool_ if spec.returns_bool else dt, a._backend)
    if out._view.storage.numel:
        a._backend.elementwise(op, out._view, [va, arg])
    return out


def cast(t: Tensor, dtype: DType) -> Tensor:
    if t.dtype is dtype:
        return t
    out = empty(t.shape, dtype, t._backend)
    if out.numel():
        t._backend.elementwise("copy", out._view, [t._view])
    return out


def contiguous_copy(t: Tensor) -> Tensor:
    out = empty(t.shape, t.dtype, t._backend)
    if out.numel():
        t._backend.elementwise("copy", out._view, [t._view])
    return out


def write_into(dst: Tensor, op: str, *operands: Any) -> Tensor:
    """In-place: ``dst = op(*operands)`` written through dst's view (no autograd; bumps dst's version)."""
    tensors = [o for o in operands if isinstance(o, Tensor)]
    backend = same_backend(op, [dst, *tensors])
    spec = OPS[op]
    args: list[View | Scalar] = []
    for i, o in enumerate(operands):
        want = bool_ if i == spec.bool_operand else dst.dtype if not spec.returns_bool else o.dtype
        if isinstance(o, Tensor):
            if o.dtype is not want:
                o = cast(o, want)
            if o._view.storage is dst._view.storage and o._view != dst._view:
                o = contiguous_copy(o)  # a shifted alias of dst would race with the writes
            shape = broadcast_shapes(dst.shape, o.shape, op=op + "_")
            if shape != dst.shape:
                raise RuntimeError(f"{op}_: output with shape {dst.shape} doesn't match the broadcast shape {shape}")
            args.append(expand_view(o._view, dst.shape))
        else:
            args.append(coerce_scalar(o, want))
    if dst.numel():
        backend.elementwise(op, dst._view, args)
    dst._view.storage.version += 1
    return dst


def check_inplace(t: Tensor, op: str) -> bool:
    """Whether the in-place op must be recorded for autograd; raises for a leaf that requires grad."""
    if not is_grad_enabled():
        return False
    if t.requires_grad and t.is_leaf:
        raise RuntimeError(
            f"a leaf Variable that requires grad is being used in an in-place operation ({op}); "
            "wrap it in vkblas.no_grad() if this is an update of a parameter"
        )
    return t.requires_grad


def rebase_inplace(t: Tensor, result: Tensor) -> Tensor:
    """Make ``t`` hold ``result``'s values and history (a recorded in-place op)."""
    t._backend.elementwise("copy", t._view, [expand_view(result._view, t.shape)]) if t.numel() else None
    t._view.storage.version += 1
    t.grad_fn, t.requires_grad = result.grad_fn, result.requires_grad
    return t


def clone(input: Tensor) -> Tensor:  # noqa: A002
    """A contiguous copy of ``input`` (differentiable)."""
    return record(contiguous_copy(input), "CloneBackward", (input,), lambda n, g: (g,))


def alias(t: Tensor) -> Tensor:
    """The 'before' side of an in-place op: t's values and history in a copy, since backward rules may save it and
    the in-place op then overwrites t's storage."""
    a = Tensor._make(t._view, t._backend, t.requires_grad)
    a.grad_fn = t.grad_fn  # t's history as it is now: the in-place op is about to replace t.grad_fn
    return clone(a)


def foreach(program: ForeachProgram, tensors: Sequence[Sequence[Tensor]], scalars: Sequence[Any] = ()) -> None:
    """Run the ``foreach`` primitive (``backend/base.py``): ``program``'s elementwise steps over every list of
    same-shaped tensors in ``tensors``, in place, with ``scalars`` (Python numbers or 0-d tensors) as the negative
    arguments. No autograd; bumps the version of every tensor a step writes. One dispatch per few tensors on a GPU
    (the optimizers' multi-tensor update)."""
    if not tensors:
        return
    backend = tensors[0][0]._backend
    views, mixed, bad = [], False, None
    for ts in tensors:  # one pass over every tensor (the optimizers run this for every parameter every step)
        vs = [t._view for t in ts]
        shape, dtype = vs[0].shape, vs[0].storage.dtype
        for t, v in zip(ts, vs, strict=True):
            mixed = mixed or t._backend is not backend
            if bad is None and (v.shape != shape or v.storage.dtype is not dtype):
                bad = RuntimeError(
                    f"foreach: the tensors of one entry must share shape and dtype, got {shape} "
                    f"{dtype.name} and {v.shape} {v.storage.dtype.name}"
                )
        views.append(vs)
    tensor_scalars = [s for s in scalars if isinstance(s, Tensor)]
    if mixed or any(s._backend is not backend for s in tensor_scalars):
        same_backend("foreach", [t for ts in tensors for t in ts] + tensor_scalars)  # raises, naming the devices
    if bad is not None:
        raise bad
    for s in tensor_scalars:
        if s.ndim:
            raise RuntimeError(f"foreach: a tensor scalar must be 0-d, got shape {s.shape}")
    backend.foreach(program, views, [s._view if isinstance(s, Tensor) else s for s in scalars])
    written = {dst for dst, _, _ in program}
    for ts in tensors:
        for i in written:
            if i < len(ts):
                ts[i]._view.storage.version += 1
