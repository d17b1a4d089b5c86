"""gather and scatter along one dim (``torch.gather`` / ``Tensor.scatter_`` / ``scatter_reduce_`` semantics).

Both walk the index tensor's shape. Per element, the *dense* view (gather's ``out``, scatter's ``src``) is addressed
by the coordinates; the *target* view (gather's ``x``, scatter's ``out``) by the same coordinates with the one at
``dim`` replaced by the index value. Negative indices wrap once (numpy); indices still out of range read 0 (gather)
or are skipped (scatter) -- a kernel cannot raise, and unchecked kernels must never address outside a buffer.

A target larger than one binding is visited in index ranges (``large.py``): each dispatch handles the indices in
its ``[lo, hi)`` only.

scatter ``assign`` is a plain store (with duplicate indices one store wins, as in PyTorch). The reductions use
atomics: ``atomicAdd`` / ``atomicMax`` / ``atomicMin`` for int32, and otherwise a compare-exchange loop on the
32-bit pattern (``shader-float32-atomic`` is not available everywhere), which is also how int32 products combine.
Reductions support float32 and int32 only (no 16-bit or bool atomics).
"""

from __future__ import annotations

from typing import Any

from ....dtypes import float32, int32
from ..device import Device
from .plan import Plan, span
from .wgsl import (
    COMPUTE_TYPE,
    MAIN_1D,
    PARAM_WORDS,
    STORAGE_TYPE,
    WORKGROUP,
    convert,
    grid,
    header,
    load,
    store,
    strided_offsets,
    written_type,
)

_INT_ATOMIC = {"sum": "atomicAdd", "amax": "atomicMax", "amin": "atomicMin"}


def _is_nan(x: str) -> str:
    # by the bits: drivers compiling with fast-math fold ``x != x`` away
    return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"


def _fold(op: str, a: str, b: str, floating: bool) -> str:
    """WGSL of ``a op b`` (NaN wins a float amax/amin, as in PyTorch)."""
    if op in ("sum", "prod"):
        return f"({a} {'+' if op == 'sum' else '*'} {b})"
    pick = f"{'max' if op == 'amax' else 'min'}({a}, {b})"
    return f"select(select({pick}, {b}, {_is_nan(b)}), {a}, {_is_nan(a)})" if floating else pick


def _combine(op: str, data: Any) -> str:
    """WGSL that folds ``v`` into the atomic word ``b0[p]``: an int32 atomic, else a compare-exchange loop."""
    if data is int32 and op in _INT_ATOMIC:
        return f"    {_INT_ATOMIC[op]}(&b0[p], v);\n"
    if data is int32:
        new = _fold(op, "old", "v", False)
    else:
        new = f"bitcast<u32>({_fold(op, 'bitcast<f32>(old)', 'v', True)})"
    return (
        "    var old = atomicLoad(&b0[p]);\n    loop {\n"
        f"        let r = atomicCompareExchangeWeak(&b0[p], old, {new});\n"
        "        if (r.exchanged) { break; }\n        old = r.old_value;\n    }\n"
    )


def _source(kind: str, op: str, data: Any, rank: int) -> str:
    # params: 0..2 offsets of b0, b1, b2; 3 size of the target along dim, 4..5 the index range [lo, hi) this
    # dispatch handles (the whole dim, except for targets larger than a binding: large.py), 6 n, 7 target stride
    # along dim; 8.. shape, then strides of b0, b1, b2 (the target's stride at dim zeroed). The bound target view
    # starts at index lo.
    w_shape = 8
    w_str = [w_shape + rank * (i + 1) for i in range(3)]
    if kind == "gather":  # b0 = out (dense), b1 = x (target), b2 = index
        bufs = [("b0", written_type(data)), ("b1", STORAGE_TYPE[data]), ("b2", "i32")]
        idx, t = "b2[u32(o2)]", "o1"
    else:  # b0 = out (target; atomic for reductions), b1 = index, b2 = src (dense)
        target = written_type(data) if op == "assign" else "atomic<u32>" if data is float32 else "atomic<i32>"
        bufs = [("b0", target), ("b1", "i32"), ("b2", STORAGE_TYPE[data])]
        idx, t = "b1[u32(o1)]", "o0"
    src = header(bufs, STORAGE_TYPE[data] == "f16") + MAIN_1D
    src += "    if (gid >= pu(6u)) { return; }\n"
    src += strided_offsets("gid", rank, w_shape, ["o0", "o1", "o2"], ["pi(0u)", "pi(1u)", "pi(2u)"], w_str)
    src += f"    var k = {idx};\n    if (k < 0) {{ k += pi(3u); }}\n    let ok = k >= 0 && k < pi(3u);\n"
    src += "    let mine = k >= pi(4u) && k < pi(5u);\n"
    src += f"    {t} += (k - pi(4u)) * pi(7u);\n"
    ct = COMPUTE_TYPE[data]
    if kind == "gather":
        # the target is read only for an index in this pass's range (unchecked kernels never address outside a
        # buffer); a bad index reads 0, written by the pass that starts at index 0
        src += "    if (!((ok && mine) || (!ok && pi(4u) == 0))) { return; }\n"
        src += f"    var v: {ct} = {convert('0', 'i32', ct)};\n    if (ok) {{ v = {load('b1', 'u32(o1)', data)}; }}\n"
        return src + f"    {store('b0', 'u32(o0)', 'v', ct, data)}\n}}\n"
    src += "    if (!(ok && mine)) { return; }\n    let p = u32(o0);\n"
    if op == "assign":
        return src + f"    {store('b0', 'p', load('b2', 'u32(o2)', data), ct, data)}\n}}\n"
    src += f"    let v = {load('b2', 'u32(o2)', data)};\n"
    return src + _combine(op, data) + "}\n"


def build(
    dev: Device, kind: str, views: tuple[Any, Any, Any], target: Any, dim: int, index: Any, op: str = "assign"
) -> Plan:
    """``views`` in binding order (see ``_source``); ``target`` is the one indexed along ``dim``; ``op`` is
    scatter's (``SCATTER_OPS``)."""
    rank = len(index.shape)
    if 8 + 4 * rank > PARAM_WORDS:
        raise ValueError(f"rank {rank} is too high for the params window")
    data = views[0].dtype if kind == "gather" else views[2].dtype
    if kind == "scatter" and op != "assign" and data not in (float32, int32):
        raise TypeError(f"scatter {op} supports float32 and int32, not {data.name} (no 16-bit/bool atomics)")
    kernel = dev.kernel(_source(kind, op, data, rank), 3)
    strides = []
    for v in views:
        st = list(v.strides)
        if v is target:
            st[dim] = 0
        strides += st
    n = index.numel
    fmt = "<iii" + "iii" + "I" + "i" + "I" * rank + "i" * (3 * rank)  # (size, lo, hi) per dispatch
    static = (n, target.strides[dim], *index.shape, *strides)
    spans = tuple(span(v.shape, v.strides) for v in views)
    return Plan(kernel, fmt, static, grid(-(-n // WORKGROUP)), spans)
