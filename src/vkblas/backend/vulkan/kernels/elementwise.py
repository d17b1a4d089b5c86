"""Elementwise kernels generated from the shared op table (``backend/elementwise.py``).

Specialised by op, operand dtypes / scalar types, output dtype and *rank after coalescing* (dims that are
contiguous in every operand are merged and size-1 dims dropped, so most calls are rank 1 or 2 and the index math is
a couple of divisions). Shapes and strides are params, not literals, so one pipeline serves every shape of a rank;
Python-number operands are params too (no recompiling per value). The formula becomes one WGSL function
``vk_op(tensor operands...) -> stored value`` that both variants call:

* ``scalar``: one invocation per element, strided offsets -- any layout;
* ``vec4`` (the bandwidth path): rank 1 after coalescing, output stride 1, every tensor operand stride 1 or 0
  (broadcast, loaded once as a scalar), ``n % 4 == 0``. Each invocation moves ``VEC_ITEMS`` vec4s per stride-1
  operand, ``WORKGROUP`` vec4s apart (coalesced); all loads are issued before any store (bindings may alias, so
  the compiler could not hoist them itself). The plan carries it as ``Plan.vec``, and the backend picks it per
  call when every bound offset is a multiple of 4 (offsets are params, not part of the plan key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ....dtypes import BYTES, DType, bool_, float16, int8
from ... import elementwise as ew
from ..device import Device
from .plan import Plan, span
from .wgsl import (
    COMPUTE_TYPE,
    MAIN_1D,
    PARAM_WORDS,
    STORAGE_TYPE,
    WORKGROUP,
    Emitter,
    Expr,
    WgslMath,
    coalesce,
    grid,
    header,
    load,
    store,
    store_value,
    strided_offsets,
    written_type,
)

_SCALAR_FMT = {"f32": "f", "f16": "f", "i32": "i", "bool": "I"}
_SCALAR_READ = {"f32": "pf({w}u)", "f16": "f16(pf({w}u))", "i32": "pi({w}u)", "bool": "(pu({w}u) != 0u)"}


def compute_dtype(op: str, out: DType, args: Sequence[Any]) -> DType:
    """The dtype the formula runs in: the tensor operands' (the bool condition of ``where`` aside)."""
    spec = ew.OPS[op]
    for i, a in enumerate(args):
        if hasattr(a, "storage") and i != spec.bool_operand:
            return a.dtype
    return bool_ if spec.returns_bool else out


def scalar_type(value: Any, compute: DType) -> str:
    """WGSL type a Python-number operand acts as: the compute dtype, except where numpy would promote."""
    ct = COMPUTE_TYPE[compute]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i32" if ct == "bool" else ct
    return ct if ct in ("f32", "f16") else "f32"


#: vec4s per invocation in the vec4 variant (8 floats: 32 bytes in flight per operand per thread)
VEC_ITEMS = 2

# the vec4 variant's 8-bit words: four lanes of one u32 (its loads and stores own whole words: no atomics)
_PACK8 = """
fn vk_pack8(v: vec4<i32>) -> u32 {
    let b = bitcast<vec4<u32>>(v) & vec4<u32>(0xffu);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}
"""


def _value_type(dtype: DType) -> str:
    """The type ``vk_op`` returns: the storage type, or i32 for an 8-bit dtype (packed by the store)."""
    return "i32" if dtype in BYTES else STORAGE_TYPE[dtype]


def _lane8(word: str, lane: int, dtype: DType) -> str:
    """Lane ``lane`` (0..3) of a packed 8-bit word, as i32 (sign-extended for int8)."""
    if dtype is int8:
        return f"extractBits(bitcast<i32>({word}), {8 * lane}u, 8u)"
    return f"i32(extractBits({word}, {8 * lane}u, 8u))"


def _formula(op: str, out_dtype: DType, kinds: Sequence[tuple[str, Any]], compute: DType, nt: int) -> tuple[str, bool]:
    """``fn vk_op(a1, a2, ...) -> <out storage type>`` (tensor operands as parameters in their compute types,
    scalar operands read from params words ``nt..``), and whether it needs ``enable f16``."""
    em = Emitter(COMPUTE_TYPE[compute])
    vals: list[Any] = []
    params: list[str] = []
    s = nt
    for kind, what in kinds:
        if kind == "t":
            name = f"a{len(params) + 1}"
            params.append(f"{name}: {COMPUTE_TYPE[what]}")
            vals.append(Expr(name, COMPUTE_TYPE[what], em))
        else:
            vals.append(Expr(_SCALAR_READ[what].format(w=s), what, em))
            s += 1
    result = ew.OPS[op].fn(WgslMath(em), *vals)
    code, ty = em.value(result)
    f16 = "f16" in (em.default_type, ty) or any(k == "t" and w is float16 for k, w in kinds)
    body = "\n".join(em.lines)
    fn = f"fn vk_op({', '.join(params)}) -> {_value_type(out_dtype)} {{\n{body}\n"
    fn += f"    return {store_value(code, ty, out_dtype)};\n}}\n"
    return "".join(em.helpers.values()) + fn, f16 or out_dtype is float16


def source(
    op: str, out_dtype: DType, kinds: Sequence[tuple[str, Any]], rank: int, compute: DType, flag: bool = False
) -> str:
    """WGSL for ``out = OPS[op](*args)``; ``kinds[i]`` is ``("t", dtype)`` for a tensor or ``("s", wgsl type)``.
    ``flag``: out is an int32 flag (a view with zero strides), ORed with 1 where the op is true (an atomic: the
    device-side value checks in one dispatch, ``device_checks.py``)."""
    tensors = [k[1] for k in kinds if k[0] == "t"]
    nt = len(tensors) + 1  # out is view 0
    nscal = len(kinds) - len(tensors)
    w_n = nt + nscal
    w_shape = w_n + 1
    w_strides = [w_shape + rank * (1 + i) for i in range(nt)]
    fn, f16 = _formula(op, out_dtype, kinds, compute, nt)
    names = [f"o{i}" for i in range(nt)]
    operands = ", ".join(load(f"b{i}", f"u32(o{i})", d) for i, d in enumerate(tensors, 1))
    value = _value_type(out_dtype)
    if flag:  # only the failing elements touch the flag: no contention when every value passes
        b0, last = "atomic<i32>", f"if (vk_op({operands}) != 0) {{ atomicOr(&b0[u32(o0)], 1); }}"
    else:
        b0, last = written_type(out_dtype), store("b0", "u32(o0)", f"vk_op({operands})", value, out_dtype)
    return (
        header([("b0", b0)] + [(f"b{i}", STORAGE_TYPE[d]) for i, d in enumerate(tensors, 1)], f16)
        + fn
        + MAIN_1D
        + f"    if (gid >= pu({w_n}u)) {{ return; }}\n"
        + strided_offsets("gid", rank, w_shape, names, [f"pi({i}u)" for i in range(nt)], w_strides)
        + f"    {last}\n}}\n"
    )


def vec_source(
    op: str, out_dtype: DType, kinds: Sequence[tuple[str, Any]], compute: DType, broadcast: Sequence[bool]
) -> str:
    """The vec4 variant (see the module docstring); ``broadcast[i]`` is True for tensor operand i with stride 0."""
    tensors = [k[1] for k in kinds if k[0] == "t"]
    nt = len(tensors) + 1
    w_n = nt + len(kinds) - len(tensors)
    fn, f16 = _formula(op, out_dtype, kinds, compute, nt)
    bufs = [("b0", "u32" if out_dtype in BYTES else f"vec4<{STORAGE_TYPE[out_dtype]}>")]
    pre = [
        f"    let n4 = pu({w_n}u) >> 2u;",
        f"    let i0 = wid_lin * {WORKGROUP * VEC_ITEMS}u + lid;",
        "    if (i0 >= n4) { return; }",
        "    let q0 = pu(0u) >> 2u;",
    ]
    for i, (d, bc) in enumerate(zip(tensors, broadcast, strict=True), 1):
        st = STORAGE_TYPE[d]
        bufs.append((f"b{i}", st if bc or d in BYTES else f"vec4<{st}>"))
        pre.append(f"    let s{i} = {load(f'b{i}', f'pu({i}u)', d)};" if bc else f"    let q{i} = pu({i}u) >> 2u;")

    def comp(i: int, d: DType, v: str, c: str) -> str:
        if broadcast[i - 1]:
            return f"s{i}"
        if d in BYTES:
            return _lane8(v, "xyzw".index(c), d)
        return f"({v}.{c} != 0u)" if d is bool_ else f"{v}.{c}"

    def result(k: str) -> str:
        lanes = [
            "vk_op(" + ", ".join(comp(i, d, f"v{i}_{k}", c) for i, d in enumerate(tensors, 1)) + ")" for c in "xyzw"
        ]
        if out_dtype in BYTES:
            return f"vk_pack8(vec4<i32>({', '.join(lanes)}))"
        return f"vec4<{STORAGE_TYPE[out_dtype]}>({', '.join(lanes)})"

    loaded = [i for i in range(1, nt) if not broadcast[i - 1]]
    full, tail = [], []
    for k in range(VEC_ITEMS):  # every invocation's vec4s are in range: loads first, then compute + store
        full += [f"        let v{i}_{k} = b{i}[q{i} + i0 + {k * WORKGROUP}u];" for i in loaded]
    for k in range(VEC_ITEMS):
        full.append(f"        b0[q0 + i0 + {k * WORKGROUP}u] = {result(str(k))};")
    tail += [f"            let v{i}_t = b{i}[q{i} + i];" for i in loaded]
    tail.append(f"            b0[q0 + i] = {result('t')};")
    main = (
        f"@compute @workgroup_size({WORKGROUP})\n"
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
        "        @builtin(local_invocation_index) lid: u32) {\n"
        "    let wid_lin = wid.y * nwg.x + wid.x;\n"
        + "\n".join(pre)
        + f"\n    if (i0 + {(VEC_ITEMS - 1) * WORKGROUP}u < n4) {{\n"
        + "\n".join(full)
        + f"\n    }} else {{\n        for (var k = 0u; k < {VEC_ITEMS}u; k++) {{\n"
        + f"            let i = i0 + k * {WORKGROUP}u;\n            if (i >= n4) {{ break; }}\n"
        + "\n".join(tail)
        + "\n        }\n    }\n}\n"
    )
    return header(bufs, f16) + (_PACK8 if out_dtype in BYTES else "") + fn + main


def build(dev: Device, op: str, out: Any, args: Sequence[Any], flag: bool = False) -> Plan:
    """The plan for this call's op/dtypes/shapes/strides (its ``vec`` variant where the layout allows one);
    ``flag``: see :func:`source` (out an int32 view with zero strides)."""
    compute = compute_dtype(op, out.dtype, args)
    views = [out] + [a for a in args if hasattr(a, "storage")]
    kinds: list[tuple[str, Any]] = []
    for a in args:
        if hasattr(a, "storage"):
            kinds.append(("t", a.dtype))
        else:
            kinds.append(("s", scalar_type(a, compute)))
    nscal = sum(k[0] == "s" for k in kinds)
    shape, strides = coalesce(out.shape, [v.strides for v in views])
    rank = len(shape)
    nwords = len(views) * (1 + rank) + nscal + 1 + rank
    if nwords > PARAM_WORDS:
        raise ValueError(f"rank {len(out.shape)} is too high for the params window ({nwords} > {PARAM_WORDS} words)")
    kernel = dev.kernel(source(op, out.dtype, kinds, rank, compute, flag), len(views))
    n = out.numel
    fmt = "<" + "i" * len(views) + "".join(_SCALAR_FMT[k[1]] for k in kinds if k[0] == "s") + "I" * (1 + rank)
    fmt += "i" * (rank * len(views))
    static = (n, *shape, *[s for st in strides for s in st])
    spans = tuple(span(v.shape, v.strides) for v in views)
    vec = None
    if not flag and rank == 1 and n % 4 == 0 and strides[0][0] == 1 and all(st[0] in (0, 1) for st in strides[1:]):
        vsrc = vec_source(op, out.dtype, kinds, compute, [st[0] == 0 for st in strides[1:]])
        vgroups = grid(-(-n // (4 * WORKGROUP * VEC_ITEMS)))
        vec = Plan(dev.kernel(vsrc, len(views)), fmt, static, vgroups, spans)
    return Plan(kernel, fmt, static, grid(-(-n // WORKGROUP)), spans, vec)
