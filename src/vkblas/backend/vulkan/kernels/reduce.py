"""Reductions (sum / max / min / argmax / argmin) over any set of axes of a strided view.

The input's dims split into *kept* dims (walked by output index, coalesced together with the output's strides) and
*reduced* dims (walked by reduction index, coalesced on their own). Two shapes of kernel:

* ``thread``: one invocation per output element loops over the reduced elements -- short reductions, many outputs;
* ``group``: one 256-wide workgroup per output element, strided loop then a shared-memory tree -- long reductions
  (coalesced reads along a contiguous reduced axis, and parallelism when there are few outputs).

Sums of floats accumulate in f32 (f16 included), of ints / bools in i32 (wrapping like numpy's int32 store).
max/min/arg* carry (value, index) pairs with index -1 for "no element yet", so no -inf sentinel is needed;
ties go to the lower index (numpy's first occurrence) and NaN wins, as in numpy.
"""

from __future__ import annotations

from typing import Any

from ....dtypes import DType, bool_
from ..device import Device
from .plan import Plan, span
from .wgsl import (
    COMPUTE_TYPE,
    MAIN_1D,
    PARAM_WORDS,
    STORAGE_TYPE,
    WORKGROUP,
    coalesce,
    grid,
    header,
    store_value,
    strided_offsets,
)

_BETTER = """
fn better(v: {A}, i: i32, bv: {A}, bi: i32) -> bool {{
    if (i < 0) {{ return false; }}
    if (bi < 0) {{ return true; }}
    if (v {cmp} bv || (v != v && bv == bv)) {{ return true; }}
    return (v == bv || (v != v && bv != bv)) && i < bi;
}}
"""


def acc_type(op: str, x: DType) -> str:
    ct = COMPUTE_TYPE[x]
    if op == "sum":
        return "f32" if x.is_floating else "i32"
    return "i32" if ct == "bool" else ct


def _source(op: str, x: DType, out: DType, rk: int, rr: int, mode: str) -> str:
    A = acc_type(op, x)
    # params: 0 out offset, 1 x offset, 2 n_out, 3 n_red, kept shape, kept out strides, kept x strides,
    # reduced shape, reduced x strides
    w_ks = 4
    w_rs = w_ks + 3 * rk
    pair = op != "sum"
    cmp = ">" if op in ("max", "argmax") else "<"
    load = f"{A}(b1[u32(xo + red_off({{r}}))])"
    if x is bool_:
        load = f"{A}(b1[u32(xo + red_off({{r}}))] != 0u)"
    src = header([("b0", STORAGE_TYPE[out]), ("b1", STORAGE_TYPE[x])], "f16" in (A, COMPUTE_TYPE[x], COMPUTE_TYPE[out]))
    src += "fn red_off(r: u32) -> i32 {\n" + strided_offsets("r", rr, w_rs, ["xr"], ["0"], [w_rs + rr])
    src += "    return xr;\n}\n"
    if pair:
        src += _BETTER.format(A=A, cmp=cmp)
        src += (
            f"var<workgroup> sv: array<{A}, {WORKGROUP}>;\nvar<workgroup> si: array<i32, {WORKGROUP}>;\n"
            if (mode == "group")
            else ""
        )
        init = f"    var bv: {A} = {A}(0);\n    var bi: i32 = -1;\n"
        step = f"        let v = {load.format(r='r')};\n"
        step += "        if (better(v, i32(r), bv, bi)) { bv = v; bi = i32(r); }\n"
    else:
        src += f"var<workgroup> sv: array<{A}, {WORKGROUP}>;\n" if mode == "group" else ""
        init = f"    var bv: {A} = {A}(0);\n"
        step = f"        bv += {load.format(r='r')};\n"
    result = ("bi", "i32") if op in ("argmax", "argmin") else ("bv", A)
    store = f"b0[u32(oo)] = {store_value(result[0], result[1], out)};"
    src += MAIN_1D
    kept = strided_offsets("o", rk, w_ks, ["oo", "xo"], ["pi(0u)", "pi(1u)"], [w_ks + rk, w_ks + 2 * rk])
    if mode == "thread":
        src += "    let o = gid;\n    if (o >= pu(2u)) { return; }\n" + kept + init
        src += "    for (var r = 0u; r < pu(3u); r++) {\n" + step + "    }\n"
        return src + f"    {store}\n}}\n"
    src += "    let o = wid.y * nwg.x + wid.x;\n    if (o >= pu(2u)) { return; }\n" + kept + init
    src += f"    for (var r = lid; r < pu(3u); r += {WORKGROUP}u) {{\n" + step + "    }\n"
    src += "    sv[lid] = bv;\n" + ("    si[lid] = bi;\n" if pair else "") + "    workgroupBarrier();\n"
    src += f"    for (var s = {WORKGROUP // 2}u; s > 0u; s >>= 1u) {{\n        if (lid < s) {{\n"
    if pair:
        src += "            if (better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {\n"
        src += "                sv[lid] = sv[lid + s]; si[lid] = si[lid + s];\n            }\n"
    else:
        src += "            sv[lid] += sv[lid + s];\n"
    src += "        }\n        workgroupBarrier();\n    }\n"
    src += "    if (lid == 0u) {\n        let bv = sv[0];\n" + ("        let bi = si[0];\n" if pair else "")
    return src + f"        {store}\n    }}\n}}\n"


def build(dev: Device, op: str, out: Any, x: Any, axes: tuple[int, ...]) -> Plan:
    kept = [d for d in range(len(x.shape)) if d not in axes]
    kshape, (kso, ksx) = coalesce([x.shape[d] for d in kept], [list(out.strides), [x.strides[d] for d in kept]])
    rshape, (rsx,) = coalesce([x.shape[d] for d in axes], [[x.strides[d] for d in axes]])
    rk, rr = len(kshape), len(rshape)
    if 4 + 3 * rk + 2 * rr > PARAM_WORDS:
        raise ValueError(f"rank {len(x.shape)} is too high for the params window")
    n_out = out.numel
    n_red = 1
    for d in axes:
        n_red *= x.shape[d]
    mode = "group" if n_red >= 1024 or (n_red >= 64 and n_out <= 4096) else "thread"
    kernel = dev.kernel(_source(op, x.dtype, out.dtype, rk, rr, mode), 2)
    fmt = "<ii" + "I" * (2 + rk) + "i" * (2 * rk) + "I" * rr + "i" * rr
    static = (n_out, n_red, *kshape, *kso, *ksx, *rshape, *rsx)
    groups = grid(n_out if mode == "group" else -(-n_out // WORKGROUP))
    return Plan(kernel, fmt, static, groups, (span(out.shape, out.strides), span(x.shape, x.strides)))
