"""Recording a convolution as an implicit GEMM: the GEMM template (``gemm.py``) with one or both operands read
through the convolution's geometry (:class:`gemm.Gather`), so no im2col matrix is ever stored.

The three products of ``conv2d`` (stride, padding, dilation; groups 1), each a single GEMM plan:

* ``forward``: ``out[n] (O, OH*OW) = W (O, kh*kw*C) @ cols(x[n])``, batched over images through the GEMM's batch
  (the weight broadcast, the image's batch stride), written straight into the (N, O, OH, OW) output.
* ``input``: ``gx[n] (C, H*W) = Wt (C, kh*kw*O) @ tcols(g[n])``, the transposed convolution's columns of the output
  gradient (``Wt``: the weight with its two channel dims swapped).
* ``weight``: ``gw (O, C*kh*kw) = g (O, N*OH*OW) @ cols(x)^T``, K running over every pixel of every image
  (split-K by the tuner; a deterministic second pass sums the splits).

The forward and input products run their K (taps) channel-fastest, ``(ky, kx, c)`` (:class:`gemm.Gather`'s
``channels_last``), so the weight matrix is laid out that way: a small copy of the weight per call, none where the
layouts coincide (one input channel, 1x1 kernels).
"""

from __future__ import annotations

from typing import Any

from ..base import View, window_output_size
from . import epilogue, gemm
from .autotune import tuner
from .kernels.wgsl import coalesce
from .memory import LargeStorage

KINDS = ("forward", "input", "weight")
Geometry = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]  # kernel, stride, pad, dil


def _gathered(v: View, shape: tuple[int, ...], batched: bool) -> View:
    """The logical matrix view of a gathered operand: the source's storage and offset, its image stride as the
    batch stride, no inner strides (the gather addresses the elements)."""
    return View(v.storage, shape, ((v.strides[0],) if batched else ()) + (0, 0), v.offset)


def _planes(out: View, wmat: View, src: View, g: gemm.Gather) -> tuple[View, View, View, gemm.Gathers]:
    """``out[n] (ch, pixels) = wmat (ch, K) @ gathered (K, pixels)`` per image, as a batched GEMM (the weight
    broadcast). Measured on an H200 (MNIST CNN, 2026-12-01): the transposed product, pixels as the GEMM's rows and
    the output stored column-major, ran the 32->64 conv at 0.83 ms against this layout's 0.45 ms."""
    n, ch = out.shape[:2]
    pixels = out.shape[2] * out.shape[3]
    kdim = wmat.shape[1]
    return (
        View(out.storage, (n, ch, pixels), (ch * pixels, pixels, 1), out.offset),
        View(wmat.storage, (n, ch, kdim), (0, *wmat.strides), wmat.offset),
        _gathered(src, (n, kdim, pixels), True),
        (None, g),
    )


def problem(kind: str, out: View, a: View, b: View, geometry: Geometry) -> tuple[View, View, View, gemm.Gathers]:
    """(out, a, b, gathers) of the GEMM that computes ``kind``; ValueError naming the shapes when they disagree."""
    k, s, p, d = geometry
    kk = k[0] * k[1]
    ranks = (len(out.shape), len(a.shape), len(b.shape))
    if kind in KINDS and ranks != ((2, 4, 4) if kind == "weight" else (4, 4, 2)):
        raise ValueError(f"convolution {kind}: operands of ranks {ranks}, shapes {out.shape}, {a.shape}, {b.shape}")
    if kind == "forward":  # out (N, O, OH, OW), a = x (N, C, H, W), b = W (O, kh*kw*C)
        x, w2 = a, b
        n, c, h, w = x.shape
        o = out.shape[1]
        oh, ow = window_output_size((h, w), k, s, p, d)
        want = [((n, o, oh, ow), out.shape), ((o, c * kk), w2.shape)]
        g = gemm.Gather("window", True, c, (h, w), (oh, ow), 1, x.strides, k, s, p, d, channels_last=True)
        result = _planes(out, w2, x, g)
    elif kind == "input":  # out = gx (N, C, H, W), a = g (N, O, OH, OW), b = Wt (C, kh*kw*O)
        gy, wt = a, b
        n, o, oh, ow = gy.shape
        c, h, w = out.shape[1], out.shape[2], out.shape[3]
        want = [((out.shape[0], o, *window_output_size((h, w), k, s, p, d)), gy.shape), ((c, o * kk), wt.shape)]
        g = gemm.Gather("transposed", True, o, (oh, ow), (h, w), 1, gy.strides, k, s, p, d, channels_last=True)
        result = _planes(out, wt, gy, g)
    elif kind == "weight":  # out = gw (O, C*kh*kw), a = g (N, O, OH, OW), b = x (N, C, H, W)
        gy, x = a, b
        n, o, oh, ow = gy.shape
        c, h, w = x.shape[1], x.shape[2], x.shape[3]
        want = [((o, c * kk), out.shape), ((x.shape[0], o, *window_output_size((h, w), k, s, p, d)), gy.shape)]
        pixels = n * oh * ow
        gathers = (
            gemm.Gather("planes", False, o, (oh, ow), (oh, ow), n, gy.strides),
            gemm.Gather("window", False, c, (h, w), (oh, ow), n, x.strides, k, s, p, d),
        )
        result = (out, _gathered(gy, (o, pixels), False), _gathered(x, (pixels, c * kk), False), gathers)
    else:
        raise ValueError(f"unknown convolution product {kind!r}; expected one of {KINDS}")
    bad = [f"{got} (expected {exp})" for exp, got in want if tuple(got) != exp]
    if bad:
        raise ValueError(f"convolution {kind}: shapes disagree: {', '.join(bad)}")
    if not out.is_contiguous():
        raise ValueError(f"convolution {kind}: the output must be contiguous, got strides {out.strides}")
    return result


def weight_rows(backend: Any, w4: View, swap: bool) -> tuple[View, Any]:
    """The weight (O, C, kh, kw) as the (rows, kh*kw*ch) matrix of the forward (rows O, channels C) or, ``swap``,
    of the input gradient (rows C, channels O), and the temporary storage to keep alive until the GEMM is recorded
    (None when the weight's own strides give the matrix)."""
    o, c, kh, kw = w4.shape
    s0, s1, s2, s3 = w4.strides
    rows, ch, srow, sch = (c, o, s1, s0) if swap else (o, c, s0, s1)
    shape, (strides,) = coalesce((kh, kw, ch), [(s2, s3, sch)])
    if len(shape) <= 1:  # (ky, kx, ch) is one stride of the weight already
        return View(w4.storage, (rows, kh * kw * ch), (srow, strides[0] if strides else 1), w4.offset), None
    tmp = backend.alloc(rows * kh * kw * ch, w4.dtype)
    backend.elementwise(
        "copy",
        View(tmp, (rows, kh, kw, ch), (kh * kw * ch, kw * ch, ch, 1), 0),
        [View(w4.storage, (rows, kh, kw, ch), (srow, s2, s3, sch), w4.offset)],
    )
    return View(tmp, (rows, kh * kw * ch), (kh * kw * ch, 1), 0), tmp


def encode_conv(
    backend: Any, kind: str, out: View, a: View, b: View, geometry: Geometry, bias: View | None = None
) -> bool:
    """Record one convolution product (see the module's notes and ``Backend.convolution``); False where it is left
    to the composition: an operand of a large tensor (cut into pieces there), negative strides, or nothing to
    compute. The forward's ``bias`` (O,) is added in the GEMM's epilogue."""
    views = (out, a, b) + ((bias,) if bias is not None else ())
    if any(isinstance(v.storage, LargeStorage) for v in views) or any(x < 0 for v in views for x in v.strides):
        return False
    if not all(v.numel for v in views):
        return False
    if kind == "input" and any(a.shape[1] % bk for bk in gemm.K_STEPS):
        return False  # whichever variant runs, its K tiles must each have one (ky, kx): gemm.Gather.masks_tiles
    keep = None
    if kind in ("forward", "input"):
        o, c = (out.shape[1], a.shape[1]) if kind == "forward" else (a.shape[1], out.shape[1])
        if len(b.shape) != 4 or b.shape != (o, c, *geometry[0]):
            raise ValueError(f"convolution {kind}: weight of shape {b.shape}, expected {(o, c, *geometry[0])}")
        b, keep = weight_rows(backend, b, kind == "input")
    o, ga, gb, gathers = problem(kind, out, a, b, geometry)
    later = None  # a strided bias: added after the GEMM (the epilogue reads a contiguous one)
    if bias is not None:
        if kind != "forward" or bias.shape != (out.shape[1],):
            raise ValueError(f"convolution {kind}: a bias of shape {bias.shape} (only the forward's, (O,))")
        if bias.strides != (1,) and bias.shape[0] > 1:
            later, bias = View(bias.storage, out.shape, (0, bias.strides[0], 0, 0), bias.offset), None
    key = ("conv", kind, geometry, *((v.dtype, v.shape, v.strides, v.offset % 4 == 0) for v in (o, ga, gb)))
    key += (gathers, bias is not None)
    gp = backend.plans.get(key)
    if gp is None:
        with backend.rt.paused():  # tuned and self-checked eagerly, never inside a capture
            gp = backend.plans[key] = tuner(backend).plan(o, ga, gb, gathers, bias)
    epilogue.record(backend, gp, o, ga, gb, bias)
    if later is not None:
        backend.elementwise("add", out, [out, later])
    del keep  # the pooled temporary returns on drop; the queue orders its reuse after the GEMM
    return True
