"""Sliding-window kernels: ``unfold`` (im2col), ``fold`` (col2im, its adjoint) and max pooling over
non-overlapping windows (``max_pool2d`` and its backward), see ``backend/base.py``.

Both are pure gathers (every output element is written by exactly one invocation), so neither needs atomics and
both are deterministic:

* unfold: one invocation per window ``(n, c, oh, ow)``; for each tap ``(i, j)`` it stores ``x[n, c, y, x]`` at
  ``y = oh*sh - ph + i*dh`` (likewise x), or ``pad_value`` (a param, so 0 and -inf share one kernel), into
  ``cols[n, (c*kh + i)*kw + j, oh*OW + ow]``,
* fold: one invocation per image pixel ``(n, c, y, x)``; it loops over the kernel taps ``(i, j)`` and adds the
  ``cols`` entry of the window ``(oh, ow)`` that tap maps onto, if ``y + ph - i*dh`` is a non-negative multiple of
  ``sh`` below ``OH*sh`` (likewise for x), accumulating in f32 for half storage,
* max_pool2d: one invocation per window, which writes its maximum and that tap's index; its backward one
  invocation per window too, which writes the window's gradient to the pixel the index names and 0 to the others
  (the windows do not overlap, so no sum): no window-sized temporaries, one dispatch each way.

Unfold and fold are specialised on the dtype only; the geometry and every stride are params, so one compiled
pipeline serves every layer. Max pooling has them as constants (a pipeline per shape and layout: see
``_pool_prelude``). Every view is addressed through its strides (conv2d writes cols in a (C*kh*kw, N, L) layout).
Guards: the invocation id is checked against the invocation count and the image reads against the image bounds, so with
the host's span check of each view no access leaves its buffer.
"""

from __future__ import annotations

from typing import Any

from ....dtypes import float16, float32, int32
from ...base import window_output_size
from ..device import Device
from .plan import Plan, span
from .wgsl import MAIN_1D, STORAGE_TYPE, WORKGROUP, grid, header, load, store_value

# static geometry words, in this order after the offsets (and unfold's pad value)
_GEOMETRY = ("NT", "C", "H", "W", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "OH", "OW")
_ACC = {float32: "f32", float16: "f32", int32: "i32"}


def _prelude(base: int, strides: dict[str, int]) -> str:
    """``let`` bindings of the geometry (words ``base..``) and of the strides (4 words per image, 3 per cols)."""
    lines = [f"    let {name} = pi({base + i}u);" for i, name in enumerate(_GEOMETRY)]
    w = base + len(_GEOMETRY)
    for prefix, rank in strides.items():
        lines += [f"    let {prefix}{d} = pi({w + d}u);" for d in range(rank)]
        w += rank
    return "\n".join(lines) + "\n"


def _decompose(names: tuple[str, ...], sizes: tuple[str, ...]) -> str:
    """The C-order coordinates ``names`` (outermost first) of ``gid`` over ``sizes`` (the outermost is unbounded)."""
    lines = ["    var r = gid;"]
    for name, size in zip(reversed(names[1:]), reversed(sizes[1:]), strict=True):
        lines.append(f"    let {name} = i32(r % u32({size})); r = r / u32({size});")
    lines.append(f"    let {names[0]} = i32(r);")
    return "\n".join(lines) + "\n"


def _unfold_source(dtype: Any) -> str:
    # params: 0 offset of out, 1 offset of x, 2 pad value (f32), 3.. geometry, out strides (n, row, l), x strides
    ty = STORAGE_TYPE[dtype]
    src = header([("b0", ty), ("b1", ty)], ty == "f16") + MAIN_1D
    src += _prelude(3, {"so": 3, "sx": 4})
    src += "    if (gid >= u32(NT)) { return; }\n"
    # one invocation per window (n, c, oh, ow) writes its kh*kw taps: the index math is done once per window, and
    # for each tap neighbouring invocations (neighbouring ow) still store to neighbouring addresses
    src += _decompose(("n", "c", "oh", "ow"), ("N", "C", "OH", "OW"))
    src += f"    let pad = {store_value('pf(2u)', 'f32', dtype)};\n"
    src += "    let ix = pi(1u) + n * sx0 + c * sx1;\n"
    src += "    var o = pi(0u) + n * so0 + c * KH * KW * so1 + (oh * OW + ow) * so2;\n"
    src += "    for (var i = 0; i < KH; i++) {\n        let y = oh * SH - PH + i * DH;\n"
    src += "        for (var j = 0; j < KW; j++) {\n            let x = ow * SW - PW + j * DW;\n"
    src += "            var v = pad;\n            if (y >= 0 && y < H && x >= 0 && x < W) {\n"
    src += f"                v = {load('b1', 'u32(ix + y * sx2 + x * sx3)', dtype)};\n            }}\n"
    src += "            b0[u32(o)] = v;\n            o += so1;\n        }\n    }\n}\n"
    return src


def _fold_source(dtype: Any) -> str:
    # params: 0 offset of out, 1 offset of cols, 2.. geometry, out strides (n, c, y, x), cols strides (n, row, l)
    ty, acc = STORAGE_TYPE[dtype], _ACC[dtype]
    src = header([("b0", ty), ("b1", ty)], ty == "f16") + MAIN_1D
    src += _prelude(2, {"so": 4, "sc": 3})
    src += "    if (gid >= u32(NT)) { return; }\n"
    src += _decompose(("n", "c", "y", "x"), ("N", "C", "H", "W"))
    src += f"    var s = {acc}(0);\n"
    # tap i reads window row oh = (y + PH - i*DH) / SH when that is an exact, in-range quotient; the numerator
    # falls as i grows, so the first negative one ends the loop
    src += "    for (var i = 0; i < KH; i++) {\n"
    src += "        let ty = y + PH - i * DH;\n        if (ty < 0) { break; }\n"
    src += "        let oh = ty / SH;\n        if (ty % SH != 0 || oh >= OH) { continue; }\n"
    src += "        for (var j = 0; j < KW; j++) {\n"
    src += "            let tx = x + PW - j * DW;\n            if (tx < 0) { break; }\n"
    src += "            let ow = tx / SW;\n            if (tx % SW != 0 || ow >= OW) { continue; }\n"
    src += "            let p = pi(1u) + n * sc0 + ((c * KH + i) * KW + j) * sc1 + (oh * OW + ow) * sc2;\n"
    src += f"            s += {acc}({load('b1', 'u32(p)', dtype)});\n        }}\n    }}\n"
    src += f"    b0[u32(pi(0u) + n * so0 + c * so1 + y * so2 + x * so3)] = {store_value('s', acc, dtype)};\n}}\n"
    return src


def build(
    dev: Device,
    kind: str,
    out: Any,
    src: Any,
    kernel_size: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> Plan:
    """The plan of ``unfold`` (``out`` = cols, ``src`` = image) or ``fold`` (``out`` = image, ``src`` = cols)."""
    if kind not in ("unfold", "fold"):
        raise ValueError(f"unknown window op {kind!r}")
    image, cols = (src, out) if kind == "unfold" else (out, src)
    if out.dtype is not src.dtype:
        raise ValueError(f"out and input dtypes differ ({out.dtype.name} vs {src.dtype.name})")
    if out.dtype not in _ACC:
        raise TypeError(f"{kind} supports float32, float16 and int32, not {out.dtype.name}")
    if len(image.shape) != 4 or len(cols.shape) != 3:
        raise ValueError("expected a 4-D (N, C, H, W) image and 3-D (N, C*kh*kw, OH*OW) cols")
    n, c, h, w = image.shape
    oh, ow = window_output_size((h, w), kernel_size, stride, padding, dilation)
    want = (n, c * kernel_size[0] * kernel_size[1], oh * ow)
    if cols.shape != want:
        raise ValueError(f"cols of shape {cols.shape} should be {want} for this image and window geometry")
    source = _unfold_source(out.dtype) if kind == "unfold" else _fold_source(out.dtype)
    kernel = dev.kernel(source, 2)
    total = n * c * oh * ow if kind == "unfold" else out.numel  # invocations: windows, or image pixels
    geometry = (total, c, h, w, *kernel_size, *stride, *padding, *dilation, oh, ow)
    static = (*geometry, *out.strides, *src.strides)
    dyn = "<iif" if kind == "unfold" else "<ii"
    fmt = dyn + "i" * len(static)
    spans = (span(out.shape, out.strides), span(src.shape, src.strides))
    return Plan(kernel, fmt, static, grid(-(-total // WORKGROUP)), spans)


# ------------------------------------------------------------------------------ max pooling (non-overlapping windows)
# ``Backend.max_pool2d``: windows of stride = kernel, no padding or dilation; NaN is found by its bits (a compiler
# that assumes no NaN may fold ``v == v`` to true), see wgsl.guard_nan
_POOL_GEOMETRY = ("NT", "C", "H", "W", "KH", "KW", "OH", "OW")


def _pool_prelude(static: tuple[int, ...], strides: tuple[str, ...]) -> str:
    """The geometry and the strides as constants: a pooling plan is made per shape and layout anyway, and constant
    divisors, bounds and strides let the compiler turn the index arithmetic into multiplies and unroll the window
    (on an H200 the CNN's 2x2 pooling forward took 0.168 ms with them as params, several times its bandwidth)."""
    names = [*_POOL_GEOMETRY, *(f"{prefix}{d}" for prefix in strides for d in range(4))]
    return "".join(f"    const {name} = {value};\n" for name, value in zip(names, static, strict=True))


def _is_nan(code: str, acc: str) -> str:
    if acc == "i32":
        return "false"
    return f"((bitcast<u32>(f32({code})) & 0x7fffffffu) > 0x7f800000u)"


def _max_pool_source(dtype: Any, static: tuple[int, ...]) -> str:
    # params: 0..2 offsets of values, indices, x; ``static``: the geometry, then the strides of values, indices, x
    ty, acc = STORAGE_TYPE[dtype], _ACC[dtype]
    src = header([("b0", ty), ("b1", "i32"), ("b2", ty)], ty == "f16") + MAIN_1D
    src += _pool_prelude(static, ("sv", "si", "sx"))
    src += "    if (gid >= u32(NT)) { return; }\n"
    src += _decompose(("n", "c", "oh", "ow"), ("N", "C", "OH", "OW"))
    src += "    let ix = pi(2u) + n * sx0 + c * sx1 + oh * KH * sx2 + ow * KW * sx3;\n"
    # the first maximum, or the last NaN once there is one (PyTorch's index)
    src += f"    var best = {acc}({load('b2', 'u32(ix)', dtype)});\n"
    src += f"    var nan = {_is_nan('best', acc)};\n    var at = 0;\n"
    src += "    for (var i = 0; i < KH; i++) {\n        for (var j = 0; j < KW; j++) {\n"
    src += "            let t = i * KW + j;\n            if (t == 0) { continue; }\n"
    src += f"            let v = {acc}({load('b2', 'u32(ix + i * sx2 + j * sx3)', dtype)});\n"
    src += f"            if ({_is_nan('v', acc)}) {{ best = v; at = t; nan = true; }}\n"
    src += "            else if (!nan && v > best) { best = v; at = t; }\n        }\n    }\n"
    src += f"    b0[u32(pi(0u) + n * sv0 + c * sv1 + oh * sv2 + ow * sv3)] = {store_value('best', acc, dtype)};\n"
    src += "    b1[u32(pi(1u) + n * si0 + c * si1 + oh * si2 + ow * si3)] = at;\n}\n"
    return src


def _max_pool_backward_source(dtype: Any, static: tuple[int, ...]) -> str:
    # params: 0..2 offsets of grad_input, grad, indices; ``static``: the geometry, then the strides of the three
    ty, acc = STORAGE_TYPE[dtype], _ACC[dtype]
    src = header([("b0", ty), ("b1", ty), ("b2", "i32")], ty == "f16") + MAIN_1D
    src += _pool_prelude(static, ("so", "sg", "si"))
    src += "    if (gid >= u32(NT)) { return; }\n"
    # one invocation per window, as the forward: it reads the window's index and gradient once and writes all its
    # pixels (on an H200 one invocation per pixel, each reading its window's index, took 0.127 ms for the CNN's
    # pooling, ~4x its bandwidth). The gradient goes to the pixel the index names as 0 + g, as fold's sum of the
    # one-hot windows gives, so -0 comes out +0 (by its bits: a compiler may fold 0 + g into g); 0 to the others
    src += _decompose(("n", "c", "oh", "ow"), ("N", "C", "OH", "OW"))
    src += "    let at = b2[u32(pi(2u) + n * si0 + c * si1 + oh * si2 + ow * si3)];\n"
    grad_at = "u32(pi(1u) + n * sg0 + c * sg1 + oh * sg2 + ow * sg3)"
    src += f"    let bits = bitcast<u32>(f32({load('b1', grad_at, dtype)}));\n"
    src += f"    let g = {acc}(bitcast<f32>(select(bits, 0u, (bits & 0x7fffffffu) == 0u)));\n"
    src += "    let o = pi(0u) + n * so0 + c * so1;\n"
    put = "b0[u32(o + y * so2 + x * so3)] = {};"
    # the window's pixels; the last window of a row (column) also zeroes the pixels past the last whole window,
    # which lie in none (H % KH rows, W % KW columns: constants, so the loops vanish where there are none)
    src += "    let rows = select(KH, H - oh * KH, oh == OH - 1);\n"
    src += "    let cols = select(KW, W - ow * KW, ow == OW - 1);\n"
    src += "    for (var i = 0; i < rows; i++) {\n        let y = oh * KH + i;\n"
    src += "        for (var j = 0; j < cols; j++) {\n            let x = ow * KW + j;\n"
    zero, hit = store_value(f"{acc}(0)", acc, dtype), store_value("g", acc, dtype)
    src += f"            if (i < KH && j < KW && at == i * KW + j) {{ {put.format(hit)} }}\n"
    src += f"            else {{ {put.format(zero)} }}\n        }}\n    }}\n}}\n"
    return src


def build_max_pool(dev: Device, backward: bool, out: Any, a: Any, b: Any, kernel_size: tuple[int, int]) -> Plan:
    """The plan of ``max_pool2d`` (``out`` = values, ``a`` = indices, ``b`` = x) or of its backward (``out`` =
    grad_input, ``a`` = grad, ``b`` = indices)."""
    image = out if backward else b
    pooled = a if backward else out
    n, c, h, w = image.shape
    total = pooled.numel  # invocations: one per window both ways
    geometry = (total, c, h, w, *kernel_size, pooled.shape[2], pooled.shape[3])
    static = (*geometry, *out.strides, *a.strides, *b.strides)
    source = (_max_pool_backward_source if backward else _max_pool_source)(image.dtype, static)
    spans = tuple(span(v.shape, v.strides) for v in (out, a, b))
    return Plan(dev.kernel(source, 3), "<iii", (), grid(-(-total // WORKGROUP)), spans)
