"""A launch plan: what one kernel call needs beyond the per-call element offsets and scalar operands.

Plans are cached by the (op, dtypes, shapes, strides) of a call, so a repeated op costs one dict lookup, a bounds
check per view, one ``Struct.pack_into`` and three C calls. The params window of every kernel is laid out as
``[offset of each bound view..., dynamic scalars..., static words...]``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..device import Kernel
from .wgsl import PARAM_WORDS


def span(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """(lowest, highest) element reached relative to a view's offset; (0, -1) when the view is empty."""
    lo = hi = 0
    for n, s in zip(shape, strides, strict=True):
        if n == 0:
            return 0, -1
        if s > 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi


@dataclass(slots=True)
class Plan:
    kernel: Kernel
    fmt: str
    static: tuple[Any, ...]
    groups: tuple[int, int, int]
    #: per bound view: (lo, hi) of span(); the backend checks offset+lo >= 0 and offset+hi < storage.numel
    spans: tuple[tuple[int, int], ...]
    #: elementwise only: the vec4 variant (same params and spans), usable when every bound offset is a multiple of 4
    vec: Plan | None = None
    #: precompiled ``fmt`` (``struct.pack_into(fmt, ...)`` looks the format up in a cache on every call)
    packer: struct.Struct = field(init=False)
    #: the native pipeline handle (saves two attribute lookups per dispatch)
    pipeline: Any = field(init=False)

    def __post_init__(self) -> None:
        self.packer = struct.Struct(self.fmt)
        if self.packer.size > PARAM_WORDS * 4:
            raise ValueError(f"params {self.fmt!r} exceed the {PARAM_WORDS * 4}-byte params window")
        self.pipeline = self.kernel.handle


def out_of_bounds(views: Sequence[Any], spans: Sequence[tuple[int, int]]) -> int:
    """Index of the first view reaching outside its storage (unchecked kernels must never do that), else -1."""
    for i, (v, (lo, hi)) in enumerate(zip(views, spans, strict=True)):
        if hi >= 0 and (v.offset + lo < 0 or v.offset + hi >= v.storage.numel):
            return i
    return -1
