"""Reductions (sum / prod / max / min / argmax / argmin) over any set of axes of a strided view.

The input's dims split into *kept* dims (walked by output index, coalesced together with the output's strides) and
*reduced* dims (walked by reduction index, coalesced on their own). One kernel shape, parametrised by ``tpr``
(threads per row, a power of two up to the 256-wide workgroup): ``tpr`` consecutive invocations reduce one output
("row") with a strided loop then a shared-memory tree; a workgroup holds ``256 / tpr`` rows.

* reduced dims contiguous (softmax / cross-entropy rows, sum over the last dim): ``tpr`` ~ half the row length, so
  the lanes of a row read consecutive elements (coalesced) and rows of 10..1000 elements use the whole workgroup;
* reduced dims strided (sum over dim 0 of (N, C)): ``tpr = 1``, and neighbouring invocations own neighbouring
  outputs, so their reads are coalesced along the kept dim;
* a small input (``SMALL`` elements at most: a loss's sum, a small layer's bias gradient): ``tpr`` as if contiguous,
  whatever the layout, so that it needs no second pass (a dispatch costs more than its uncoalesced reads); a
  medium strided one (``MEDIUM``: a wider layer's bias gradient) takes just enough lanes per output for one pass.

**Split** (two passes) when there are too few rows to fill the device or a row is too long for one invocation
(more than ``MAX_ITERS`` loop trips; llvmpipe also gives up on loops past 65535 trips): each (output, split) pair
is a row of pass 1 writing a partial result into a workspace (value, plus its global index for max/min/arg*);
pass 2 reduces the ``S`` partials of each output. Splits take contiguous chunks when ``tpr > 1`` (lanes stay
coalesced) and interleave (``r = split + j * S``) when ``tpr = 1``, so that the ``S`` invocations of an output
read neighbouring rows of a tall (N, C) input -- the bias-gradient shape.

Sums and products of floats accumulate in f32 (f16 included), of ints / bools in i32 (wrapping like numpy's int32
store).
max/min/arg* carry (value, index) pairs with index -1 for "no element yet", so no -inf sentinel is needed;
ties go to the lower index (numpy's first occurrence) and NaN wins, as in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....dtypes import DType, bool_, float16, float32, int32
from ...base import contiguous_strides
from ..device import Device
from .plan import Plan, span
from .wgsl import (
    COMPUTE_TYPE,
    PARAM_WORDS,
    STORAGE_TYPE,
    WORKGROUP,
    coalesce,
    grid,
    header,
    store_value,
    strided_offsets,
)

#: most loop trips of one invocation in one pass
MAX_ITERS = 4096
#: rows with at most this many trips per invocation are never split for parallelism ...
SPLIT_MIN_ITERS = 64
#: ... and a split keeps at least this many per invocation
SPLIT_ITERS = 32
#: invocations that keep a large GPU busy; fewer than this (with long rows) splits
TARGET_THREADS = 1 << 16
_WS_DTYPE = {"f32": float32, "f16": float16, "i32": int32}

_BETTER = """
fn better(v: {A}, i: i32, bv: {A}, bi: i32) -> bool {{
    if (i < 0) {{ return false; }}
    if (bi < 0) {{ return true; }}
    let vnan = !(v == v);  // not v != v: naga's != is ordered, false for NaN
    let bnan = !(bv == bv);
    if (v {cmp} bv || (vnan && !bnan)) {{ return true; }}
    return (v == bv || (vnan && bnan)) && i < bi;
}}
"""


def acc_type(op: str, x: DType) -> str:
    ct = COMPUTE_TYPE[x]
    if op in ("sum", "prod"):
        return "f32" if x.is_floating else "i32"
    return "i32" if ct == "bool" else ct


@dataclass(slots=True)
class SplitPlan:
    """Two passes: ``partial`` over (workspace values, x[, workspace indices]), ``final`` over (out, workspace
    values[, workspace indices]); the workspaces hold ``ws_numel`` elements of ``ws_dtypes``."""

    partial: Plan
    final: Plan
    ws_numel: int
    ws_dtypes: tuple[DType, ...]


def _source(op: str, x: DType, out: DType, rk: int, rr: int, tpr: int, stage: str) -> str:
    """``stage``: ``single`` (x -> out), ``partial`` (x -> workspace), ``final`` (workspace -> out; the indices of
    pair ops come from binding 2 instead of the position)."""
    A = acc_type(op, x)
    pair = op not in ("sum", "prod")
    nb = 3 if pair and stage != "single" else 2
    # params: offsets (nb words), rows, n_out, n_red, S, A, B, Jmax, kept shape, kept out strides, kept x strides,
    # reduced shape, reduced x strides
    w = nb
    w_ks = w + 7
    w_rs = w_ks + 3 * rk
    ws_ty = STORAGE_TYPE[_WS_DTYPE[A]]
    bufs = [("b0", ws_ty if stage == "partial" else STORAGE_TYPE[out]), ("b1", STORAGE_TYPE[x])]
    if nb == 3:
        bufs.append(("b2", "i32"))
    f16 = "f16" in (A, STORAGE_TYPE[x], STORAGE_TYPE[out])
    src = header(bufs, f16)
    src += "fn red_off(r: u32) -> i32 {\n" + strided_offsets("r", rr, w_rs, ["xr"], ["0"], [w_rs + rr])
    src += "    return xr;\n}\n"
    load = f"{A}(b1[u32(xo + ro)] != 0u)" if x is bool_ else f"{A}(b1[u32(xo + ro)])"
    index = "b2[u32(pi(2u) + xk + ro)]" if stage == "final" and pair else "i32(r)"
    if pair:
        src += _BETTER.format(A=A, cmp=">" if op in ("max", "argmax") else "<")
        init = f"    var bv: {A} = {A}(0);\n    var bi: i32 = -1;\n"
        step = f"        let v = {load};\n        let i = {index};\n"
        step += "        if (better(v, i, bv, bi)) { bv = v; bi = i; }\n"
    elif op == "prod":
        init = f"    var bv: {A} = {A}(1);\n"
        step = f"        bv *= {load};\n"
    else:
        init = f"    var bv: {A} = {A}(0);\n"
        step = f"        bv += {load};\n"
    if tpr > 1:
        src += f"var<workgroup> sv: array<{A}, {WORKGROUP}>;\n" + (
            f"var<workgroup> si: array<i32, {WORKGROUP}>;\n" if pair else ""
        )
    src += f"@compute @workgroup_size({WORKGROUP})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    src += "        @builtin(local_invocation_index) lid: u32) {\n"
    src += f"    let row = (wid.y * nwg.x + wid.x) * {WORKGROUP // tpr}u + lid / {tpr}u;\n"
    src += f"    let lane = lid % {tpr}u;\n"
    # inactive rows (past the end) still take part in the barriers of the tree: no early return
    src += f"    let live = row < pu({w}u);\n    let o = row % pu({w + 1}u);\n    let sp = row / pu({w + 1}u);\n"
    src += strided_offsets("o", rk, w_ks, ["ok", "xk"], ["0", "0"], [w_ks + rk, w_ks + 2 * rk])
    src += "    let xo = pi(1u) + xk;\n" + init
    src += f"    let r0 = sp * pu({w + 4}u);\n    let step = pu({w + 5}u);\n    var J = 0u;\n"
    src += f"    if (live && r0 < pu({w + 2}u)) {{ J = min(pu({w + 6}u), (pu({w + 2}u) - r0 + step - 1u) / step); }}\n"
    src += (
        f"    for (var j = lane; j < J; j += {tpr}u) {{\n        let r = r0 + j * step;\n        let ro = red_off(r);\n"
    )
    src += step + "    }\n"
    if tpr > 1:
        src += "    sv[lid] = bv;\n" + ("    si[lid] = bi;\n" if pair else "") + "    workgroupBarrier();\n"
        src += f"    for (var s = {tpr // 2}u; s > 0u; s >>= 1u) {{\n        if (lane < s) {{\n"
        if pair:
            src += "            if (better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {\n"
            src += "                sv[lid] = sv[lid + s]; si[lid] = si[lid + s];\n            }\n"
        elif op == "prod":
            src += "            sv[lid] *= sv[lid + s];\n"
        else:
            src += "            sv[lid] += sv[lid + s];\n"
        src += "        }\n        workgroupBarrier();\n    }\n"
        src += "    bv = sv[lid];\n" + ("    bi = si[lid];\n" if pair else "")
    src += "    if (!live || lane != 0u) { return; }\n"
    if stage == "partial":
        src += f"    let p = pu(0u) + o * pu({w + 3}u) + sp;\n    b0[p] = bv;\n"
        if pair:
            src += f"    b2[pu(2u) + o * pu({w + 3}u) + sp] = bi;\n"
        return src + "}\n"
    result = ("bi", "i32") if op in ("argmax", "argmin") else ("bv", A)
    return src + f"    b0[u32(pi(0u) + ok)] = {store_value(result[0], result[1], out)};\n}}\n"


#: inputs of at most this many elements are reduced in one pass whatever their layout: a few workgroups' worth,
#: where a second dispatch costs more than uncoalesced reads (a loss's (N, 2) sum over N, a small bias gradient)
SMALL = WORKGROUP * SPLIT_MIN_ITERS


#: strided inputs of at most this many elements take as many lanes per output as keep one pass short enough
#: not to split (a 256- or 512-wide layer's bias gradient at batch 512): the lanes of an output read different
#: rows, but a second pass would cost a dispatch
MEDIUM = 1 << 18


def _tpr(n_red: int, contiguous: bool, n_out: int = 0) -> int:
    """Threads per row: ~half the row when the reduced elements are contiguous or the input is small; for a
    medium strided input, enough that no invocation loops more than SPLIT_MIN_ITERS times; else 1 (see the
    docstring)."""
    t = 1
    size = n_out * n_red
    while (contiguous or size <= SMALL) and t < WORKGROUP and 2 * t < n_red:
        t *= 2
    while size <= MEDIUM and t < WORKGROUP and -(-n_red // t) > SPLIT_MIN_ITERS:
        t *= 2
    return t


def _splits(n_out: int, n_red: int, tpr: int) -> int:
    iters = -(-n_red // tpr)
    splits = 1
    if iters > SPLIT_MIN_ITERS and 0 < n_out * tpr < TARGET_THREADS:
        splits = min(-(-TARGET_THREADS // (n_out * tpr)), -(-iters // SPLIT_ITERS))
    return max(splits, -(-iters // MAX_ITERS))


@dataclass(frozen=True, slots=True)
class _Layout:
    """Shape, strides and dtype of a view that does not exist yet (the workspace)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType


def _plan(dev: Device, op: str, out: Any, x: Any, axes: tuple[int, ...], stage: str, splits: int | None) -> Plan:
    """The plan of one pass; ``splits=None`` (``single`` only) returns ``None`` when the reduction must split."""
    kept = [d for d in range(len(x.shape)) if d not in axes]
    kshape, (kso, ksx) = coalesce([x.shape[d] for d in kept], [list(out.strides), [x.strides[d] for d in kept]])
    rshape, (rsx,) = coalesce([x.shape[d] for d in axes], [[x.strides[d] for d in axes]])
    rk, rr = len(kshape), len(rshape)
    nb = 3 if op not in ("sum", "prod") and stage != "single" else 2
    if nb + 7 + 3 * rk + 2 * rr > PARAM_WORDS:
        raise ValueError(f"rank {len(x.shape)} is too high for the params window")
    n_out = n_red = 1
    for n in kshape:
        n_out *= n
    for n in rshape:
        n_red *= n
    tpr = _tpr(n_red, bool(rr) and rsx[-1] == 1, n_out)
    if splits is None:
        splits = _splits(n_out, n_red, tpr)
        if splits > 1:
            return splits  # type: ignore[return-value]  # the caller builds the two passes
    if splits == 1:
        a, b, jmax = 0, 1, n_red
    elif tpr > 1:  # contiguous chunks, a multiple of tpr long
        per = -(-n_red // splits)
        jmax = -(-per // tpr) * tpr
        splits = -(-n_red // jmax)  # no empty chunk
        a, b = jmax, 1
    else:  # interleaved
        a, b, jmax = 1, splits, -(-n_red // splits)
    if -(-jmax // tpr) > MAX_ITERS:
        raise ValueError(f"a row of {jmax} elements is too long for one pass")
    kernel = dev.kernel(_source(op, x.dtype, out.dtype, rk, rr, tpr, stage), nb)
    rows = n_out * splits
    fmt = "<" + "i" * nb + "I" * 7 + "I" * rk + "i" * (2 * rk) + "I" * rr + "i" * rr
    static = (rows, n_out, n_red, splits, a, b, jmax, *kshape, *kso, *ksx, *rshape, *rsx)
    groups = grid(-(-rows // (WORKGROUP // tpr)))
    spans = [span(out.shape, out.strides), span(x.shape, x.strides)]
    if stage == "partial":  # out is the workspace: rows contiguous elements
        spans[0] = (0, rows - 1)
    if nb == 3:
        spans.append(spans[0] if stage == "partial" else spans[1])
    return Plan(kernel, fmt, static, groups, tuple(spans))


def build(dev: Device, op: str, out: Any, x: Any, axes: tuple[int, ...]) -> Plan | SplitPlan:
    plan = _plan(dev, op, out, x, axes, "single", None)
    if isinstance(plan, Plan):
        return plan
    splits = plan
    A = acc_type(op, x.dtype)
    ws_dtypes = (_WS_DTYPE[A], int32) if op not in ("sum", "prod") else (_WS_DTYPE[A],)
    # pass 1 writes ws[o * S + s] (o in C order of the output); pass 2 views the workspace as (*out.shape, S)
    partial = _plan(dev, op, out, x, axes, "partial", splits)
    n_split = partial.static[3]  # chunking may round the split count down
    wshape = (*out.shape, n_split)
    ws = _Layout(wshape, contiguous_strides(wshape), ws_dtypes[0])
    final = _plan(dev, op, out, ws, (len(out.shape),), "final", 1)
    return SplitPlan(partial, final, max(out.numel * n_split, 1), ws_dtypes)
