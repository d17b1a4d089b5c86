"""Recording a matmul: the GEMM plan (``gemm.py``) that the tuner (``autotune.py``) picks for the call's layout,
cached per layout in the backend's plan cache. The tuner and the kernel family import nothing of this module, so
neither imports the other."""

from __future__ import annotations

from typing import Any

from ..base import View
from . import epilogue
from .autotune import tuner
from .memory import LargeStorage, NeedsSplitting


def encode_matmul(backend: Any, out: View, a: View, b: View, bias: View | None = None, axis: str = "cols") -> None:
    """Record ``out = a @ b`` (views already validated: shapes agree, dtypes equal, out contiguous); ``bias``, a
    contiguous view: with ``axis="cols"`` an (N,) bias added to every row in the GEMM's epilogue, with
    ``"sum_rows"`` an (M,) target of ``a``'s row sums (``gemm.Spec.bias``)."""
    key = (
        "gemm",
        a.dtype,
        out.shape,
        out.strides,
        a.shape,
        a.strides,
        b.shape,
        b.strides,
        out.offset % 4 == 0,
        a.offset % 4 == 0,
        b.offset % 4 == 0,
        None if bias is None else axis,
    )
    gp = backend.plans.get(key)
    if gp is None:
        if any(isinstance(v.storage, LargeStorage) for v in (out, a, b, bias) if v is not None):
            # before the tuner, which times the call's own operands: those of a large tensor are cut into pieces
            # that fit a binding (large.py), whose matmuls come back here. (A cached plan needs no such check:
            # binding a large storage raises NeedsSplitting before anything is recorded.)
            raise NeedsSplitting("matmul")
        # never tuned or self-checked inside a graph capture: that work runs eagerly, unrecorded
        with backend.rt.paused():
            gp = backend.plans[key] = tuner(backend).plan(out, a, b, bias=bias, bias_on=axis)
    epilogue.record(backend, gp, out, a, b, bias)
