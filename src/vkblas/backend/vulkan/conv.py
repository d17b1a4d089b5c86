"""Recording a convolution as an implicit GEMM: the GEMM template (``gemm.py``) with one or both operands read
through the convolution's geometry (:class:`gemm.Gather`), so no im2col matrix is ever stored.

The three products of ``conv2d`` (stride, padding, dilation; groups 1), each a single GEMM plan:

* ``forward``: ``out[n] (O, OH*OW) = W (O, kh*kw*C) @ cols(x[n])``, batched over images through the GEMM's batch
  (the weight broadcast, the image's batch stride), written straight into the (N, O, OH, OW) output.
* ``input``: ``gx[n] (C, H*W) = Wt (C, kh*kw*O) @ tcols(g[n])``, the transposed convolution's columns of the output
  gradient (``Wt``: the weight with its two channel dims swapped).
* ``weight``: ``gw (O, C*kh*kw) = g (O, N*OH*OW) @ cols(x)^T``, K running over every pixel of every image
  (split-K by the tuner; a deterministic second pass sums the splits). Given the bias gradient's (O,) target,
  the same GEMM writes it: the row sums of its ``a``, the output gradient (``gemm.Spec.bias`` "sum_rows").

The forward and input products run their K (taps) channel-fastest, ``(ky, kx, c)`` (:class:`gemm.Gather`'s
``channels_last``). Their weight matrix is a plain strided view where the layouts coincide (one channel, 1x1
kernels). Otherwise it is either read in that order through the weight's own strides (the ``weights`` gather: no
copy, one dispatch less) or copied channels-last first (``WEIGHT_COPY_PIXELS``): every workgroup reads its rows of
the matrix, and through the gather those reads are scalar and 9 elements apart for a 3x3 kernel, which on an H200
cost the MNIST CNN's batch-512 step 69 µs of GPU time (2.7 %) against a copy of a few µs; at batch 128, where an
eager step is bound by its host, the dispatch the copy adds costs more than that.

A 3x3, stride-1 forward or input gradient may instead be computed by Winograd F(2x2, 3x3) (``winograd.py``): on a
layout's first call (shapes and strides) both are timed. Eager calls keep the faster with each charged at least its
dispatches' host time (``DISPATCH_HOST_S``); captured graphs, whose replays issue no dispatch from Python, the
faster on the GPU (``VERDICTS``). The choice goes into the tuner's cache file beside its GEMM picks, so a later
process neither times again nor tunes the implicit GEMM of a product that Winograd computes. An input gradient
with no implicit GEMM (channels not a multiple of the K steps) takes Winograd untimed, against the composition.
Under ``VKBLAS_AUTOTUNE=0`` nothing is timed: the implicit GEMM, where there is one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..base import View, contiguous_strides, window_output_size
from . import epilogue, gemm, winograd
from .autotune import tuner
from .kernels.wgsl import coalesce
from .memory import LargeStorage

KINDS = ("forward", "input", "weight")
Geometry = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]  # kernel, stride, pad, dil


#: an operand of the GEMM as a layout over one of the call's views (0: the output, 1: ``a``, 2: the weight matrix
#: or ``b``): (which, shape, strides); bound to that view's storage and offset per call (:func:`_bind`)
Template = tuple[int, tuple[int, ...], tuple[int, ...]]


def _bind(t: Template, views: tuple[View, View, View]) -> View:
    v = views[t[0]]
    return View(v.storage, t[1], t[2], v.offset)


def _gathered(which: int, v: View, shape: tuple[int, ...], batched: bool) -> Template:
    """The logical matrix of a gathered operand: the source's storage and offset, its image stride as the batch
    stride, no inner strides (the gather addresses the elements)."""
    return (which, shape, ((v.strides[0],) if batched else ()) + (0, 0))


def _planes(
    out: View, wmat: View, src: View, g: gemm.Gather, wg: gemm.Gather | None
) -> tuple[tuple[Template, ...], gemm.Gathers]:
    """``out[n] (ch, pixels) = wmat (ch, K) @ gathered (K, pixels)`` per image, as a batched GEMM (the weight
    broadcast). Measured on an H200 (MNIST CNN, 2026-12-01): the transposed product, pixels as the GEMM's rows and
    the output stored column-major, ran the 32->64 conv at 0.83 ms against this layout's 0.45 ms."""
    n, ch = out.shape[:2]
    pixels = out.shape[2] * out.shape[3]
    kdim = wmat.shape[1]
    templates = (
        (0, (n, ch, pixels), (ch * pixels, pixels, 1)),
        (2, (n, ch, kdim), (0, *wmat.strides)),
        _gathered(1, src, (n, kdim, pixels), True),
    )
    return templates, (wg, g)


def problem(
    kind: str, out: View, a: View, b: View, geometry: Geometry, wg: gemm.Gather | None = None
) -> tuple[tuple[Template, ...], gemm.Gathers]:
    """(templates of out, a, b, gathers) of the GEMM that computes ``kind`` (``b``: the weight matrix for the
    forward and the input gradient, read through the gather ``wg`` when given: then its strides are zeros);
    ValueError naming the shapes when they disagree."""
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
        result = _planes(out, w2, x, g, wg)
    elif kind == "input":  # out = gx (N, C, H, W), a = g (N, O, OH, OW), b = Wt (C, kh*kw*O)
        gy, wt = a, b
        n, o, oh, ow = gy.shape
        c, h, w = out.shape[1], out.shape[2], out.shape[3]
        want = [((out.shape[0], o, *window_output_size((h, w), k, s, p, d)), gy.shape), ((c, o * kk), wt.shape)]
        g = gemm.Gather("transposed", True, o, (oh, ow), (h, w), 1, gy.strides, k, s, p, d, channels_last=True)
        result = _planes(out, wt, gy, g, wg)
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
        templates = (
            (0, out.shape, out.strides),
            _gathered(1, gy, (o, pixels), False),
            _gathered(2, x, (pixels, c * kk), False),
        )
        result = (templates, gathers)
    else:
        raise ValueError(f"unknown convolution product {kind!r}; expected one of {KINDS}")
    bad = [f"{got} (expected {exp})" for exp, got in want if tuple(got) != exp]
    if bad:
        raise ValueError(f"convolution {kind}: shapes disagree: {', '.join(bad)}")
    if not out.is_contiguous():
        raise ValueError(f"convolution {kind}: the output must be contiguous, got strides {out.strides}")
    return result


#: output pixels of the batch (N*OH*OW) from which the forward and the input gradient copy their weight matrix
#: channels-last instead of reading it through the weight's strides (see the module's notes): the MNIST CNN's
#: convolutions at batch 512 (300k pixels) copy, at batch 128 (74k) and a ResNet 56x56 layer at batch 32 (100k;
#: its GPU time within 1 % either way on an H100) they do not
WEIGHT_COPY_PIXELS = 1 << 18


def _weight_axes(w4: View, swap: bool) -> tuple[int, int, int, int]:
    """(rows, channels, row stride, channel stride) of the weight (O, C, kh, kw) as the forward's matrix (rows O)
    or, ``swap``, the input gradient's (rows C)."""
    o, c = w4.shape[:2]
    s0, s1 = w4.strides[:2]
    return (c, o, s1, s0) if swap else (o, c, s0, s1)


def weight_matrix(w4: View, swap: bool) -> tuple[View, gemm.Gather | None]:
    """The weight (O, C, kh, kw) as the (rows, kh*kw*ch) matrix of the forward (rows O, channels C) or, ``swap``,
    of the input gradient (rows C, channels O), taps ``(ky, kx, ch)``: a strided view of the weight where its
    strides give the matrix (and None), else a view of zero strides over the weight's storage and the ``weights``
    gather that reads it."""
    kh, kw = w4.shape[2:]
    s2, s3 = w4.strides[2:]
    rows, ch, srow, sch = _weight_axes(w4, swap)
    shape, (strides,) = coalesce((kh, kw, ch), [(s2, s3, sch)])
    if len(shape) <= 1:  # (ky, kx, ch) is one stride of the weight already
        return View(w4.storage, (rows, kh * kw * ch), (srow, strides[0] if strides else 1), w4.offset), None
    g = gemm.Gather("weights", True, ch, (kh, kw), (kh, kw), rows, (srow, sch, s2, s3), (kh, kw), channels_last=True)
    return View(w4.storage, (rows, kh * kw * ch), (0, 0), w4.offset), g


def _copied_weight(w4: View, swap: bool) -> tuple[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (rows, kh*kw*ch) shape of :func:`weight_matrix`'s matrix, and the (shape, strides) of the weight's
    elements that fill a contiguous copy of it in order."""
    kh, kw = w4.shape[2:]
    s2, s3 = w4.strides[2:]
    rows, ch, srow, sch = _weight_axes(w4, swap)
    return (rows, kh * kw * ch), ((rows, kh, kw, ch), (srow, s2, s3, sch))


def _copy_weight(backend: Any, w4: View, copy: tuple[tuple[int, ...], tuple[int, ...]]) -> Any:
    """A pooled storage holding the weight's elements ``copy`` (:func:`_copied_weight`) in order (recorded)."""
    shape, strides = copy
    dst = backend.alloc(math.prod(shape), w4.dtype)
    src = View(w4.storage, shape, strides, w4.offset)
    backend.elementwise("copy", View(dst, shape, contiguous_strides(shape), 0), [src])
    return dst


@dataclass(frozen=True, slots=True)
class Recipe:
    """What recording one convolution product takes, made once per layout (shapes, strides, offset alignment) of
    the call's views: the tuned GEMM, where its operands lie in the call's views, and where the bias goes. Eager
    steps make the same calls every step; this keeps their host cost to binding views and recording (the layout
    work, a few µs a call, is done once)."""

    gp: Any
    templates: tuple[Template, ...]
    #: the weight's elements copied into a channels-last temporary per call (which the templates' weight matrix,
    #: contiguous, then lies over), or None
    copy: tuple[tuple[int, ...], tuple[int, ...]] | None
    #: "", "epilogue" (the forward's bias added, or the weight gradient's bias gradient written, by the GEMM) or
    #: "later" (a strided bias: added, or its gradient reduced, after the GEMM; the GEMM binds a dense one)
    bias: str
    #: the product by Winograd instead (``winograd.py``), where it applies and won the timing (``winograd.MODE``)
    winograd: winograd.Recipe | None = None


def _check(kind: str, out: View, a: View, w4: View, geometry: Geometry) -> None:
    """ValueError naming the shapes where a forward's or an input gradient's operands disagree (out (N, O, OH, OW) =
    conv(x (N, C, H, W), W (O, C, kh, kw)); gx (N, C, H, W) from g (N, O, OH, OW)), or its output is not
    contiguous: checked before either product, Winograd's or the implicit GEMM's, is chosen."""
    if kind not in ("forward", "input"):
        return
    k, s, p, d = geometry
    ranks = (len(out.shape), len(a.shape), len(w4.shape))
    if ranks != (4, 4, 4):
        raise ValueError(f"convolution {kind}: operands of ranks {ranks}, shapes {out.shape}, {a.shape}, {w4.shape}")
    x, y = (a, out) if kind == "forward" else (out, a)
    n, c, h, w = x.shape
    grid = window_output_size((h, w), k, s, p, d)
    name = "output" if kind == "forward" else "output gradient"
    want = [("weight", w4.shape, (w4.shape[0], c, *k)), (name, y.shape, (n, w4.shape[0], *grid))]
    bad = [f"{what} {tuple(got)} (expected {exp})" for what, got, exp in want if tuple(got) != exp]
    if bad:
        raise ValueError(f"convolution {kind}: shapes disagree with the input {x.shape}: {', '.join(bad)}")
    if not out.is_contiguous():
        raise ValueError(f"convolution {kind}: the output must be contiguous, got strides {out.strides}")


def _recipe(
    backend: Any, kind: str, out: View, a: View, b: View, geometry: Geometry, bias: View | None, capturing: bool
) -> Any:
    """The :class:`Recipe` of this call's layout, or False where it is left to the composition: negative strides,
    nothing to compute, an input gradient whose K tiles cannot each have one (ky, kx) (gemm.Gather.masks_tiles)
    and to which Winograd does not apply. ``capturing``: the recipe of a graph capture, where a dispatch costs its
    replays no host time (see :func:`_verdict`)."""
    views = (out, a, b) + ((bias,) if bias is not None else ())
    if any(x < 0 for v in views for x in v.strides) or not all(v.numel for v in views):
        return False
    _check(kind, out, a, b, geometry)
    wp = winograd.problem(backend, kind, out, a, b, geometry) if winograd.MODE != "never" else None
    if kind == "input" and any(a.shape[1] % bk for bk in gemm.K_STEPS):  # no implicit GEMM: Winograd or nothing
        if wp is None:
            return False
        with backend.rt.paused():
            return Recipe(None, (), None, "", winograd.recipe(backend, wp, out, a, b, None))
    mode = ""
    if bias is not None:
        o = out.shape[1] if kind == "forward" else out.shape[0]
        if kind == "input" or bias.shape != (o,):
            raise ValueError(
                f"convolution {kind}: a bias of shape {bias.shape} (the forward's bias or the weight gradient's "
                f"bias gradient, ({o},))"
            )
        mode = "later" if bias.strides != (1,) and bias.shape[0] > 1 else "epilogue"
        if mode == "later":
            wp = None
    tun = tuner(backend)
    choice = _choice_key(kind, out, a, b, geometry, bias, tun.enabled) if wp is not None else ""
    known = tun.table.get(choice) if wp is not None else None
    if wp is not None and (winograd.MODE == "always" or _takes_winograd(known, capturing)):
        # the implicit GEMM is not tuned for a layout that will not use it
        with backend.rt.paused():
            return Recipe(None, (), None, "", winograd.recipe(backend, wp, out, a, b, bias))
    wg, copy, w4 = None, None, b
    if kind in ("forward", "input"):
        b, wg = weight_matrix(b, kind == "input")  # over the weight's storage and offset, as the call's view
        grid = out if kind == "forward" else a  # (N, O, OH, OW): the output's grid of pixels
        if wg is not None and grid.numel // grid.shape[1] >= WEIGHT_COPY_PIXELS:
            shape, copy = _copied_weight(w4, kind == "input")
            # the tuner times on the call's operands: the copied weights, not a pooled buffer's leftovers, whose
            # infs and NaNs would time an input gradient's masked slow path
            with backend.rt.paused():
                b, wg = View(_copy_weight(backend, w4, copy), shape, (shape[1], 1), 0), None
    templates, gathers = problem(kind, out, a, b, geometry, wg)
    bound = tuple(_bind(t, (out, a, b)) for t in templates)
    key = ("conv", kind, geometry, *((v.dtype, v.shape, v.strides, v.offset % 4 == 0) for v in bound))
    key += (gathers, mode == "epilogue")
    gp = backend.plans.get(key)
    if gp is None:
        # the forward adds its bias to each row (channel) of the product; the weight gradient's GEMM, whose a is the
        # output gradient as (O, pixels), sums a's rows into the bias gradient
        axis = "rows" if kind == "forward" else "sum_rows"
        with backend.rt.paused():  # tuned and self-checked eagerly, never inside a capture
            gp = backend.plans[key] = tun.plan(*bound, gathers, bias if mode == "epilogue" else None, bias_on=axis)
    if wp is None or known in VERDICTS or tun.off:  # VKBLAS_AUTOTUNE=0: nothing is timed, the implicit GEMM's
        return Recipe(gp, templates, copy, mode)
    with backend.rt.paused():
        wr = winograd.recipe(backend, wp, out, a, w4, bias)
        implicit = partial(gemm.launches, backend, gp, *bound, bias if mode == "epilogue" else None)
        verdict = _verdict(backend, implicit, copy is not None, wr, (out, a, w4, bias))
    tun.remember(choice, verdict)
    if _takes_winograd(verdict, capturing):
        return Recipe(gp, templates, None, mode, wr)
    return Recipe(gp, templates, copy, mode)


def _choice_key(kind: str, out: View, a: View, w: View, geometry: Geometry, bias: View | None, tuned: bool) -> str:
    """The tuner's cache key of Winograd's timed choice for a product of these views' shapes and strides (a
    channels-last input is another layout, timed on its own), ``tuned``: against a tuned implicit GEMM or not."""
    views = "x".join(",".join(map(str, v.shape)) + ":" + ",".join(map(str, v.strides)) for v in (out, a, w))
    tail = ("bias" if bias is not None else "") + ("|tuned" if tuned else "|untuned")
    return f"winograd/v{winograd.VERSION}|{kind}|{geometry}|{views}|{tail}"


#: what a timed choice says (the tuner's cache file keeps it): Winograd for eager calls and graphs, Winograd only
#: in captured graphs (faster on the GPU, but its dispatches cost an eager call more host time than that), never
VERDICTS = ("winograd", "graphs", "implicit")


def _takes_winograd(verdict: str | None, capturing: bool) -> bool:
    return verdict == "winograd" or (verdict == "graphs" and capturing)


#: what issuing one dispatch costs an eager call's host. A product is charged the larger of its GPU time and its
#: dispatches' host time: an eager call bound by its host waits for the issuing, and Winograd is three dispatches
#: more a product. On an H200 (2026-12-06) the MNIST CNN's conv2 at batch 128, host-bound, ran 18 µs of GPU time
#: faster a product by Winograd but issued 0.126 ms more per forward+backward (eight more dispatches, ~16 µs each):
#: its eager time went from 0.88x to 1.30x cuDNN's, where the ResNet layer's products save ~0.1 ms each. A
#: replayed graph issues no dispatch from Python: there the GPU time alone decides
DISPATCH_HOST_S = 20e-6


def _verdict(
    backend: Any, implicit: Callable[[], list[Any]], copies: bool, wr: winograd.Recipe, views: tuple[Any, ...]
) -> str:
    """One of :data:`VERDICTS`: the better of two timings each on the call's operands decides for graphs; for eager
    calls each product is charged the larger of that and its dispatches' host time (``DISPATCH_HOST_S`` each)."""
    t = tuner(backend)
    gpu, eager = [], []
    for make, extra in ((implicit, copies), (partial(winograd.launches, backend, wr, *views), 0)):
        gpu.append(min(t.time_launches(make) for _ in range(2)))
        eager.append(max(gpu[-1], (len(make()) + extra) * DISPATCH_HOST_S))
    if eager[1] < eager[0]:
        return "winograd"
    return "graphs" if gpu[1] < gpu[0] else "implicit"


def encode_conv(
    backend: Any, kind: str, out: View, a: View, b: View, geometry: Geometry, bias: View | None = None
) -> bool:
    """Record one convolution product (see the module's notes and ``Backend.convolution``); False where it is left
    to the composition: an operand of a large tensor (cut into pieces there), negative strides, or nothing to
    compute. The forward's ``bias`` (O,) is added in the GEMM's epilogue."""
    if (
        a.storage.__class__ is LargeStorage
        or b.storage.__class__ is LargeStorage
        or out.storage.__class__ is LargeStorage
        or (bias is not None and bias.storage.__class__ is LargeStorage)
    ):
        return False
    key = (
        "conv-recipe",
        kind,
        geometry,
        out.dtype,
        out.shape,
        out.strides,
        out.offset & 3,
        a.shape,
        a.strides,
        a.offset & 3,
        b.shape,
        b.strides,
        b.offset & 3,
        None if bias is None else (bias.shape, bias.strides),
        backend.rt.recording is not None,  # a capture's recipe: Winograd where only the GPU time counts
    )
    r = backend.plans.get(key)
    if r is None:
        r = backend.plans[key] = _recipe(backend, kind, out, a, b, geometry, bias, key[-1])
    if r is False:
        return False
    if r.winograd is not None:
        winograd.record(backend, r.winograd, out, a, b, bias)
        return True
    keep = None
    if r.copy is not None:  # the templates' weight matrix lies over a fresh channels-last copy
        keep = _copy_weight(backend, b, r.copy)
        b = View(keep, (), (), 0)
    ops = (out, a, b)  # the templates place each operand over its view's storage and offset
    t0, t1, t2 = r.templates
    o, ga, gb = _bind(t0, ops), _bind(t1, ops), _bind(t2, ops)
    epilogue.record(backend, r.gp, o, ga, gb, bias if r.bias == "epilogue" else None)
    if r.bias == "later" and kind == "weight":  # a strided bias gradient: its own reduction
        backend.reduce("sum", bias, a, (0, 2, 3))
    elif r.bias == "later":
        later = View(bias.storage, out.shape, (0, bias.strides[0], 0, 0), bias.offset)  # type: ignore[union-attr]
        backend.elementwise("add", out, [out, later])
    del keep  # the pooled temporary returns on drop; the queue orders its reuse after the GEMM
    return True
