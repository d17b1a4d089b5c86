"""gather and scatter_add along one dim (``torch.gather`` / ``Tensor.scatter_add_`` semantics).

Both walk the index tensor's shape. Per element, the *dense* view (gather's ``out``, scatter's ``src``) is addressed
by the coordinates; the *target* view (gather's ``x``, scatter's ``out``) by the same coordinates with the one at
``dim`` replaced by the index value. Negative indices wrap once (numpy); indices still out of range read 0 (gather)
or are skipped (scatter) -- a kernel cannot raise, and unchecked kernels must never address outside a buffer.

scatter_add accumulates with atomics: ``atomicAdd`` for int32, a compare-exchange loop on the bit pattern for
float32 (``shader-float32-atomic`` is not available everywhere). float16 is not supported (no 16-bit atomics).
"""

from __future__ import annotations

from typing import Any

from ....dtypes import float32, int32
from ..device import Device
from .plan import Plan, span
from .wgsl import MAIN_1D, PARAM_WORDS, STORAGE_TYPE, WORKGROUP, grid, header, load, store_value, strided_offsets

_ADD_F32 = """
    var old = atomicLoad(&b0[p]);
    loop {
        let r = atomicCompareExchangeWeak(&b0[p], old, bitcast<u32>(bitcast<f32>(old) + v));
        if (r.exchanged) { break; }
        old = r.old_value;
    }
"""


def _source(kind: str, data: Any, rank: int) -> str:
    # params: 0..2 offsets of b0, b1, b2; 3 size of the target along dim, 4..5 the index range [lo, hi) this
    # dispatch handles (the whole dim, except for targets larger than a binding: large.py), 6 n, 7 target stride
    # along dim; 8.. shape, then strides of b0, b1, b2 (the target's stride at dim zeroed). The bound target view
    # starts at index lo.
    w_shape = 8
    w_str = [w_shape + rank * (i + 1) for i in range(3)]
    if kind == "gather":  # b0 = out (dense), b1 = x (target), b2 = index
        bufs = [("b0", STORAGE_TYPE[data]), ("b1", STORAGE_TYPE[data]), ("b2", "i32")]
        idx, t = "b2[u32(o2)]", "o1"
    else:  # b0 = out (target, atomic), b1 = index, b2 = src (dense)
        bufs = [("b0", "atomic<u32>" if data is float32 else "atomic<i32>"), ("b1", "i32"), ("b2", STORAGE_TYPE[data])]
        idx, t = "b1[u32(o1)]", "o0"
    src = header(bufs, STORAGE_TYPE[data] == "f16") + MAIN_1D
    src += "    if (gid >= pu(6u)) { return; }\n"
    src += strided_offsets("gid", rank, w_shape, ["o0", "o1", "o2"], ["pi(0u)", "pi(1u)", "pi(2u)"], w_str)
    src += f"    var k = {idx};\n    if (k < 0) {{ k += pi(3u); }}\n    let ok = k >= 0 && k < pi(3u);\n"
    src += "    let mine = k >= pi(4u) && k < pi(5u);\n"
    src += f"    {t} += (k - pi(4u)) * pi(7u);\n"
    if kind == "gather":  # a bad index reads 0, written by the pass that starts at index 0
        zero = store_value("0", "i32", data)
        return src + (
            f"    if (ok && mine) {{ b0[u32(o0)] = b1[u32(o1)]; }} else if (!ok && pi(4u) == 0) "
            f"{{ b0[u32(o0)] = {zero}; }}\n}}\n"
        )
    src += "    if (!(ok && mine)) { return; }\n    let p = u32(o0);\n"
    src += f"    let v = {load('b2', 'u32(o2)', data)};\n"
    return src + (_ADD_F32 if data is float32 else "    atomicAdd(&b0[p], v);\n") + "}\n"


def build(dev: Device, kind: str, views: tuple[Any, Any, Any], target: Any, dim: int, index: Any) -> Plan:
    """``views`` in binding order (see ``_source``); ``target`` is the one indexed along ``dim``."""
    rank = len(index.shape)
    if 8 + 4 * rank > PARAM_WORDS:
        raise ValueError(f"rank {rank} is too high for the params window")
    data = views[0].dtype if kind == "gather" else views[2].dtype
    if kind == "scatter_add" and data not in (float32, int32):
        raise TypeError(f"scatter_add supports float32 and int32, not {data.name} (no 16-bit/bool atomics)")
    kernel = dev.kernel(_source(kind, data, rank), 3)
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
