"""Row normalisation kernels: ``layer_norm`` and ``layer_norm_backward`` (backend/base.py), one workgroup per row.

Forward, for the (R, N) ``x``: the 256 invocations of a row's workgroup walk it with a strided loop (neighbouring
invocations read neighbouring elements), a shared-memory tree sums their partials; two passes (the sum, then the
sum of squared deviations from the mean: no cancellation, unlike ``E[x^2] - E[x]^2``), then a third pass writes
``(x - mean) * rstd * w + b``; invocation 0 stores the row's mean and rstd. Backward: one pass for the row sums of
``h = dy * w`` and ``h * xhat``, one for ``dx = rstd * (h - mean(h) - xhat * mean(h * xhat))``. Arithmetic in f32
(float16 storage is loaded as f32 and rounded once on store).

Specialised on the dtype and on which of mean (RMS normalisation has none), weight and bias exist; shapes and
strides are params, so one pipeline serves every layer. Rows past 65535 use a 2-D grid. The only loop bound is N,
and every index is in the row's span, which the host checks against each storage.
"""

from __future__ import annotations

from typing import Any

from ....dtypes import float16, float32
from ...mathlib import SQRT
from ..device import Device
from .plan import Plan, span
from .wgsl import STORAGE_TYPE, WORKGROUP, grid, header, store_value

_STORE = {float32: "f32", float16: "f16"}
_WSUM = f"""var<workgroup> red: array<f32, {WORKGROUP}>;
fn wsum(v: f32, lid: u32) -> f32 {{
    red[lid] = v;
    workgroupBarrier();
    for (var s = {WORKGROUP // 2}u; s > 0u; s >>= 1u) {{
        if (lid < s) {{ red[lid] += red[lid + s]; }}
        workgroupBarrier();
    }}
    let t = red[0];
    workgroupBarrier();
    return t;
}}
"""
_MAIN = (
    f"@compute @workgroup_size({WORKGROUP})\n"
    "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n"
    "        @builtin(local_invocation_index) lid: u32) {\n"
    "    let r = wid.y * nwg.x + wid.x;\n"
)


def _bindings(names: list[tuple[str, bool, Any]]) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Header bindings of the views that exist (name, present, dtype) and each one's binding index."""
    bufs, index = [], {}
    for name, present, dtype in names:
        if present:
            index[name] = len(bufs)
            bufs.append((name, STORAGE_TYPE[dtype]))
    return bufs, index


def forward_source(dtype: Any, center: bool, has_w: bool, has_b: bool) -> str:
    # bindings: out, [mean], rstd, x, [w], [b]; params: offsets, eps, R, N, out (2), x (2), w, b, mean, rstd strides
    views = [("y", True, dtype), ("mu", center, float32), ("rs", True, float32), ("x", True, dtype)]
    views += [("w", has_w, dtype), ("b", has_b, dtype)]
    bufs, at = _bindings(views)
    nb = len(bufs)
    e, rw, nw = nb, nb + 1, nb + 2
    s = nb + 3  # out row, out col, x row, x col, w, b, mean, rstd strides
    src = header(bufs, dtype is float16) + SQRT["f32"] + _WSUM + _MAIN
    src += f"    if (r >= pu({rw}u)) {{ return; }}\n    let n = pu({nw}u);\n    let nf = f32(n);\n"
    src += f"    let xo = pi({at['x']}u) + i32(r) * pi({s + 2}u);\n    let xs = pi({s + 3}u);\n"
    load_x = "f32(x[u32(xo + i32(j) * xs)])"
    if center:
        src += "    var acc = 0.0;\n"
        src += f"    for (var j = lid; j < n; j += {WORKGROUP}u) {{ acc += {load_x}; }}\n"
        src += "    let mean = wsum(acc, lid) / nf;\n"
    else:
        src += "    let mean = 0.0;\n"
    src += "    var sq = 0.0;\n"
    src += f"    for (var j = lid; j < n; j += {WORKGROUP}u) {{ let d = {load_x} - mean; sq += d * d; }}\n"
    src += f"    let rstd = 1.0 / vk_sqrt_f32(wsum(sq, lid) / nf + pf({e}u));\n"
    src += f"    let yo = pi({at['y']}u) + i32(r) * pi({s}u);\n    let ys = pi({s + 1}u);\n"
    src += f"    for (var j = lid; j < n; j += {WORKGROUP}u) {{\n        var v = ({load_x} - mean) * rstd;\n"
    if has_w:
        src += f"        v = v * f32(w[u32(pi({at['w']}u) + i32(j) * pi({s + 4}u))]);\n"
    if has_b:
        src += f"        v = v + f32(b[u32(pi({at['b']}u) + i32(j) * pi({s + 5}u))]);\n"
    src += f"        y[u32(yo + i32(j) * ys)] = {store_value('v', 'f32', dtype)};\n    }}\n"
    src += "    if (lid == 0u) {\n"
    if center:
        src += f"        mu[u32(pi({at['mu']}u) + i32(r) * pi({s + 6}u))] = mean;\n"
    src += f"        rs[u32(pi({at['rs']}u) + i32(r) * pi({s + 7}u))] = rstd;\n    }}\n}}\n"
    return src


def backward_source(dtype: Any, center: bool, has_w: bool) -> str:
    # bindings: dx, dy, x, [w], [mean], rstd; params: offsets, R, N, dx (2), dy (2), x (2), w, mean, rstd strides
    views = [("dx", True, dtype), ("dy", True, dtype), ("x", True, dtype), ("w", has_w, dtype)]
    views += [("mu", center, float32), ("rs", True, float32)]
    bufs, at = _bindings(views)
    nb = len(bufs)
    rw, nw, s = nb, nb + 1, nb + 2  # dx row, dx col, dy row, dy col, x row, x col, w, mean, rstd strides
    src = header(bufs, dtype is float16) + _WSUM + _MAIN
    src += f"    if (r >= pu({rw}u)) {{ return; }}\n    let n = pu({nw}u);\n    let nf = f32(n);\n"
    src += f"    let go = pi({at['dy']}u) + i32(r) * pi({s + 2}u);\n    let gs = pi({s + 3}u);\n"
    src += f"    let xo = pi({at['x']}u) + i32(r) * pi({s + 4}u);\n    let xs = pi({s + 5}u);\n"
    src += f"    let rstd = rs[u32(pi({at['rs']}u) + i32(r) * pi({s + 8}u))];\n"
    src += f"    let mean = mu[u32(pi({at['mu']}u) + i32(r) * pi({s + 7}u))];\n" if center else "    let mean = 0.0;\n"
    h = "f32(dy[u32(go + i32(j) * gs)])"
    if has_w:
        h += f" * f32(w[u32(pi({at['w']}u) + i32(j) * pi({s + 6}u))])"
    body = f"        let h = {h};\n        let xhat = (f32(x[u32(xo + i32(j) * xs)]) - mean) * rstd;\n"
    src += "    var sh = 0.0;\n    var shx = 0.0;\n"
    loop = f"    for (var j = lid; j < n; j += {WORKGROUP}u) {{\n{body}"
    src += loop + "        sh += h;\n        shx += h * xhat;\n    }\n"
    src += "    let mh = wsum(sh, lid) / nf;\n" if center else "    let mh = 0.0;\n"
    src += "    let mhx = wsum(shx, lid) / nf;\n"
    src += f"    let dxo = pi({at['dx']}u) + i32(r) * pi({s}u);\n    let dxs = pi({s + 1}u);\n"
    src += loop + "        let v = rstd * (h - mh - xhat * mhx);\n"
    src += f"        dx[u32(dxo + i32(j) * dxs)] = {store_value('v', 'f32', dtype)};\n"
    return src + "    }\n}\n"


def _stride(v: Any, d: int = 0) -> int:
    return 0 if v is None else v.strides[d]


def _check(x: Any, rows_like: list[Any], stats: list[Any], vecs: list[Any]) -> tuple[int, int]:
    if len(x.shape) != 2 or x.dtype not in _STORE:
        raise TypeError(f"layer_norm takes a 2-D float32 or float16 x, got {x.dtype.name}{list(x.shape)}")
    r, n = x.shape
    for v in rows_like:
        if v.shape != (r, n) or v.dtype is not x.dtype:
            raise ValueError(f"expected ({r}, {n}) {x.dtype.name} views, got {v.dtype.name}{list(v.shape)}")
    for v in stats:
        if v is not None and (v.shape != (r,) or v.dtype is not float32):
            raise ValueError(f"expected ({r},) float32 statistics, got {v.dtype.name}{list(v.shape)}")
    for v in vecs:
        if v is not None and (v.shape != (n,) or v.dtype is not x.dtype):
            raise ValueError(f"expected ({n},) {x.dtype.name} weight / bias, got {v.dtype.name}{list(v.shape)}")
    return r, n


def build_forward(dev: Device, out: Any, mean: Any, rstd: Any, x: Any, w: Any, b: Any) -> Plan:
    r, n = _check(x, [out], [mean, rstd], [w, b])
    views = [v for v in (out, mean, rstd, x, w, b) if v is not None]
    kernel = dev.kernel(forward_source(x.dtype, mean is not None, w is not None, b is not None), len(views))
    static = (r, n, *out.strides, *x.strides, _stride(w), _stride(b), _stride(mean), rstd.strides[0])
    fmt = "<" + "i" * len(views) + "f" + "I" * 2 + "i" * (len(static) - 2)
    return Plan(kernel, fmt, static, grid(r), tuple(span(v.shape, v.strides) for v in views))


def build_backward(dev: Device, dx: Any, dy: Any, x: Any, w: Any, mean: Any, rstd: Any) -> Plan:
    r, n = _check(x, [dx, dy], [mean, rstd], [w])
    views = [v for v in (dx, dy, x, w, mean, rstd) if v is not None]
    kernel = dev.kernel(backward_source(x.dtype, mean is not None, w is not None), len(views))
    static = (r, n, *dx.strides, *dy.strides, *x.strides, _stride(w), _stride(mean), rstd.strides[0])
    fmt = "<" + "i" * len(views) + "I" * 2 + "i" * (len(static) - 2)
    return Plan(kernel, fmt, static, grid(r), tuple(span(v.shape, v.strides) for v in views))
