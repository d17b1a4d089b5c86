"""Creating tensors: from data, filled, ranges, and random (generated on the device, ``ops/random.py``).

These are the user-facing factories: they resolve ``device=`` and ``dtype=`` arguments; the tensors themselves are
made by ``tensor.py`` (storage, host data) and ``ops``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import device as _dev
from .dtypes import bool_, float32, int32, to_dtype
from .ops._core import elementwise
from .ops._core import full as _full
from .ops.random import random_tensor
from .random import Generator
from .tensor import Tensor, host_array, host_dtype, upload
from .tensor import empty as _empty

Shape = int | Sequence[int]


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        return tuple(int(s) for s in size)
    except TypeError:
        raise TypeError(f"size must be a sequence of ints, got {size!r}") from None


def tensor(data: Any, dtype: Any = None, device: _dev.DeviceLike = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors)."""
    arr = host_array(data)
    dt = to_dtype(dtype) if dtype is not None else host_dtype(arr)
    if requires_grad and dtype is None and not dt.is_floating:
        dt = float32  # the example: tensor([1, 2, 3], requires_grad=True) is a float leaf
    backend = _dev.resolve(device if device is not None else (data.device if isinstance(data, Tensor) else None))
    t = upload(arr, dt, backend)
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
    return random_tensor(size, distribution, dt, _dev.resolve(device), generator)


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
