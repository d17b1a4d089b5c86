"""Cross-entropy kernels: ``cross_entropy`` and ``cross_entropy_backward`` (backend/base.py), one workgroup per row
(and a small forward that also writes the mean: one workgroup, one row per invocation, for up to MEAN_MAX_LOGITS).

Forward, for the (M, C) logits: one pass for the row's maximum (NaN wins, by a bit test: a compiler may assume no
NaN in ``max``), one for ``sum exp(x - max)`` (and, with label smoothing, the weighted row sum and the weights'
sum), shared-memory trees between them (``norm.py``'s); invocation 0 reads the logit at the target and stores the
row's loss, log-sum-exp and ``keep * weight[t]``. A target outside ``[0, C)`` (which the caller's check reports)
counts as ignored, so no read leaves the row. Backward: one pass writes ``s * (exp(x - lse) * (a w_t + c W) - c w_c
- a w_t [c == t])`` (with a first pass for ``W`` when weights and label smoothing meet). Arithmetic in f32.
"""

from __future__ import annotations

from typing import Any

from ....dtypes import float16, float32, int32
from ...mathlib import LOG
from ..device import Device
from .norm import _MAIN, _STORE, _WSUM, _bindings, _stride
from .plan import Plan, span
from .wgsl import WORKGROUP, grid, header, store_value

_MAXNAN = """fn isnan_(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
fn maxnan(a: f32, b: f32) -> f32 {
    if (isnan_(a) || isnan_(b)) { return bitcast<f32>(0x7fc00000u); }
    return select(b, a, a >= b);
}
"""
_WMAX = f"""var<workgroup> redm: array<f32, {WORKGROUP}>;
fn wmax(v: f32, lid: u32) -> f32 {{
    redm[lid] = v;
    workgroupBarrier();
    for (var s = {WORKGROUP // 2}u; s > 0u; s >>= 1u) {{
        if (lid < s) {{ redm[lid] = maxnan(redm[lid], redm[lid + s]); }}
        workgroupBarrier();
    }}
    let t = redm[0];
    workgroupBarrier();
    return t;
}}
"""
_NEG_INF = "bitcast<f32>(0xff800000u)"


def _target(at: dict[str, int], s_t: int) -> str:
    """The row's target ``t`` and whether it is kept (not ignore_index, inside [0, C))."""
    src = f"    let t = tg[u32(pi({at['tg']}u) + i32(r) * pi({s_t}u))];\n"
    return src + "    let keep = t != ii && t >= 0 && u32(t) < n;\n    let ts = select(0u, u32(t), keep);\n"


#: a batch of at most this many logits gets the small forward (one workgroup, one row per invocation) that also
#: writes the mean: a 10-class head at batch 512 is 5,120 logits, where the per-row kernel, the sum of the rows and
#: the mean's division were three dispatches
MEAN_MAX_LOGITS = 16384
#: ... and at most this many classes (an invocation walks its row's classes alone, twice)
MEAN_MAX_CLASSES = 64


def forward_source(dtype: Any, has_w: bool, smooth: bool, mean: bool = False) -> str:
    """The forward kernel; ``mean``: the small variant, one workgroup whose invocations take one row at a time and
    then sum the rows' losses and weights into ``mean`` = (loss sum / weight sum, weight sum)."""
    # bindings: loss, lse, wk, x, target, [w], [mean]; params: offsets, ignore_index, a, c, M, C, x (2), target, w,
    # loss, lse, wk, [mean] strides
    views = [("loss", True, dtype), ("lse", True, float32), ("wk", True, float32), ("x", True, dtype)]
    views += [("tg", True, int32), ("w", has_w, dtype), ("mean", mean, float32)]
    bufs, at = _bindings(views)
    nb = len(bufs)
    s = nb + 5  # x row, x col, target, w, loss, lse, wk, mean strides
    src = header(bufs, dtype is float16) + LOG["f32"] + _WSUM + _MAXNAN
    if mean:
        src += f"@compute @workgroup_size({WORKGROUP})\nfn main(@builtin(local_invocation_index) lid: u32) {{\n"
        src += f"    let rows = pu({nb + 3}u);\n    var tl = 0.0;\n    var tw = 0.0;\n"
        src += f"    for (var r = lid; r < rows; r += {WORKGROUP}u) {{\n"
    else:
        src += _WMAX + _MAIN + f"    if (r >= pu({nb + 3}u)) {{ return; }}\n"
    src += f"    let n = pu({nb + 4}u);\n"
    src += f"    let ii = pi({nb}u);\n    let a = pf({nb + 1}u);\n    let c = pf({nb + 2}u);\n"
    src += f"    let xo = pi({at['x']}u) + i32(r) * pi({s}u);\n    let xs = pi({s + 1}u);\n"
    load_x = "f32(x[u32(xo + i32(j) * xs)])"
    load_w = f"f32(w[u32(pi({at['w']}u) + i32(j) * pi({s + 3}u))])" if has_w else "1.0"
    # the row's classes: split over the workgroup (then trees), or walked by one invocation
    cols = "var j = 0u; j < n; j += 1u" if mean else f"var j = lid; j < n; j += {WORKGROUP}u"
    src += f"    var mx = {_NEG_INF};\n"
    src += f"    for ({cols}) {{ mx = maxnan(mx, {load_x}); }}\n"
    if not mean:
        src += "    mx = wmax(mx, lid);\n"
    src += "    var se = 0.0;\n    var sxw = 0.0;\n    var sw = 0.0;\n"
    src += f"    for ({cols}) {{\n        let v = {load_x};\n        se += exp(v - mx);\n"
    if smooth:
        src += f"        let wj = {load_w};\n        sxw += wj * v;\n        sw += wj;\n"
    if mean:
        src += "    }\n    let lz = mx + vk_log_f32(se);\n"
    else:
        src += "    }\n    let lz = mx + vk_log_f32(wsum(se, lid));\n"
        if smooth:
            src += "    sxw = wsum(sxw, lid);\n    sw = wsum(sw, lid);\n"
        src += "    if (lid != 0u) { return; }\n"
    src += _target(at, s + 2)
    w_t = f"f32(w[u32(pi({at['w']}u) + i32(ts) * pi({s + 3}u))])" if has_w else "1.0"
    src += f"    let wt = select(0.0, {w_t}, keep);\n"
    src += "    let pk = f32(x[u32(xo + i32(ts) * xs)]);\n"
    src += "    var v = -(a * wt * (pk - lz));\n"
    if smooth:
        src += "    v = v + c * (sw * lz - sxw);\n"
    src += "    v = select(0.0, v, keep);\n"
    src += f"    loss[u32(pi({at['loss']}u) + i32(r) * pi({s + 4}u))] = {store_value('v', 'f32', dtype)};\n"
    src += f"    lse[u32(pi({at['lse']}u) + i32(r) * pi({s + 5}u))] = lz;\n"
    src += f"    wk[u32(pi({at['wk']}u) + i32(r) * pi({s + 6}u))] = wt;\n"
    if not mean:
        return src + "}\n"
    src += "    tl += v;\n    tw += wt;\n    }\n"  # f32 logits only (the backend's condition): v is the stored loss
    src += "    tl = wsum(tl, lid);\n    tw = wsum(tw, lid);\n    if (lid != 0u) { return; }\n"
    src += f"    let mo = pi({at['mean']}u);\n    let ms = pi({s + 7}u);\n"
    return src + "    mean[u32(mo)] = tl / tw;\n    mean[u32(mo + ms)] = tw;\n}\n"


def backward_source(dtype: Any, sdtype: Any, has_w: bool, smooth: bool, has_den: bool = False) -> str:
    # bindings: dx, scale, x, target, lse, [w], [den]; params: offsets, ignore_index, a, c, M, C, dx (2), scale,
    # x (2), target, lse, w strides
    views = [("dx", True, dtype), ("sc", True, sdtype), ("x", True, dtype), ("tg", True, int32)]
    views += [("lse", True, float32), ("w", has_w, dtype), ("den", has_den, sdtype)]
    bufs, at = _bindings(views)
    nb = len(bufs)
    s = nb + 5  # dx row, dx col, scale, x row, x col, target, lse, w strides
    src = header(bufs, dtype is float16 or sdtype is float16) + _WSUM + _MAIN
    src += f"    if (r >= pu({nb + 3}u)) {{ return; }}\n    let n = pu({nb + 4}u);\n"
    src += f"    let ii = pi({nb}u);\n    let a = pf({nb + 1}u);\n    let c = pf({nb + 2}u);\n"
    src += _target(at, s + 5)
    load_w = f"f32(w[u32(pi({at['w']}u) + i32(j) * pi({s + 7}u))])" if has_w else "1.0"
    if smooth and has_w:
        src += f"    var sw = 0.0;\n    for (var j = lid; j < n; j += {WORKGROUP}u) {{ sw += {load_w}; }}\n"
        src += "    sw = wsum(sw, lid);\n"
    else:
        src += "    let sw = f32(n);\n"
    g = f"f32(sc[u32(pi({at['sc']}u) + i32(r) * pi({s + 2}u))])"
    if has_den:  # the mean's division (f32 only: the same bits as dividing first)
        g = f"{g} / f32(den[u32(pi({at['den']}u))])"
    src += f"    let g = select(0.0, {g}, keep);\n"
    src += f"    let l = lse[u32(pi({at['lse']}u) + i32(r) * pi({s + 6}u))];\n"
    w_t = f"f32(w[u32(pi({at['w']}u) + i32(ts) * pi({s + 7}u))])" if has_w else "1.0"
    src += f"    let wt = {w_t};\n    let p = g * (a * wt + c * sw);\n    let q = g * a * wt;\n"
    src += f"    let xo = pi({at['x']}u) + i32(r) * pi({s + 3}u);\n    let xs = pi({s + 4}u);\n"
    src += f"    let o = pi({at['dx']}u) + i32(r) * pi({s}u);\n    let os = pi({s + 1}u);\n"
    src += f"    for (var j = lid; j < n; j += {WORKGROUP}u) {{\n"
    src += "        var v = exp(f32(x[u32(xo + i32(j) * xs)]) - l) * p;\n"
    if smooth:
        src += f"        v = v - g * c * {load_w};\n"
    src += "        if (j == ts) { v = v - q; }\n"
    src += f"        dx[u32(o + i32(j) * os)] = {store_value('v', 'f32', dtype)};\n    }}\n}}\n"
    return src


def _check(x: Any, m_vectors: list[tuple[Any, Any]], w: Any, more: list[Any]) -> tuple[int, int]:
    if len(x.shape) != 2 or x.dtype not in _STORE or x.shape[1] == 0:
        raise TypeError(
            f"cross_entropy takes 2-D float32 or float16 logits with classes, got {x.dtype.name}{list(x.shape)}"
        )
    m, c = x.shape
    for v in more:
        if v.shape != (m, c) or v.dtype is not x.dtype:
            raise ValueError(f"expected ({m}, {c}) {x.dtype.name} views, got {v.dtype.name}{list(v.shape)}")
    for v, dts in m_vectors:
        if v.shape != (m,) or v.dtype not in dts:
            raise ValueError(f"expected ({m},) views of {[d.name for d in dts]}, got {v.dtype.name}{list(v.shape)}")
    if w is not None and (w.shape != (c,) or w.dtype is not x.dtype):
        raise ValueError(f"expected a ({c},) {x.dtype.name} weight, got {w.dtype.name}{list(w.shape)}")
    return m, c


def mean_fits(x: Any) -> bool:
    """Whether the small forward (with the mean) takes these logits."""
    m, c = x.shape
    return x.dtype is float32 and c <= MEAN_MAX_CLASSES and m * c <= MEAN_MAX_LOGITS


def build_forward(
    dev: Device, loss: Any, lse: Any, wk: Any, x: Any, target: Any, w: Any, smooth: bool, mean: Any = None
) -> Plan:
    f32, i32 = (float32,), (int32,)
    m, c = _check(x, [(loss, (x.dtype,)), (lse, f32), (wk, f32), (target, i32)], w, [])
    if mean is not None and (mean.shape != (2,) or mean.dtype is not float32 or not mean_fits(x)):
        raise ValueError(
            f"the mean's cross-entropy takes a (2,) float32 mean and float32 logits of at most {MEAN_MAX_LOGITS} "
            f"elements and {MEAN_MAX_CLASSES} classes, got {mean.dtype.name}{list(mean.shape)} and "
            f"{x.dtype.name}{list(x.shape)}"
        )
    views = [v for v in (loss, lse, wk, x, target, w, mean) if v is not None]
    kernel = dev.kernel(forward_source(x.dtype, w is not None, smooth, mean is not None), len(views))
    static = (m, c, *x.strides, target.strides[0], _stride(w), loss.strides[0], lse.strides[0], wk.strides[0])
    if mean is not None:
        static += (mean.strides[0],)
    fmt = "<" + "i" * len(views) + "iff" + "II" + "i" * (len(static) - 2)
    groups = (1, 1, 1) if mean is not None else grid(m)
    return Plan(kernel, fmt, static, groups, tuple(span(v.shape, v.strides) for v in views))


def build_backward(
    dev: Device, dx: Any, scale: Any, x: Any, target: Any, lse: Any, w: Any, den: Any, smooth: bool
) -> Plan:
    m, c = _check(x, [(scale, tuple(_STORE)), (target, (int32,)), (lse, (float32,))], w, [dx])
    views = [v for v in (dx, scale, x, target, lse, w, den) if v is not None]
    kernel = dev.kernel(backward_source(x.dtype, scale.dtype, w is not None, smooth, den is not None), len(views))
    static = (m, c, *dx.strides, scale.strides[0], *x.strides, target.strides[0], lse.strides[0], _stride(w))
    fmt = "<" + "i" * len(views) + "iff" + "II" + "i" * (len(static) - 2)
    return Plan(kernel, fmt, static, grid(m), tuple(span(v.shape, v.strides) for v in views))
