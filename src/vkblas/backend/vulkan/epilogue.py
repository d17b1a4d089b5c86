"""Epilogue fusion: an elementwise op that takes a GEMM's result straight after the GEMM runs in its epilogue.

A linear layer or a convolution followed by ReLU was two dispatches, and so was the backward's input gradient
followed by the ReLU mask: a GEMM, then an elementwise pass over its output. Here the GEMM waits: the backend
*holds* an f32 GEMM on the runtime (:func:`record`, ``Runtime.hold``) instead of recording it, and the
next call into the runtime records it first, unchanged. If that next call is the backend's elementwise op of
``gemm.EPILOGUES`` over exactly the GEMM's output (:func:`fuse`), the GEMM is recorded once instead, as the variant
whose epilogue also stores the op's result. Eager steps and captured graphs both get it, with no pattern
matching on the model.

The GEMM still stores its own output: nothing here can know whether a later op reads it (the pre-activation of a
ReLU is dead once the ReLU ran, whose backward uses its output, but a user may keep it). The fused op reads the
value in registers, so it costs one more store per element instead of a dispatch that loads and stores it.

Same bits as the two dispatches (relu and its mask are selects), checked for every variant in tests/test_gemm.py.
``VKBLAS_EPILOGUE_FUSION=0`` turns it off (to measure what it gains).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...dtypes import float32
from ..base import View, contiguous_strides
from . import gemm
from .memory import VulkanStorage

ENABLED = os.environ.get("VKBLAS_EPILOGUE_FUSION", "1") != "0"


@dataclass(slots=True)
class HeldGemm:
    """A GEMM waiting on the runtime: its plan and bound views (out, a, b[, bias])."""

    backend: Any
    gp: gemm.GemmPlan
    views: tuple[View, ...]

    def emit(self) -> None:
        gemm.record(self.backend, self.gp, *self.views)


def record(backend: Any, gp: gemm.GemmPlan, out: View, a: View, b: View, bias: View | None = None) -> None:
    """``gemm.record``, except that an f32 GEMM is held for the next op to join its epilogue (with split-K: the
    sum of its partials). A GEMM over a large tensor's views is recorded now: binding one raises NeedsSplitting,
    which its caller must see before anything is recorded (large.py then cuts the operands into pieces)."""
    views = (out, a, b) if bias is None else (out, a, b, bias)
    if ENABLED and out.numel and gp.spec.dtype is float32 and not gp.act and all(_bindable(v) for v in views):
        backend.rt.hold(HeldGemm(backend, gp, views))
    else:
        gemm.record(backend, gp, out, a, b, bias)


def _bindable(v: View) -> bool:
    return v.storage.__class__ is VulkanStorage  # not a LargeStorage (a subclass)


def _dense(v: View) -> bool:
    return _bindable(v) and v.strides == contiguous_strides(v.shape)


def fuse(backend: Any, held: HeldGemm, op: str, out: View, args: list[Any]) -> bool:
    """Record ``held`` with ``op`` (``out = op(*args)``) in its epilogue, if ``args[0]`` is exactly the GEMM's
    output and every other view is laid out like it; False (nothing recorded) otherwise."""
    gout = held.views[0]
    n = gout.numel
    views = [out, *args]
    if (
        held.gp.spec.bias == "sum_rows"  # a weight gradient's GEMM: its epilogue writes the bias gradient instead
        or len(args) != gemm.EPILOGUES[op]
        or not all(isinstance(v, View) and v.dtype is float32 and v.numel == n and _dense(v) for v in views)
        or not _dense(gout)
        or args[0].storage is not gout.storage
        or args[0].offset != gout.offset
        # the op's result is written while other workgroups still read the GEMM's operands (a buffer of theirs
        # that was given back meanwhile, e.g. conv.py's weight rows, may have come back as this result's)
        or any(out.storage.buffer is v.storage.buffer for v in held.views[1:])
        or (held.gp.splits == 1 and held.gp.spec.out_vec and any(v.offset % 4 for v in views))
    ):
        return False
    gp = held.gp
    key = ("epilogue", op, id(gp))
    entry = backend.plans.get(key)
    if entry is None or entry[0] is not gp:
        spec = gp.spec
        gathers = (spec.a_gather, spec.b_gather)
        # a stream-K kernel has no epilogue op (a tile shared by two workgroups is only whole after its fix-up
        # pass): its tile runs one workgroup per output tile instead, as the tuner plans it for a bias
        variant = gemm.unstreamed(gp.variant)
        fused = gemm.build_plan(backend, *held.views[:3], variant, gp.splits, gathers, spec.bias, act=op)
        entry = backend.plans[key] = (gp, fused)  # gp kept alive with it: its id stays its own
    backend.rt.take_held()  # recorded here in its place, with the op
    gemm.record(backend, entry[1], *held.views, act=(out, *args[1:]))
    return True
