"""The Tensor methods that run ops, bound to :class:`~vkblas.tensor.Tensor` when ``vkblas.ops`` is imported.

``tensor.py`` sits below the ops (they create tensors), so the methods are attached from here, one line each, to
the same functions ``vkblas.<name>`` calls. The methods of the one-record elementwise ops (``exp``, ``mul``, ``eq``
... and ``exp_`` ...) come from their records' ``method`` / ``inplace`` flags (``ops/elementwise.py``), bound by
the loop at the end.
"""

from __future__ import annotations

from typing import Any

from .. import device as _dev
from ..dtypes import DType, bool_, float16, float32, float64, int8, int32, to_dtype, uint8
from ..tensor import Tensor, size_arg
from . import elementwise as ew
from . import (  # noqa: F401  (unary_math: records)
    indexing,
    linalg,
    parametric,
    pointwise,
    rearrange,
    reduction,
    sampling,
    scan,
    scatter,
    shape,
    sorting,
    unary_math,
)
from ._core import clone, full
from .random import bernoulli_, normal_, uniform_
from .record import RECORDS, inplace_function


# ---------------------------------------------------------------- operators
def _reflected(op: Any) -> Any:
    """``other <op> tensor`` (Python's ``__radd__`` ...): the op with its operands in PyTorch's order."""

    def reflected(self: Tensor, other: Any) -> Tensor:
        return op(other, self)

    reflected.__name__ = reflected.__qualname__ = f"__r{getattr(op, '__name__', 'op')}__"
    return reflected


def _pos(self: Tensor) -> Tensor:
    return self


def _invert(self: Tensor) -> Tensor:
    if self.dtype.is_floating:
        raise TypeError(
            f"~ (operator.invert) is only implemented on integer and Boolean-type tensors, got {self.dtype!r}"
        )
    return ew.bitwise_not(self)


Tensor.__add__ = ew._add
Tensor.__radd__ = _reflected(ew._add)
Tensor.__sub__ = ew._sub
Tensor.__rsub__ = _reflected(ew._sub)
Tensor.__mul__ = ew.mul
Tensor.__rmul__ = _reflected(ew.mul)
Tensor.__truediv__ = ew._div
Tensor.__rtruediv__ = _reflected(ew._div)
Tensor.__floordiv__ = ew.floor_divide
Tensor.__rfloordiv__ = _reflected(ew.floor_divide)
Tensor.__mod__ = ew.remainder
Tensor.__rmod__ = _reflected(ew.remainder)
Tensor.__pow__ = ew.pow
Tensor.__rpow__ = _reflected(ew.pow)
Tensor.__matmul__ = linalg.matmul
Tensor.__rmatmul__ = _reflected(linalg.matmul)
Tensor.__neg__ = ew.neg
Tensor.__pos__ = _pos
Tensor.__abs__ = ew.abs
Tensor.__invert__ = _invert
Tensor.__and__ = ew.bitwise_and
Tensor.__or__ = ew.bitwise_or
Tensor.__xor__ = ew.bitwise_xor
Tensor.__rand__ = _reflected(ew.bitwise_and)
Tensor.__ror__ = _reflected(ew.bitwise_or)
Tensor.__rxor__ = _reflected(ew.bitwise_xor)
Tensor.__lshift__ = ew.bitwise_left_shift
Tensor.__rshift__ = ew.bitwise_right_shift
Tensor.__rlshift__ = _reflected(ew.bitwise_left_shift)
Tensor.__rrshift__ = _reflected(ew.bitwise_right_shift)
Tensor.__eq__ = ew.eq  # type: ignore[assignment]
Tensor.__ne__ = ew.ne  # type: ignore[assignment]
Tensor.__lt__ = ew.lt
Tensor.__le__ = ew.le
Tensor.__gt__ = ew.gt
Tensor.__ge__ = ew.ge
Tensor.__getitem__ = indexing.getitem
Tensor.__setitem__ = indexing.setitem
# in-place operators
Tensor.__iadd__ = pointwise.add_
Tensor.__isub__ = pointwise.sub_
Tensor.__imul__ = pointwise.mul_
Tensor.__itruediv__ = pointwise.div_


# ---------------------------------------------------------------- transposes
def _T(self: Tensor) -> Tensor:  # noqa: N802 - PyTorch's name
    return shape.permute(self, tuple(reversed(range(self.ndim))))


def _mT(self: Tensor) -> Tensor:  # noqa: N802
    return shape.transpose(self, -2, -1)


Tensor.T = property(_T, doc="The dims in reverse order (a view).")
Tensor.mT = property(_mT, doc="The last two dims swapped (a view).")


# ---------------------------------------------------------------- conversion
_DTYPE_NAMES = ("float32", "float16", "float64", "int32", "uint8", "int8", "bool")


def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or keywords ``device=``, ``dtype=``."""
    dev, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, (_dev.device, str)) and not (isinstance(a, str) and a in _DTYPE_NAMES):
            dev = a
        else:
            dtype = a
    return shape.to(self, device=dev, dtype=None if dtype is None else to_dtype(dtype))


def _cpu(self: Tensor) -> Tensor:
    return _to(self, "cpu")


def _caster(dtype: DType, name: str) -> Any:
    def cast(self: Tensor) -> Tensor:
        return _to(self, dtype)

    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = f"``self.to({dtype!r})``"
    return cast


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    return _to(self, other.dtype)


Tensor.to = _to
Tensor.cpu = _cpu
Tensor.float = _caster(float32, "float")
Tensor.double = _caster(float64, "double")  # cpu only: Vulkan devices raise, naming the dtype
Tensor.half = _caster(float16, "half")
Tensor.int = _caster(int32, "int")
Tensor.long = _caster(int32, "long")  # no int64 storage (see dtypes.py)
Tensor.bool = _caster(bool_, "bool")
Tensor.byte = _caster(uint8, "byte")
Tensor.char = _caster(int8, "char")
Tensor.type_as = _type_as


# ---------------------------------------------------------------- new tensors on this one's device
def _new_zeros(self: Tensor, *size: Any, dtype: DType | None = None) -> Tensor:
    return full(size_arg(size), 0, dtype or self.dtype, self._backend)


def _new_ones(self: Tensor, *size: Any, dtype: DType | None = None) -> Tensor:
    return full(size_arg(size), 1, dtype or self.dtype, self._backend)


def _new_full(self: Tensor, size: Any, fill_value: float, dtype: DType | None = None) -> Tensor:
    return full(size_arg((size,)), fill_value, dtype or self.dtype, self._backend)


Tensor.new_zeros = _new_zeros
Tensor.new_ones = _new_ones
Tensor.new_full = _new_full


# ---------------------------------------------------------------- the functional ops as methods
def _where(self: Tensor, condition: Tensor, other: Any) -> Tensor:
    """``self`` where ``condition``, else ``other`` (PyTorch's ``Tensor.where``)."""
    return pointwise.where(condition, self, other)


Tensor.add = pointwise.add
Tensor.sub = pointwise.sub
Tensor.div = pointwise.div
Tensor.divide = pointwise.div
Tensor.true_divide = pointwise.true_divide
Tensor.gelu = pointwise.gelu
Tensor.leaky_relu = pointwise.leaky_relu
Tensor.clamp = pointwise.clamp
Tensor.clip = pointwise.clip
Tensor.where = _where
Tensor.masked_fill = pointwise.masked_fill

Tensor.sum = reduction.sum
Tensor.prod = reduction.prod
Tensor.mean = reduction.mean
Tensor.max = reduction.max
Tensor.min = reduction.min
Tensor.amax = reduction.amax
Tensor.amin = reduction.amin
Tensor.argmax = reduction.argmax
Tensor.argmin = reduction.argmin
Tensor.all = reduction.all
Tensor.any = reduction.any
Tensor.var = reduction.var
Tensor.std = reduction.std
Tensor.logsumexp = reduction.logsumexp
Tensor.softmax = reduction.softmax
Tensor.log_softmax = reduction.log_softmax

Tensor.matmul = linalg.matmul
Tensor.mm = linalg.mm
Tensor.bmm = linalg.bmm

Tensor.reshape = shape.reshape
Tensor.view = shape.view
Tensor.view_as = shape.view_as
Tensor.flatten = shape.flatten
Tensor.squeeze = shape.squeeze
Tensor.unsqueeze = shape.unsqueeze
Tensor.permute = shape.permute
Tensor.transpose = shape.transpose
Tensor.expand = shape.expand
Tensor.expand_as = shape.expand_as
Tensor.repeat = shape.repeat
Tensor.split = shape.split
Tensor.chunk = shape.chunk
Tensor.unbind = shape.unbind
Tensor.narrow = shape.narrow
Tensor.contiguous = shape.contiguous
Tensor.clone = clone

Tensor.gather = indexing.gather
Tensor.index_select = indexing.index_select
Tensor.scatter_add = indexing.scatter_add

# in place (optimizers, initialisers, user code)
Tensor.add_ = pointwise.add_
Tensor.sub_ = pointwise.sub_
Tensor.mul_ = pointwise.mul_
Tensor.div_ = pointwise.div_
Tensor.pow_ = pointwise.pow_
Tensor.zero_ = pointwise.zero_
Tensor.fill_ = pointwise.fill_
Tensor.copy_ = pointwise.copy_
Tensor.clamp_ = pointwise.clamp_
Tensor.masked_fill_ = pointwise.masked_fill_
Tensor.addcmul_ = pointwise.addcmul_
Tensor.addcdiv_ = pointwise.addcdiv_
Tensor.lerp_ = pointwise.lerp_
Tensor.uniform_ = uniform_
Tensor.normal_ = normal_
Tensor.bernoulli_ = bernoulli_

# ---------------------------------------------------------------- elementwise ops with parameters (ops/parametric.py)
Tensor.round = parametric.round
Tensor.isclose = parametric.isclose
Tensor.allclose = parametric.allclose

# ---------------------------------------------------------------- scans, sorting, rearranging, scattering
Tensor.cumsum = scan.cumsum
Tensor.cumprod = scan.cumprod
Tensor.sort = sorting.sort
Tensor.argsort = sorting.argsort
Tensor.topk = sorting.topk
Tensor.multinomial = sampling.multinomial
Tensor.flip = rearrange.flip
Tensor.roll = rearrange.roll
Tensor.tril = rearrange.tril
Tensor.triu = rearrange.triu
Tensor.diagonal = rearrange.diagonal
Tensor.unfold = rearrange.unfold
Tensor.repeat_interleave = rearrange.repeat_interleave
Tensor.scatter = scatter.scatter
Tensor.scatter_reduce = scatter.scatter_reduce
Tensor.index_add = scatter.index_add
Tensor.index_copy = scatter.index_copy
Tensor.index_fill = scatter.index_fill
Tensor.masked_scatter = scatter.masked_scatter
Tensor.nonzero = scatter.nonzero
Tensor.scatter_ = scatter.scatter_
Tensor.scatter_add_ = scatter.scatter_add_
Tensor.scatter_reduce_ = scatter.scatter_reduce_
Tensor.index_add_ = scatter.index_add_
Tensor.index_copy_ = scatter.index_copy_
Tensor.index_fill_ = scatter.index_fill_
Tensor.masked_scatter_ = scatter.masked_scatter_

# ---------------------------------------------------------------- the elementwise records' methods
for _rec in RECORDS.values():
    if _rec.method:
        setattr(Tensor, _rec.name, _rec.function)
    if _rec.inplace:
        setattr(Tensor, _rec.name + "_", inplace_function(_rec))
