"""Recording a matmul: the GEMM plan (``gemm.py``) that the tuner (``autotune.py``) picks for the call's layout,
cached per layout in the backend's plan cache. The tuner and the kernel family import nothing of this module, so
neither imports the other."""

from __future__ import annotations

from typing import Any

from ..base import View
from . import epilogue
from .autotune import tuner
from .memory import LargeStorage, NeedsSplitting


def encode_matmul(backend: Any, out: View, a: View, b: View, bias: View | None = None) -> None:
    """Record ``out = a @ b`` (views already validated: shapes agree, dtypes equal, out contiguous); ``bias``, a
    contiguous (N,) view, is added to every row in the GEMM's epilogue."""
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
        bias is not None,
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
            gp = backend.plans[key] = tuner(backend).plan(out, a, b, bias=bias, bias_on="cols")
    epilogue.record(backend, gp, out, a, b, bias)
