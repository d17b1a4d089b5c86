"""The dtypes vkblas knows, with PyTorch's names, and the promotion rule between them.

Deliberate difference from PyTorch: there is no int64 (or int16) storage. int64 input (numpy arrays, Python ints)
is accepted and stored as int32 after an overflow check, because WGSL has no 64-bit integers on most adapters.
``uint8`` and ``int8`` are storage dtypes (image data): they compute in int32 and wrap when stored, as PyTorch's
do; mixing the two promotes to int32 (PyTorch: int16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    name: str
    np: np.dtype
    is_floating: bool
    #: bytes per element in device storage (bool lives in a 32-bit word on the GPU)
    itemsize: int

    def __repr__(self) -> str:
        return f"vkblas.{self.name}"

    @property
    def is_bool(self) -> bool:
        return self is bool_


float32 = DType("float32", np.dtype(np.float32), True, 4)
float16 = DType("float16", np.dtype(np.float16), True, 2)
float64 = DType("float64", np.dtype(np.float64), True, 8)  # cpu backend only: the test oracle's precision
int32 = DType("int32", np.dtype(np.int32), False, 4)
uint8 = DType("uint8", np.dtype(np.uint8), False, 1)
int8 = DType("int8", np.dtype(np.int8), False, 1)
bool_ = DType("bool", np.dtype(np.bool_), False, 4)

ALL = (float32, float16, float64, int32, uint8, int8, bool_)
#: the 8-bit storage dtypes (packed four to a 32-bit word on the GPU)
BYTES = (uint8, int8)
half, double = float16, float64  # PyTorch's aliases
_BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}
# promotion order: bool < uint8, int8 < int32 < float16 < float32 < float64 (uint8 with int8: int32)
_RANK = {bool_: 0, uint8: 1, int8: 1, int32: 2, float16: 3, float32: 4, float64: 5}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def to_dtype(d: object) -> DType:
    """Accept a vkblas dtype, a numpy dtype / type, or a name such as ``"float32"``."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d in _BY_NAME:
        return _BY_NAME[d]
    if d is bool:
        return bool_
    try:
        npd = np.dtype(d)
    except TypeError:
        raise TypeError(f"unknown dtype {d!r}; expected one of {', '.join(_BY_NAME)}") from None
    if npd in _BY_NP:
        return _BY_NP[npd]
    if npd.kind in "iu":
        return int32  # int64 / int16 / uint16 ... are stored as int32 (range checked where values are converted)
    raise TypeError(f"dtype {npd} is not supported; expected one of {', '.join(_BY_NAME)}")


def promote(a: DType, b: DType) -> DType:
    if a is not b and _RANK[a] == _RANK[b]:  # uint8 with int8: the smallest type holding both
        return int32
    return a if _RANK[a] >= _RANK[b] else b


def scalar_dtype(value: object, default_float: DType = float32) -> DType:
    """dtype a Python scalar would get on its own (PyTorch: bool, int64 -> int32 here, default float)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int32
    return default_float


def result_type(tensor_dtype: DType, scalar: object) -> DType:
    """PyTorch's rule for tensor-op-scalar: the scalar only promotes across categories (int tensor * 0.5 -> float)."""
    sd = scalar_dtype(scalar)
    if sd.is_floating and not tensor_dtype.is_floating:
        return float32
    if sd is int32 and tensor_dtype is bool_:
        return int32
    return tensor_dtype
