"""Creating tensors: from data, filled, ranges, and random (generated on the device)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import device as _dev
from . import graphs as _graphs
from .backend.base import View
from .dtypes import INT32_MAX, INT32_MIN, DType, bool_, float32, int32, to_dtype
from .ops._core import check_backend, elementwise
from .ops._core import empty as _empty
from .ops._core import full as _full
from .random import Generator, default_generator
from .tensor import Tensor

Shape = int | Sequence[int]


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        return tuple(int(s) for s in size)
    except TypeError:
        raise TypeError(f"size must be a sequence of ints, got {size!r}") from None


def _infer_dtype(arr: np.ndarray) -> DType:
    if arr.dtype == np.bool_:
        return bool_
    if arr.dtype.kind in "iu":
        return int32
    if arr.dtype == np.float16:
        return to_dtype("float16")
    if arr.dtype.kind == "f":
        return float32  # float64 data becomes float32 unless dtype=float64 is asked for (see README)
    raise TypeError(f"can't convert data of numpy dtype {arr.dtype} to a tensor")


def _to_array(data: Any) -> np.ndarray:
    if isinstance(data, Tensor):
        return data.detach().numpy()
    if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in data):
        data = [_to_array(d) for d in data]
    arr = np.asarray(data)
    if arr.dtype == object:
        raise TypeError(f"can't build a tensor from {type(data).__name__} with ragged or non-numeric entries")
    return arr


def _check_int_range(arr: np.ndarray) -> None:
    if arr.dtype.kind in "iu" and arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        bad = arr.max() if arr.max() > INT32_MAX else arr.min()
        raise OverflowError(f"value {bad} does not fit in int32 (int64 input is stored as int32; see README)")


def tensor(data: Any, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors)."""
    arr = _to_array(data)
    dt = to_dtype(dtype) if dtype is not None else _infer_dtype(arr)
    if requires_grad and dtype is None and not dt.is_floating:
        dt = float32  # the example: tensor([1, 2, 3], requires_grad=True) is a float leaf
    if not dt.is_floating and dt is not bool_:
        if arr.dtype.kind == "f" and dtype is None:
            dt = float32
        _check_int_range(arr)
    backend = _dev.resolve(device if device is not None else (data.device if isinstance(data, Tensor) else None))
    check_backend(backend, dt, "tensor")
    t = Tensor._make(View.of(backend.from_numpy(arr, dt), arr.shape), backend)
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(array: np.ndarray, device: _dev.DeviceLike = None) -> Tensor:
    """A tensor holding a *copy* of ``array`` (PyTorch shares memory; device memory cannot be shared here)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    return tensor(array, device=device)


def as_tensor(data: Any, dtype: Any = None, device: _dev.DeviceLike = None) -> Tensor:
    if (
        isinstance(data, Tensor)
        and (dtype is None or to_dtype(dtype) is data.dtype)
        and (device is None or _dev.device(device) == data.device)
    ):
        return data
    if isinstance(data, Tensor):
        return data.to(device=device or data.device, dtype=to_dtype(dtype) if dtype is not None else None)
    return tensor(data, dtype=dtype, device=device)


def _new(size: tuple[Any, ...], dtype: Any, device: _dev.DeviceLike, requires_grad: bool, fill: Any) -> Tensor:
    dt = to_dtype(dtype) if dtype is not None else float32
    b = _dev.resolve(device)
    t = _empty(_shape(size), dt, b) if fill is None else _full(_shape(size), fill, dt, b)
    return t.requires_grad_(True) if requires_grad else t


def empty(*size: Any, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _new(size, dtype, device, requires_grad, None)


def zeros(*size: Any, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _new(size, dtype, device, requires_grad, 0)


def ones(*size: Any, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _new(size, dtype, device, requires_grad, 1)


def full(
    size: Shape, fill_value: float, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False
) -> Tensor:
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else int32 if isinstance(fill_value, int) else float32
    return _new((size,) if isinstance(size, int) else tuple(size), dtype, device, requires_grad, fill_value)


def _like(name: str, fill: Any) -> Any:
    def like(
        input: Tensor,  # noqa: A002
        dtype: Any = None,
        device: _dev.DeviceLike = None,
        requires_grad: bool = False,
    ) -> Tensor:
        return _new(input.shape, dtype or input.dtype, device or input.device, requires_grad, fill)

    like.__name__ = like.__qualname__ = name
    like.__doc__ = f"Like ``{name[:-5]}`` with ``input``'s shape, and its dtype and device unless given."
    return like


zeros_like = _like("zeros_like", 0)
ones_like = _like("ones_like", 1)
empty_like = _like("empty_like", None)


def full_like(
    input: Tensor,  # noqa: A002
    fill_value: float,
    dtype: Any = None,
    device: _dev.DeviceLike = None,
    requires_grad: bool = False,
) -> Tensor:
    return _new(input.shape, dtype or input.dtype, device or input.device, requires_grad, fill_value)


def arange(
    start: float,
    end: float | None = None,
    step: float = 1,
    dtype: Any = None,
    device: _dev.DeviceLike = None,
    requires_grad: bool = False,
) -> Tensor:
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dt = to_dtype(dtype) if dtype is not None else int32 if is_int else float32
    n = max(0, math.ceil((end - start) / step))
    # computed in float64 on the host: exact for every int32 value and for float steps
    return tensor(start + step * np.arange(n, dtype=np.float64), dtype=dt, device=device, requires_grad=requires_grad)


def linspace(
    start: float, end: float, steps: int, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False
) -> Tensor:
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    return tensor(np.linspace(start, end, steps), dtype=dtype or float32, device=device, requires_grad=requires_grad)


def eye(
    n: int, m: int | None = None, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False
) -> Tensor:
    return tensor(np.eye(n, m), dtype=dtype or float32, device=device, requires_grad=requires_grad)


def _random(
    size: tuple[int, ...], distribution: str, dtype: Any, device: _dev.DeviceLike, generator: Generator | None
) -> Tensor:
    dt = to_dtype(dtype) if dtype is not None else float32
    if not dt.is_floating:
        raise RuntimeError(f"random {distribution} numbers need a floating dtype, got {dt!r}")
    b = _dev.resolve(device)
    check_backend(b, dt, "rand")
    out = _empty(size, dt, b)
    gen = generator or default_generator
    seed, counter = gen.take(out.numel())
    if out.numel():
        b.random(out._view, distribution, seed, counter)
        _graphs.note_random(b, gen, out.numel())
    return out


def rand(
    *size: Any,
    dtype: Any = None,
    device: _dev.DeviceLike = None,
    requires_grad: bool = False,
    generator: Generator | None = None,
) -> Tensor:
    t = _random(_shape(size), "uniform", dtype, device, generator)
    return t.requires_grad_(True) if requires_grad else t


def randn(
    *size: Any,
    dtype: Any = None,
    device: _dev.DeviceLike = None,
    requires_grad: bool = False,
    generator: Generator | None = None,
) -> Tensor:
    t = _random(_shape(size), "normal", dtype, device, generator)
    return t.requires_grad_(True) if requires_grad else t


def randint(
    low: int,
    high: int | None = None,
    size: Shape = (),
    dtype: Any = None,
    device: _dev.DeviceLike = None,
    generator: Generator | None = None,
) -> Tensor:
    if high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"randint: expected low < high, got low={low}, high={high}")
    u = _random(_shape((size,) if isinstance(size, int) else tuple(size)), "uniform", float32, device, generator)
    # floor(u * span) without a float rounding past high - 1
    v = elementwise("minimum", elementwise("mul", u, float(high - low)), float(high - low - 1))
    out = elementwise("add", elementwise("copy", v, out_dtype=int32, dtype=float32), low)
    return out if dtype is None else out.to(to_dtype(dtype))


def randperm(n: int, device: _dev.DeviceLike = None, generator: Generator | None = None) -> Tensor:
    """A random permutation of 0..n-1 (argsort of device uniforms, sorted on the host)."""
    keys = rand(n, device="cpu", generator=generator).numpy()
    return tensor(np.argsort(keys, kind="stable"), dtype=int32, device=device)


def rand_like(input: Tensor, dtype: Any = None, device: _dev.DeviceLike = None) -> Tensor:  # noqa: A002
    return rand(input.shape, dtype=dtype or input.dtype, device=device or input.device)


def randn_like(input: Tensor, dtype: Any = None, device: _dev.DeviceLike = None) -> Tensor:  # noqa: A002
    return randn(input.shape, dtype=dtype or input.dtype, device=device or input.device)


def _fill_random(t: Tensor, distribution: str, generator: Generator | None) -> Tensor:
    from .ops._core import check_inplace

    if check_inplace(t, distribution + "_"):
        raise RuntimeError(f"{distribution}_ cannot be recorded by autograd; call it inside vkblas.no_grad()")
    if not t.dtype.is_floating:
        raise RuntimeError(f"{distribution}_ needs a floating dtype, got {t.dtype!r}")
    gen = generator or default_generator
    seed, counter = gen.take(t.numel())
    if t.numel():
        t._backend.random(t._view, distribution, seed, counter)
        _graphs.note_random(t._backend, gen, t.numel())
    t._view.storage.version += 1
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with U(a, b)."""
    from .ops._core import write_into

    _fill_random(t, "uniform", generator)
    return write_into(t, "lerp", a, b, t) if (a, b) != (0.0, 1.0) else t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with N(mean, std**2)."""
    from .ops._core import write_into

    _fill_random(t, "normal", generator)
    if std != 1.0:
        write_into(t, "mul", t, float(std))
    return write_into(t, "add", t, float(mean)) if mean != 0.0 else t


def bernoulli_(t: Tensor, p: float = 0.5, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with 1 with probability ``p``, else 0."""
    from .ops._core import write_into

    _fill_random(t, "uniform", generator)
    return write_into(t, "where", elementwise("lt", t, float(p)), 1.0, 0.0)
