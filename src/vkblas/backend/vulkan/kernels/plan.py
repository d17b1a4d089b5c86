"""A launch plan: what one kernel call needs beyond the per-call element offsets and scalar operands.

Plans are cached by the (op, dtypes, shapes, strides) of a call, so a repeated op costs one dict lookup, a bounds
check per view, one ``Struct.pack_into`` and three C calls. The params window of every kernel is laid out as
``[offset of each bound view..., dynamic scalars..., static words...]``; the static words are packed once per plan
(``Plan.static_bytes``) and written by the same ``pack_into`` as one ``Ns`` field.
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
    #: packs (offsets..., scalars..., static_bytes) -- the dynamic part of ``fmt`` plus the pre-packed static words
    packer: struct.Struct = field(init=False)
    static_bytes: bytes = field(init=False)
    #: the native pipeline handle (saves two attribute lookups per dispatch)
    pipeline: Any = field(init=False)

    def __post_init__(self) -> None:
        codes = _codes(self.fmt)
        ndyn = len(codes) - len(self.static)
        self.static_bytes = struct.pack("<" + "".join(codes[ndyn:]), *self.static)
        self.packer = struct.Struct("<" + "".join(codes[:ndyn]) + f"{len(self.static_bytes)}s")
        if self.packer.size > PARAM_WORDS * 4:
            raise ValueError(f"params {self.fmt!r} exceed the {PARAM_WORDS * 4}-byte params window")
        self.pipeline = self.kernel.handle


def _codes(fmt: str) -> list[str]:
    """``"<iiI2f"`` -> ``["i", "i", "I", "f", "f"]`` (little-endian, no padding: formats start with ``<``)."""
    if not fmt.startswith("<"):
        raise ValueError(f"params format {fmt!r} must start with '<'")
    codes: list[str] = []
    count = ""
    for c in fmt[1:]:
        if c.isdigit():
            count += c
        else:
            codes += [c] * int(count or 1)
            count = ""
    return codes


def out_of_bounds(views: Sequence[Any], spans: Sequence[tuple[int, int]]) -> int:
    """Index of the first view reaching outside its storage (unchecked kernels must never do that), else -1."""
    for i, (v, (lo, hi)) in enumerate(zip(views, spans, strict=True)):
        if hi >= 0 and (v.offset + lo < 0 or v.offset + hi >= v.storage.numel):
            return i
    return -1
