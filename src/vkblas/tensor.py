"""The user-facing Tensor: a strided view of backend storage (data, metadata, host transfer), plus the autograd
fields. Tensors are made here (:func:`empty`, :func:`from_host`) and by ``vkblas.creation``.

The op methods (``+``, ``exp``, ``sum``, ``reshape``, ``to`` ...) are not here: ops sit above this module and bind
them when ``vkblas.ops`` is imported (``ops/methods.py``, written out one by one; elementwise ops' methods come from
their records). ``backward`` hands the engine (``vkblas.autograd``) a ready seed gradient, so the engine needs
nothing from this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import autograd
from . import device as _dev
from .backend.base import Backend, UnsupportedError, View
from .dtypes import INT32_MAX, INT32_MIN, DType, bool_, float16, float32, int8, int32, uint8


class Tensor:
    __slots__ = ("_view", "_backend", "requires_grad", "grad", "grad_fn", "_retains_grad", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create tensors with vkblas.tensor(...), vkblas.zeros(...) and friends")

    @classmethod
    def _make(cls, view: View, backend: Backend, requires_grad: bool = False) -> Tensor:
        t = object.__new__(cls)
        t._view = view
        t._backend = backend
        t.requires_grad = requires_grad
        t.grad = None
        t.grad_fn = None
        t._retains_grad = False
        return t

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return self._view.shape

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.shape if dim is None else self.shape[norm_dim(dim, self.ndim)]

    @property
    def ndim(self) -> int:
        return len(self._view.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._view.numel

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self._view.strides if dim is None else self._view.strides[norm_dim(dim, self.ndim)]

    def storage_offset(self) -> int:
        return self._view.offset

    def is_contiguous(self) -> bool:
        return self._view.is_contiguous()

    @property
    def dtype(self) -> DType:
        return self._view.storage.dtype

    @property
    def device(self) -> _dev.device:
        return _dev.of_backend(self._backend)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        return self._view.storage.version

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # by identity (== is elementwise), in C: optimizer state, autograd's sets and caches hash tensors every step
    __hash__ = object.__hash__

    # ------------------------------------------------------------------ host transfer (sync points)
    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._backend.to_numpy(self._view)

    def item(self) -> bool | int | float:
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._backend.to_numpy(self._view).reshape(()).item()

    def tolist(self) -> Any:
        return self._backend.to_numpy(self._view).tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.detach().numpy()
        return a if dtype is None else a.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        arr = self._backend.to_numpy(self._view)
        if self.dtype.is_floating:
            body = np.array2string(arr, separator=", ", prefix="tensor(", precision=4, floatmode="maxprec_equal")
        else:
            body = np.array2string(arr, separator=", ", prefix="tensor(")
        extras = []
        if self.device.type != "cpu":
            extras.append(f"device='{self.device}'")
        if self.dtype not in (float32, int32, bool_) or (self.numel() == 0 and self.dtype is not float32):
            extras.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # ------------------------------------------------------------------ autograd
    def backward(self, gradient: Any = None, retain_graph: bool = False) -> None:
        """Accumulate the gradient of this tensor into ``.grad`` of the leaves it was computed from. ``gradient``
        (a tensor or host data) defaults to ones (PyTorch asks for it explicitly for a non-scalar output)."""
        if gradient is None:
            # deliberate difference: PyTorch asks for an explicit gradient for non-scalar outputs; vkblas seeds ones
            gradient = self.new_ones(self.shape)
        elif not isinstance(gradient, Tensor):
            gradient = from_host(gradient, self.dtype, self._backend)
        autograd.backward(self, gradient, retain_graph=retain_graph)

    def detach(self) -> Tensor:
        return Tensor._make(self._view, self._backend)

    def detach_(self) -> Tensor:
        self.grad_fn = None
        self.requires_grad = False
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if requires_grad and not self.dtype.is_floating:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients (got {self.dtype!r})")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None:
            self._retains_grad = True

    def _accumulate_grad(self, g: Tensor, owned: bool = False) -> None:
        """Add ``g`` into ``.grad``. ``owned`` says the engine made ``g`` for this tensor alone (contiguous, its
        storage shared with nothing the user or another ``.grad`` can see), so it can be kept without a copy."""
        if self.grad is None:
            self.grad = g.detach() if owned else g.clone()
        else:
            self.grad = self.grad + g

    # ------------------------------------------------------------------ new tensors like this one
    def new_tensor(self, data: Any, dtype: DType | None = None) -> Tensor:
        return from_host(data, dtype or self.dtype, self._backend)

    def new_empty(self, *size: Any, dtype: DType | None = None) -> Tensor:
        return empty(size_arg(size), dtype or self.dtype, self._backend)


def size_arg(size: tuple[Any, ...]) -> tuple[int, ...]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` alike: PyTorch's ways of passing a size."""
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    return tuple(int(n) for n in size)


def norm_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index into ``ndim`` dims (negative counts from the end), or PyTorch's IndexError."""
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % max(ndim, 1)


def check_backend(b: Backend, dtype: DType, op: str) -> None:
    if not b.supports(dtype):
        raise UnsupportedError(
            f"{op}: dtype {dtype.name} is not supported on device '{b.name}'"
            + (" (no shader-f16 feature)" if dtype.name == "float16" else "")
        )


def empty(shape: tuple[int, ...], dtype: DType, backend: Backend) -> Tensor:
    """A new contiguous tensor of uninitialised storage on ``backend``."""
    if not backend.supports(dtype):
        check_backend(backend, dtype, "empty")
    rank = len(shape)
    if rank <= 2:  # most tensors of a step: their layout written out (the loop below gives the same)
        if rank == 2:
            a, b = shape
            if a.__class__ is int and b.__class__ is int and a >= 0 and b >= 0:
                view = View(backend.alloc(a * b, dtype), (a, b), (b or 1, 1), 0)
                return Tensor._make(view, backend)
        elif rank == 1:
            (a,) = shape
            if a.__class__ is int and a >= 0:
                return Tensor._make(View(backend.alloc(a, dtype), (a,), (1,), 0), backend)
        else:
            return Tensor._make(View(backend.alloc(1, dtype), (), (), 0), backend)
    strides, n = [], 1
    for k in reversed(shape):
        if k.__class__ is not int:
            if not isinstance(k, (int, np.integer)):
                raise ValueError(f"invalid shape {shape}: sizes must be non-negative integers")
            return empty(tuple(int(x) for x in shape), dtype, backend)
        if k < 0:
            raise ValueError(f"invalid shape {shape}: sizes must be non-negative integers")
        strides.append(n)
        n *= k if k else 1
    total = n if 0 not in shape else 0
    return Tensor._make(View(backend.alloc(total, dtype), tuple(shape), tuple(reversed(strides)), 0), backend)


# ---------------------------------------------------------------------------------------------- from host data
def host_array(data: Any) -> np.ndarray:
    """Host data (numbers, nested lists, numpy arrays, tensors) as a numpy array."""
    if isinstance(data, Tensor):
        return data.detach().numpy()
    if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in data):
        data = [host_array(d) for d in data]
    arr = np.asarray(data)
    if arr.dtype == object:
        raise TypeError(f"can't build a tensor from {type(data).__name__} with ragged or non-numeric entries")
    return arr


def host_dtype(arr: np.ndarray) -> DType:
    """The dtype host data gets when none is asked for."""
    if arr.dtype == np.bool_:
        return bool_
    if arr.dtype == np.uint8:
        return uint8
    if arr.dtype == np.int8:
        return int8
    if arr.dtype.kind in "iu":
        return int32
    if arr.dtype == np.float16:
        return float16
    if arr.dtype.kind == "f":
        return float32  # float64 data becomes float32 unless dtype=float64 is asked for (see README)
    raise TypeError(f"can't convert data of numpy dtype {arr.dtype} to a tensor")


def upload(arr: np.ndarray, dtype: DType, backend: Backend) -> Tensor:
    """A new tensor on ``backend`` holding ``arr`` converted to ``dtype`` (integers range-checked for int32)."""
    if dtype is int32 and arr.dtype.kind in "iu" and arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        bad = arr.max() if arr.max() > INT32_MAX else arr.min()
        raise OverflowError(f"value {bad} does not fit in int32 (int64 input is stored as int32; see README)")
    if dtype in (uint8, int8) and arr.dtype.kind in "iub" and arr.size:
        lo, hi = np.iinfo(dtype.np).min, np.iinfo(dtype.np).max
        if arr.min() < lo or arr.max() > hi:
            bad = arr.max() if arr.max() > hi else arr.min()
            raise OverflowError(f"value {bad} cannot be converted to type {dtype.name} without overflow")
    check_backend(backend, dtype, "tensor")
    return Tensor._make(View.of(backend.from_numpy(arr, dtype), arr.shape), backend)


def from_host(data: Any, dtype: DType | None, backend: Backend) -> Tensor:
    """A new tensor on ``backend`` holding a copy of host ``data`` (``dtype``, or the one the data implies)."""
    arr = host_array(data)
    return upload(arr, dtype if dtype is not None else host_dtype(arr), backend)
