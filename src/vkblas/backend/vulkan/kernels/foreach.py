"""The ``foreach`` primitive in one dispatch per chunk of tensors (PyTorch's multi-tensor apply).

A chunk is up to ``k`` tensors, each ``T`` contiguous float32 views of one numel (its slots: parameter, gradient,
optimizer states); every distinct buffer of the chunk is bound once (a state arena, or a view bound twice, costs one
binding), device scalars (0-d views) too. Params window: ``ends[k]`` (cumulative element counts), then the element
offset of each (tensor, slot), then the scalars (a Python number's value, a device scalar's element offset).

Each invocation owns one element of one tensor: it finds its tensor by comparing with ``ends`` (an unrolled chain,
uniform within most workgroups), loads the slots, runs the program's steps in registers (each step the op's formula
as a WGSL function, the same text the elementwise kernel would run), and stores the written slots. A tensor's
bindings cannot be indexed dynamically in WGSL, so the chain has one branch per tensor of the chunk.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ... import elementwise as ew
from ..device import Device, Kernel
from .wgsl import MAIN_1D, Emitter, Expr, WgslMath, header

#: a chunk's bindings (1-based): of each (tensor, slot), and of each scalar (-1: a Python number in a params word)
Layout = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]


def words(k: int, nslots: int, nscalars: int) -> int:
    """Params words a chunk of ``k`` tensors with ``nslots`` views each takes."""
    return k * (1 + nslots) + nscalars


def source(program: Sequence[tuple[int, str, tuple[int, ...]]], layout: Layout, nbind: int) -> str:
    slots, scal_bind = layout
    k, nslot = len(slots), len(slots[0])
    nreg = max([nslot - 1, *(dst for dst, _, _ in program)]) + 1
    w_off, w_scal = k, k + k * nslot
    fns = []
    helpers: dict[str, str] = {}
    for s, (_, op, args) in enumerate(program):
        em = Emitter("f32")
        vals = []
        for a in args:
            if a >= 0:
                vals.append(Expr(f"x{a}", "f32", em))
            else:
                j = -1 - a
                word = f"pu({w_scal + j}u)"
                code = f"pf({w_scal + j}u)" if scal_bind[j] < 0 else f"b{scal_bind[j]}[{word}]"
                vals.append(Expr(code, "f32", em))
        result = ew.OPS[op].fn(WgslMath(em), *vals)
        code, ty = em.value(result)
        helpers.update(em.helpers)
        body = "\n".join(em.lines)
        reads = sorted({a for a in args if a >= 0})
        sig = ", ".join(f"x{a}: f32" for a in reads)
        fns.append((s, reads, f"fn vk_s{s}({sig}) -> f32 {{\n{body}\n    return f32({code});\n}}\n"))
    written = sorted({dst for dst, _, _ in program if dst < nslot})
    lines = [f"    if (gid >= pu({k - 1}u)) {{ return; }}"]
    for j in range(k):
        start = "0u" if j == 0 else f"pu({j - 1}u)"
        lines.append(f"    if (gid < pu({j}u)) {{")
        lines.append(f"        let e = gid - {start};")
        for t in range(nslot):
            lines.append(f"        let i{t} = pu({w_off + j * nslot + t}u) + e;")
            lines.append(f"        var x{t}: f32 = b{slots[j][t]}[i{t}];")
        for r in range(nslot, nreg):
            lines.append(f"        var x{r}: f32 = 0.0;")
        for (dst, _, _), (s, reads, _) in zip(program, fns, strict=True):
            lines.append(f"        x{dst} = vk_s{s}({', '.join(f'x{a}' for a in reads)});")
        for t in written:
            lines.append(f"        b{slots[j][t]}[i{t}] = x{t};")
        lines.append("        return;\n    }")
    return (
        header([(f"b{i}", "f32") for i in range(1, nbind + 1)], False)
        + "".join(helpers.values())
        + "".join(f for _, _, f in fns)
        + MAIN_1D
        + "\n".join(lines)
        + "\n}\n"
    )


def kernel(dev: Device, program: Any, layout: Layout, nbind: int) -> tuple[Kernel, struct.Struct]:
    slots, scal_bind = layout
    k, nslot = len(slots), len(slots[0])
    fmt = "<" + "I" * k + "I" * (k * nslot) + "".join("f" if b < 0 else "I" for b in scal_bind)
    return dev.kernel(source(program, layout, nbind), nbind), struct.Struct(fmt)
