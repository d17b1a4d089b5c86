"""Sorting along the last dim: a bitonic network over (key, index) pairs, stable through the index tie-break.

Each row is padded to ``N``, a power of two; pad slots carry index -1 and sort after everything. The comparison
``before(a, b)`` orders keys ascending (or descending), NaN above every number (tested by its bits: drivers that
compile with fast-math fold ``x != x`` away), and equal keys by their original index, so the result is the stable
sort whatever the network does.

* ``N <= BLOCK`` (2048, or less where shared memory is small): one workgroup per row sorts it in shared memory, read
  from the strided input and written to the strided outputs (one dispatch).
* longer rows: blocks of ``BLOCK`` are sorted in shared memory into a workspace, then for every merge size
  ``k > BLOCK`` the strides ``j >= BLOCK`` run as global compare-exchange dispatches and the strides below ``BLOCK``
  as one shared-memory dispatch per block (the last one writes the outputs): ``O(log^2 (N / BLOCK))`` dispatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....dtypes import DType, bool_, float32, int32
from ..device import Device
from .plan import Plan, span
from .wgsl import PARAM_WORDS, STORAGE_TYPE, WORKGROUP, coalesce, grid, header, load, store, written_type

_MAX_BLOCK = 2048


def key_type(x: DType) -> str:
    return "f32" if x.is_floating else "i32"


def _before(key: str, descending: bool) -> str:
    """``before(ka, ia, kb, ib)``: whether element a goes first (pads last, NaN high, ties by index)."""
    src = f"fn before(ka: {key}, ia: i32, kb: {key}, ib: i32) -> bool {{\n"
    src += "    if (ia < 0) { return false; }\n    if (ib < 0) { return true; }\n"
    if key == "f32":
        src += "    let na = (bitcast<u32>(ka) & 0x7fffffffu) > 0x7f800000u;\n"
        src += "    let nb = (bitcast<u32>(kb) & 0x7fffffffu) > 0x7f800000u;\n"
        first = "na" if descending else "nb"
        src += f"    if (na || nb) {{ if (na && nb) {{ return ia < ib; }} return {first}; }}\n"
    lt, gt = (">", "<") if descending else ("<", ">")
    src += f"    if (ka {lt} kb) {{ return true; }}\n    if (ka {gt} kb) {{ return false; }}\n"
    return src + "    return ia < ib;\n}\n"


def _load_key(buf: str, index: str, x: DType) -> str:
    return f"select(0, 1, {buf}[{index}] != 0u)" if x is bool_ else f"{key_type(x)}({load(buf, index, x)})"


@dataclass(frozen=True)
class _Io:
    """Where a pass reads and writes: the strided input / outputs (``strided``) or the workspace."""

    reads_input: bool
    writes_output: bool


def _row_offsets(rk: int, base: int, names: list[str], inits: list[str]) -> str:
    """Offsets of a row's first element in each named view, from the row's kept coordinates (C order); params
    ``base..`` hold the kept shape, then each view's kept strides."""
    src = "    var rem = row;\n" + "".join(f"    var {n} = {i};\n" for n, i in zip(names, inits, strict=True))
    for d in reversed(range(rk)):
        src += f"    let c{d} = i32(rem % pu({base + d}u)); rem = rem / pu({base + d}u);\n"
        for v, n in enumerate(names):
            src += f"    {n} += c{d} * pi({base + rk * (v + 1) + d}u);\n"
    return src


def _local_source(x: DType, descending: bool, rk: int, block: int, io: _Io, merge: bool) -> str:
    """One workgroup per block of ``block`` elements of a row, in shared memory: a full bitonic sort of the block
    (``merge`` False), or the strides ``block/2 .. 1`` of the merge of size ``k`` (a param, ``merge`` True).

    Bindings: values (b0), indices (b1), input (b2), workspace keys (b3), workspace indices (b4).
    Params: 0..4 offsets, 5 k (merge), 6 rows, 7 n, 8 N, 9 blocks per row, 10 values / 11 indices / 12 input
    stride along the last dim, 13.. kept shape, kept strides of values, indices, input."""
    K = key_type(x)
    nt = max(1, min(WORKGROUP, block // 2))
    src = header(
        [("b0", written_type(x)), ("b1", "i32"), ("b2", STORAGE_TYPE[x]), ("b3", K), ("b4", "i32")],
        STORAGE_TYPE[x] == "f16",
    )
    src += f"var<workgroup> sk: array<{K}, {block}>;\nvar<workgroup> si: array<i32, {block}>;\n"
    src += _before(K, descending)
    src += f"@compute @workgroup_size({nt})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    src += "        @builtin(local_invocation_index) lid: u32) {\n"
    src += "    let blk = wid.y * nwg.x + wid.x;\n    let row = blk / pu(9u);\n"
    src += f"    let first = (blk % pu(9u)) * {block}u;\n    let n = pu(7u);\n    let ws = row * pu(8u) + first;\n"
    src += _row_offsets(rk, 13, ["ov", "oi", "ox"], ["pi(0u)", "pi(1u)", "pi(2u)"])
    # load the block (pads: index -1)
    src += f"    for (var t = lid; t < {block}u; t += {nt}u) {{\n"
    if io.reads_input:
        src += "        let g = first + t;\n        var key: " + K + " = " + K + "(0);\n        var idx = -1;\n"
        src += f"        if (g < n) {{ key = {_load_key('b2', 'u32(ox + i32(g) * pi(12u))', x)}; idx = i32(g); }}\n"
        src += "        sk[t] = key;\n        si[t] = idx;\n"
    else:
        src += "        sk[t] = b3[pu(3u) + ws + t];\n        si[t] = b4[pu(4u) + ws + t];\n"
    src += "    }\n    workgroupBarrier();\n"
    # the network: (k, j) steps; element t of the block is element first + t of the row
    if merge:
        src += "    let k = pu(5u);\n    {\n"
    else:
        src += f"    for (var k = 2u; k <= {block}u; k <<= 1u) {{\n"
    src += (
        f"        for (var j = {'' if merge else 'min(k, '}{block}u{'' if merge else ')'} >> 1u; j > 0u; j >>= 1u) {{\n"
    )
    src += f"            for (var p = lid; p < {block // 2 or 1}u; p += {nt}u) {{\n"
    src += "                let i = (p / j) * 2u * j + p % j;\n                let l = i + j;\n"
    src += f"                if (l < {block}u) {{\n"
    src += "                    let up = ((first + i) & k) == 0u;\n"
    src += "                    let swap = select(before(sk[i], si[i], sk[l], si[l]), "
    src += "before(sk[l], si[l], sk[i], si[i]), up);\n"
    src += "                    if (swap) {\n"
    src += "                        let tk = sk[i]; sk[i] = sk[l]; sk[l] = tk;\n"
    src += "                        let ti = si[i]; si[i] = si[l]; si[l] = ti;\n"
    src += (
        "                    }\n                }\n            }\n            workgroupBarrier();\n        }\n    }\n"
    )
    # store
    src += f"    for (var t = lid; t < {block}u; t += {nt}u) {{\n"
    if io.writes_output:
        src += "        let g = first + t;\n        if (g < n) {\n"
        src += f"            {store('b0', 'u32(ov + i32(g) * pi(10u))', 'sk[t]', K, x)}\n"
        src += "            b1[u32(oi + i32(g) * pi(11u))] = si[t];\n        }\n"
    else:
        src += "        b3[pu(3u) + ws + t] = sk[t];\n        b4[pu(4u) + ws + t] = si[t];\n"
    return src + "    }\n}\n"


def _global_source(x: DType, descending: bool) -> str:
    """One compare-exchange per invocation of the merge of size k at stride j, over the workspace keys (b1) and
    indices (b2) of every row; b0 (the values view) is bound but unused, so a plan can check it like the others.
    Params: 0..2 offsets, 3 k, 4 j, 5 pairs in all, 6 N (padded row length)."""
    K = key_type(x)
    src = header([("b0", written_type(x)), ("b1", K), ("b2", "i32")], STORAGE_TYPE[x] == "f16")
    src += _before(K, descending)
    src += f"@compute @workgroup_size({WORKGROUP})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    src += "        @builtin(local_invocation_index) lid: u32) {\n"
    src += f"    let t = (wid.y * nwg.x + wid.x) * {WORKGROUP}u + lid;\n    if (t >= pu(5u)) {{ return; }}\n"
    src += "    let k = pu(3u);\n    let j = pu(4u);\n    let half = pu(6u) >> 1u;\n"
    src += "    let row = t / half;\n    let p = t % half;\n    let i = (p / j) * 2u * j + p % j;\n"
    src += "    let a = row * pu(6u) + i;\n    let b = a + j;\n    let up = (i & k) == 0u;\n"
    src += "    let ka = b1[pu(1u) + a];\n    let kb = b1[pu(1u) + b];\n"
    src += "    let ia = b2[pu(2u) + a];\n    let ib = b2[pu(2u) + b];\n"
    src += "    if (select(before(ka, ia, kb, ib), before(kb, ib, ka, ia), up)) {\n"
    src += "        b1[pu(1u) + a] = kb;\n        b1[pu(1u) + b] = ka;\n"
    src += "        b2[pu(2u) + a] = ib;\n        b2[pu(2u) + b] = ia;\n    }\n}\n"
    return src


@dataclass(slots=True)
class SortPlan:
    """The passes of one sort (see the module docstring): ``first`` (local sort), then per merge size ``k`` the
    global strides and the local merge; ``ws_numel`` workspace elements of keys and of indices."""

    first: Plan
    global_step: Plan | None
    merge: Plan | None
    last_merge: Plan | None
    n_padded: int
    block: int
    ws_numel: int
    key_dtype: DType


def build(dev: Device, values: Any, indices: Any, x: Any, descending: bool) -> SortPlan:
    if values.shape != x.shape or indices.shape != x.shape:
        raise ValueError(f"values {values.shape} and indices {indices.shape} must have the input's shape {x.shape}")
    if values.dtype is not x.dtype or indices.dtype is not int32:
        raise ValueError("values must have the input's dtype and indices int32")
    n = x.shape[-1]
    kept = list(range(len(x.shape) - 1))
    strides = [[v.strides[d] for d in kept] for v in (values, indices, x)]
    kshape, kstrides = coalesce([x.shape[d] for d in kept], strides)
    rk = len(kshape)
    if 13 + 4 * rk > PARAM_WORDS:
        raise ValueError(f"rank {len(x.shape)} is too high for the params window")
    rows = x.numel // n
    big = 1 << (max(n, 1) - 1).bit_length()
    limit = dev.limits.get("max-compute-workgroup-storage-size", 16384)
    max_block = _MAX_BLOCK
    while max_block * 8 > limit:
        max_block //= 2
    block = min(big, max_block)
    blocks = big // block
    static = (rows, n, big, blocks, values.strides[-1], indices.strides[-1], x.strides[-1], *kshape)
    static += tuple(s for st in kstrides for s in st)
    fmt = "<iiiii" + "I" + "IIII" + "iii" + "I" * rk + "i" * (3 * rk)
    spans = (span(values.shape, values.strides), span(indices.shape, indices.strides), span(x.shape, x.strides))
    ws = rows * big if blocks > 1 else 1
    ws_spans = ((0, ws - 1), (0, ws - 1))
    groups = grid(rows * blocks)

    def local(io: _Io, merge: bool) -> Plan:
        src = _local_source(x.dtype, descending, rk, block, io, merge)
        return Plan(dev.kernel(src, 5), fmt, static, groups, spans + ws_spans)

    key_dtype = float32 if x.dtype.is_floating else int32
    if blocks == 1:
        return SortPlan(local(_Io(True, True), False), None, None, None, big, block, 0, key_dtype)
    gsrc = _global_source(x.dtype, descending)
    pairs = rows * big // 2
    gplan = Plan(dev.kernel(gsrc, 3), "<iiiIIII", (pairs, big), grid(-(-pairs // WORKGROUP)), (spans[0], *ws_spans))
    return SortPlan(
        local(_Io(True, False), False),
        gplan,
        local(_Io(False, False), True),
        local(_Io(False, True), True),
        big,
        block,
        ws,
        key_dtype,
    )
