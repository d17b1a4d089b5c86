"""Inclusive prefix sums and products (``cumsum`` / ``cumprod``) along one axis of a strided view.

Like the reductions, ``tpr`` consecutive invocations (a power of two up to the 256-wide workgroup) own one row and a
workgroup holds ``256 / tpr`` rows, so short rows do not leave most of a workgroup idle. A row is walked in chunks of
``tpr * ITEMS`` elements: each invocation scans its ``ITEMS`` consecutive elements in registers, the invocations of a
row scan their totals in shared memory (Hillis-Steele, ``log2(tpr)`` steps), and a carry takes each chunk's total
to the next. The chunk count is the same for every row, so the barriers stay in uniform control flow.

Floats accumulate in f32 (f16 included), ints and bools in i32 (wrapping, like numpy's int32 store).
"""

from __future__ import annotations

from typing import Any

from ....dtypes import DType, bool_
from ..device import Device
from .plan import Plan, span
from .wgsl import COMPUTE_TYPE, PARAM_WORDS, STORAGE_TYPE, WORKGROUP, coalesce, grid, header, store_value

#: elements each invocation scans sequentially per chunk
ITEMS = 4
_IDENTITY = {"sum": "0", "prod": "1"}
_OP = {"sum": "+", "prod": "*"}


def acc_type(x: DType) -> str:
    return "f32" if x.is_floating else "i32"


def _source(op: str, x: DType, out: DType, rk: int, tpr: int) -> str:
    # params: 0 offset of out, 1 offset of x, 2 rows, 3 n, 4 out stride along the axis, 5 x stride along the axis,
    # 6.. kept shape, kept out strides, kept x strides
    A, o, ident = acc_type(x), _OP[op], f"{acc_type(x)}({_IDENTITY[op]})"
    load = f"{A}(b1[u32(xo + i * sx)] != 0u)" if x is bool_ else f"{A}(b1[u32(xo + i * sx)])"
    src = header([("b0", STORAGE_TYPE[out]), ("b1", STORAGE_TYPE[x])], "f16" in (COMPUTE_TYPE[x], COMPUTE_TYPE[out]))
    src += f"var<workgroup> sh: array<{A}, {WORKGROUP}>;\n"
    src += f"@compute @workgroup_size({WORKGROUP})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    src += "        @builtin(local_invocation_index) lid: u32) {\n"
    src += f"    let row = (wid.y * nwg.x + wid.x) * {WORKGROUP // tpr}u + lid / {tpr}u;\n"
    src += f"    let lane = lid % {tpr}u;\n    let live = row < pu(2u);\n    let n = pu(3u);\n"
    src += "    let so = pi(4u);\n    let sx = pi(5u);\n"
    # the row's base offsets from its kept coordinates (C order), row 0 for the idle invocations past the end
    src += "    var rem = select(0u, row, live);\n    var oo = pi(0u);\n    var xo = pi(1u);\n"
    for d in reversed(range(rk)):
        src += f"    let c{d} = i32(rem % pu({6 + d}u)); rem = rem / pu({6 + d}u);\n"
        src += f"    oo += c{d} * pi({6 + rk + d}u);\n    xo += c{d} * pi({6 + 2 * rk + d}u);\n"
    src += f"    var carry = {ident};\n    let chunks = (n + {tpr * ITEMS - 1}u) / {tpr * ITEMS}u;\n"
    src += "    for (var c = 0u; c < chunks; c++) {\n"
    src += f"        let base = i32(c * {tpr * ITEMS}u + lane * {ITEMS}u);\n"
    src += f"        var vals: array<{A}, {ITEMS}>;\n        var run = {ident};\n"
    src += f"        for (var e = 0; e < {ITEMS}; e++) {{\n            let i = base + e;\n"
    src += f"            if (live && u32(i) < n) {{ run = run {o} {load}; }}\n            vals[e] = run;\n        }}\n"
    src += "        sh[lid] = run;\n        workgroupBarrier();\n"
    src += f"        for (var s = 1u; s < {tpr}u; s <<= 1u) {{\n"
    src += f"            var t = {ident};\n            if (lane >= s) {{ t = sh[lid - s]; }}\n"
    src += f"            workgroupBarrier();\n            sh[lid] = sh[lid] {o} t;\n            workgroupBarrier();\n"
    src += "        }\n"
    src += f"        var before = carry;\n        if (lane > 0u) {{ before = carry {o} sh[lid - 1u]; }}\n"
    src += f"        for (var e = 0; e < {ITEMS}; e++) {{\n            let i = base + e;\n"
    src += "            if (live && u32(i) < n) {\n"
    src += f"                b0[u32(oo + i * so)] = {store_value(f'before {o} vals[e]', A, out)};\n"
    src += "            }\n        }\n"
    src += f"        carry = carry {o} sh[lid - lane + {tpr - 1}u];\n        workgroupBarrier();\n    }}\n}}\n"
    return src


def _tpr(n: int) -> int:
    """Invocations per row: enough that each scans about ``ITEMS`` elements per chunk, at most a workgroup."""
    t = 1
    while t < WORKGROUP and t * ITEMS < n:
        t *= 2
    return t


def build(dev: Device, op: str, out: Any, x: Any, axis: int) -> Plan:
    if op not in _OP:
        raise ValueError(f"unknown scan {op!r}; expected one of {tuple(_OP)}")
    if out.shape != x.shape:
        raise ValueError(f"out shape {out.shape} differs from the input's {x.shape}")
    kept = [d for d in range(len(x.shape)) if d != axis]
    kshape, (kso, ksx) = coalesce(
        [x.shape[d] for d in kept], [[out.strides[d] for d in kept], [x.strides[d] for d in kept]]
    )
    rk = len(kshape)
    if 6 + 3 * rk > PARAM_WORDS:
        raise ValueError(f"rank {len(x.shape)} is too high for the params window")
    n = x.shape[axis]
    rows = x.numel // n
    tpr = _tpr(n)
    kernel = dev.kernel(_source(op, x.dtype, out.dtype, rk, tpr), 2)
    fmt = "<ii" + "II" + "ii" + "I" * rk + "i" * (2 * rk)
    static = (rows, n, out.strides[axis], x.strides[axis], *kshape, *kso, *ksx)
    spans = (span(out.shape, out.strides), span(x.shape, x.strides))
    return Plan(kernel, fmt, static, grid(-(-rows // (WORKGROUP // tpr))), spans)
