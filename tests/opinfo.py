"""The OpInfo record of the op table and what the table's modules share (``tests/op_table.py`` and the modules it
appends: ``op_table_math.py``, ``op_table_index.py``, ``op_table_nn.py``): error-input rows and dtype groups."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import vkblas as vb
from op_samples import Sample

Rng = np.random.Generator
I32, F16, BOOL = vb.int32, vb.float16, vb.bool
U8, I8 = vb.uint8, vb.int8
NUMERIC = (I32, F16)
ANY = (I32, F16, BOOL, U8, I8)  # movement and indexing: any dtype, the 8-bit storage ones included


@dataclass(frozen=True)
class ErrorInput:
    """A sample the op must refuse: the exception type and a regex its message matches."""

    sample: Sample
    error: type[BaseException]
    match: str


@dataclass(frozen=True)
class OpInfo:
    name: str
    op: Callable[..., Any]
    ref: Callable[..., Any]
    samples: Callable[[Rng], Iterator[Sample]]
    differentiable: bool = True
    #: forward tolerances: cpu in float64, and float32 devices against the float64 reference
    atol: float = 1e-10
    rtol: float = 1e-7
    atol32: float = 2e-5
    rtol32: float = 2e-4
    #: gradcheck tolerances (float64, central differences), and float32 analytic vs float64 analytic gradients
    grad_atol: float = 1e-5
    grad_rtol: float = 1e-3
    grad_atol32: float = 1e-4
    grad_rtol32: float = 1e-3
    #: False for ops that only accept contiguous inputs (view)
    noncontiguous: bool = True
    #: dtypes the op takes besides the default float: the samples' float arrays converted (int32: rint(2x),
    #: bool: x > 0, float16: rounded); the result's dtype follows the reference's (float results of int inputs are
    #: float32, of float16 inputs float16)
    dtypes: tuple[vb.DType, ...] = ()
    #: inputs the op must refuse
    error_inputs: Callable[[Rng], Iterator[ErrorInput]] | None = None

    def _rng(self) -> Rng:
        return np.random.default_rng(zlib.crc32(self.name.encode()))

    def sample_list(self) -> list[Sample]:
        return list(self.samples(self._rng()))

    def error_list(self) -> list[ErrorInput]:
        return list(self.error_inputs(self._rng())) if self.error_inputs is not None else []


def errors(*cases: tuple[tuple[Any, ...], dict[str, Any], type[BaseException], str]):
    """error_inputs from (args, kwargs, exception, message regex) rows."""
    return lambda rng: (ErrorInput(Sample(args, kwargs), exc, match) for args, kwargs, exc, match in cases)


_Z = np.zeros
