"""The user-facing Tensor: a strided view of backend storage, plus autograd bookkeeping.

Ops live in ``vkblas.ops``; the methods here are thin doors to them with PyTorch's names and signatures.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import autograd
from . import device as _dev
from .backend.base import Backend, View
from .dtypes import DType, bool_, float16, float32, int32, to_dtype


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

    @classmethod
    def _from_value(cls, value: Any, dtype: DType | None = None, device: _dev.DeviceLike = None) -> Tensor:
        from .creation import tensor

        return tensor(value, dtype=dtype, device=device)

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return self._view.shape

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.shape if dim is None else self.shape[_ops.norm_dim(dim, self.ndim)]

    @property
    def ndim(self) -> int:
        return len(self._view.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._view.numel

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self._view.strides if dim is None else self._view.strides[_ops.norm_dim(dim, self.ndim)]

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

    @property
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

    def __hash__(self) -> int:
        return id(self)

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
    def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> None:
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

    # ------------------------------------------------------------------ conversion
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or keywords ``device=``, ``dtype=``."""
        dev, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            dtype_names = ("float32", "float16", "float64", "int32", "bool")
            if isinstance(a, (_dev.device, str)) and not (isinstance(a, str) and a in dtype_names):
                dev = a
            else:
                dtype = a
        return _ops.to(self, device=dev, dtype=None if dtype is None else to_dtype(dtype))

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def float(self) -> Tensor:
        return self.to(float32)

    def half(self) -> Tensor:
        return self.to(float16)

    def int(self) -> Tensor:
        return self.to(int32)

    def long(self) -> Tensor:  # no int64 storage (see dtypes.py)
        return self.to(int32)

    def bool(self) -> Tensor:
        return self.to(bool_)

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(other.dtype)

    def new_tensor(self, data: Any, dtype: DType | None = None) -> Tensor:
        return Tensor._from_value(data, dtype=dtype or self.dtype, device=self.device)

    def new_zeros(self, shape: Sequence[int], dtype: DType | None = None) -> Tensor:
        return _ops.full(tuple(shape), 0, dtype or self.dtype, self._backend)

    def new_ones(self, shape: Sequence[int], dtype: DType | None = None) -> Tensor:
        return _ops.full(tuple(shape), 1, dtype or self.dtype, self._backend)

    def new_full(self, shape: Sequence[int], fill_value: float, dtype: DType | None = None) -> Tensor:
        return _ops.full(tuple(shape), fill_value, dtype or self.dtype, self._backend)

    def new_empty(self, shape: Sequence[int], dtype: DType | None = None) -> Tensor:
        return _ops.empty(tuple(shape), dtype or self.dtype, self._backend)

    # ------------------------------------------------------------------ operators
    def __add__(self, o: Any) -> Tensor:
        return _ops.binary("add", self, o)

    def __radd__(self, o: Any) -> Tensor:
        return _ops.binary("add", o, self)

    def __sub__(self, o: Any) -> Tensor:
        return _ops.binary("sub", self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return _ops.binary("sub", o, self)

    def __mul__(self, o: Any) -> Tensor:
        return _ops.binary("mul", self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return _ops.binary("mul", o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return _ops.binary("div", self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return _ops.binary("div", o, self)

    def __pow__(self, o: Any) -> Tensor:
        return _ops.binary("pow", self, o)

    def __rpow__(self, o: Any) -> Tensor:
        return _ops.binary("pow", o, self)

    def __matmul__(self, o: Tensor) -> Tensor:
        return _ops.matmul(self, o)

    def __rmatmul__(self, o: Tensor) -> Tensor:
        return _ops.matmul(o, self)

    def __neg__(self) -> Tensor:
        return _ops.neg(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return _ops.abs(self)

    def __invert__(self) -> Tensor:
        if self.dtype is not bool_:
            raise TypeError(f"~ is only supported for bool tensors here (got {self.dtype!r})")
        return _ops.logical_not(self)

    def __and__(self, o: Any) -> Tensor:
        return _ops.logical_and(self, o)

    def __or__(self, o: Any) -> Tensor:
        return _ops.logical_or(self, o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _ops.eq(self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return _ops.ne(self, o)

    def __lt__(self, o: Any) -> Tensor:
        return _ops.lt(self, o)

    def __le__(self, o: Any) -> Tensor:
        return _ops.le(self, o)

    def __gt__(self, o: Any) -> Tensor:
        return _ops.gt(self, o)

    def __ge__(self, o: Any) -> Tensor:
        return _ops.ge(self, o)

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        _ops.setitem(self, index, value)

    # in-place operators
    def __iadd__(self, o: Any) -> Tensor:
        return self.add_(o)

    def __isub__(self, o: Any) -> Tensor:
        return self.sub_(o)

    def __imul__(self, o: Any) -> Tensor:
        return self.mul_(o)

    def __itruediv__(self, o: Any) -> Tensor:
        return self.div_(o)

    @property
    def T(self) -> Tensor:  # noqa: N802 - PyTorch's name
        return _ops.permute(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:  # noqa: N802
        return _ops.transpose(self, -2, -1)


def _method(name: str) -> Any:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        return getattr(_ops, name)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Same as ``vkblas.{name}(self, ...)``."
    return method


# Methods that are exactly ``vkblas.<name>(self, ...)``: generated, not written out one by one.
METHODS = (
    "add sub mul div neg pow exp log sqrt rsqrt abs sign sin cos tanh sigmoid relu gelu silu leaky_relu square "
    "reciprocal clamp clip maximum minimum eq ne lt le gt ge logical_not logical_and logical_or masked_fill "
    "sum mean max min argmax argmin var std logsumexp softmax log_softmax all any amax amin "
    "matmul mm bmm reshape view view_as flatten squeeze unsqueeze permute transpose expand expand_as repeat split "
    "chunk unbind narrow contiguous clone gather index_select scatter_add where "
    "add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_ addcmul_ addcdiv_ lerp_ uniform_ normal_ pow_ sqrt_ neg_ "
    "exp_ relu_ masked_fill_ bernoulli_"
).split()
for _name in METHODS:
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _method(_name))

from . import ops as _ops  # noqa: E402  (ops import Tensor; this import must follow the class)
