"""Batched matmul: ``out[..., m, n] = sum_k a[..., m, k] * b[..., k, n]`` on strided operands.

First version: a plain 16x16 shared-memory tiled kernel, one output element per invocation, f32 accumulation
(f16 inputs included), i32 for int32. ``a`` and ``b`` are read through their strides, so ``A.T @ B`` and broadcast
batch dims (stride 0) need no copy. Batches beyond the z workgroup limit are split over several dispatches.
A tuned family (register tiles, vec4 loads, split-K, autotune cache) replaces this behind ``encode_matmul``.
"""

from __future__ import annotations

from typing import Any

from ...dtypes import bool_, float16
from . import gemm
from .kernels.plan import Plan, span
from .kernels.wgsl import PARAM_WORDS, STORAGE_TYPE, coalesce, header, store_value, strided_offsets

TILE = 16
# params: 0..2 offsets of out, a, b; 3 first batch of this dispatch; 4 M, 5 N, 6 K, 7 a_sm, 8 a_sk, 9 b_sk, 10 b_sn,
# 11 o_sm, 12 o_sn, 13.. batch shape, batch strides of out, a, b
_W_BATCH = 13


def _source(dtype: Any, rank: int) -> str:
    acc = "i32" if STORAGE_TYPE[dtype] == "i32" else "f32"
    t = STORAGE_TYPE[dtype]
    w_str = [_W_BATCH + rank * (i + 1) for i in range(3)]
    src = header([("b0", t), ("b1", t), ("b2", t)], dtype is float16)
    for name in ("As", "Bs"):
        src += f"var<workgroup> {name}: array<array<{acc}, {TILE}>, {TILE}>;\n"
    src += f"@compute @workgroup_size({TILE}, {TILE})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n"
    src += "    let bidx = wid.z + pu(3u);\n"
    src += strided_offsets("bidx", rank, _W_BATCH, ["oo", "ao", "bo"], ["pi(0u)", "pi(1u)", "pi(2u)"], w_str)
    src += f"""    let M = pu(4u); let N = pu(5u); let K = pu(6u);
    let row = wid.y * {TILE}u + lid.y;
    let col = wid.x * {TILE}u + lid.x;
    var acc: {acc} = {acc}(0);
    for (var k0 = 0u; k0 < K; k0 += {TILE}u) {{
        let ka = k0 + lid.x;
        var av: {acc} = {acc}(0);
        if (row < M && ka < K) {{ av = {acc}(b1[u32(ao + i32(row) * pi(7u) + i32(ka) * pi(8u))]); }}
        As[lid.y][lid.x] = av;
        let kb = k0 + lid.y;
        var bv: {acc} = {acc}(0);
        if (kb < K && col < N) {{ bv = {acc}(b2[u32(bo + i32(kb) * pi(9u) + i32(col) * pi(10u))]); }}
        Bs[lid.y][lid.x] = bv;
        workgroupBarrier();
        for (var kk = 0u; kk < {TILE}u; kk++) {{ acc += As[lid.y][kk] * Bs[kk][lid.x]; }}
        workgroupBarrier();
    }}
    if (row < M && col < N) {{
        b0[u32(oo + i32(row) * pi(11u) + i32(col) * pi(12u))] = {store_value("acc", acc, dtype)};
    }}
}}
"""
    return src


def _plan(backend: Any, out: Any, a: Any, b: Any) -> tuple[Plan, int]:
    if a.dtype is bool_:
        raise TypeError("matmul of bool tensors is not supported")
    bshape, bstrides = coalesce(out.shape[:-2], [out.strides[:-2], a.strides[:-2], b.strides[:-2]])
    rank = len(bshape)
    if _W_BATCH + 4 * rank > PARAM_WORDS:
        raise ValueError(f"{len(out.shape) - 2} batch dims are too many for the params window")
    M, N = out.shape[-2:]
    K = a.shape[-1]
    max_groups = backend.rt.max_groups
    if -(-M // TILE) > max_groups or -(-N // TILE) > max_groups:
        raise ValueError(f"matmul with M={M}, N={N} exceeds the workgroup grid limit {max_groups} x {TILE}")
    nbatch = 1
    for n in bshape:
        nbatch *= n
    kernel = backend.dev.kernel(_source(a.dtype, rank), 3)
    fmt = "<iiiI" + "I" * 3 + "i" * 6 + "I" * rank + "i" * (3 * rank)
    static = (
        M,
        N,
        K,
        a.strides[-2],
        a.strides[-1],
        b.strides[-2],
        b.strides[-1],
        out.strides[-2],
        out.strides[-1],
        *bshape,
        *[s for st in bstrides for s in st],
    )
    groups = (-(-N // TILE), -(-M // TILE), min(nbatch, max_groups))
    spans = tuple(span(v.shape, v.strides) for v in (out, a, b))
    return Plan(kernel, fmt, static, groups, spans), nbatch


def encode_matmul(backend: Any, out: Any, a: Any, b: Any) -> None:
    """Record ``out = a @ b`` (views already validated: shapes agree, dtypes equal, out contiguous)."""
    if a.dtype in gemm.DTYPES:  # the tuned kernel family (gemm.py, autotune.py); the kernel above is its reference
        gemm.encode(backend, out, a, b)
        return
    key = ("matmul", a.dtype, out.shape, out.strides, a.shape, a.strides, b.shape, b.strides)
    cached = backend.plans.get(key)
    if cached is None:
        cached = backend.plans[key] = _plan(backend, out, a, b)
    plan, nbatch = cached
    if out.numel == 0:
        return
    step = plan.groups[2]
    for base in range(0, nbatch, step):
        groups = (plan.groups[0], plan.groups[1], min(step, nbatch - base))
        backend.launch("matmul", plan, (out, a, b), (base,), groups)
