"""Convolution and pooling on the ``unfold`` (im2col) and ``fold`` (col2im) backend primitives.

* ``unfold`` / ``fold`` are differentiable ops and each other's backward (fold is unfold's adjoint).
* ``conv2d`` is one autograd node that saves only its input and weight, as PyTorch's does. Where the backend has
  the optional ``convolution`` primitive (Vulkan: implicit GEMM, no columns in memory), forward, input gradient and
  weight gradient are one call each (groups 1); otherwise, and for grouped convolutions, the batch goes through
  in chunks of images whose unfolded columns fit in ``COLUMN_BUDGET`` bytes: per chunk, unfold into a
  (C*kh*kw, n, L) layout (``L = OH*OW``), viewed as (groups, C/groups*kh*kw, n*L), so one matmul per group does the
  chunk: ``out = W @ cols``. Backward, per chunk: the columns are unfolded again for ``dW += g @ cols^T`` (the
  chunk's images folded into the GEMM's K dim, no per-image sum), and ``dcols = W^T @ g`` is folded into the
  chunk's slice of the input gradient (a gather: no atomics, deterministic). Holding the whole batch's columns
  for backward (and making them again for the input gradient) took the MNIST CNN's step at batch 512 to ~3x
  PyTorch's memory; the chunks bound that at the price of one more unfold per chunk in backward.
* ``max_pool2d`` saves the argmax only. Non-overlapping windows (stride = kernel, no padding) go through the
  backend's ``max_pool2d`` primitive where it has one (cpu, Vulkan); otherwise it unfolds with -inf padding and
  takes max/argmax over the window dim, and backward puts ``g`` at the argmax (a one-hot from ``eq`` against an
  arange over the window) and folds, both in chunks of images as conv2d's (their temporaries are window-sized).
* ``avg_pool2d`` unfolds with 0 padding and averages; backward is the fold of the broadcast ``g / count`` (the
  window-sized columns are a temporary of forward: the sum over the window saves nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..autograd import Node, is_grad_enabled, no_grad, record
from ..backend.base import Backend, View, window_output_size
from ..dtypes import int32
from ..tensor import Tensor, empty
from ._core import cast, elementwise, full, same_backend, write_into
from .autocast import lower
from .scan import flip_view

IntOr2 = int | Sequence[int]
Pair = tuple[int, int]


def _pair(v: IntOr2, name: str, op: str, minimum: int = 0) -> Pair:
    if type(v) is int and v >= minimum:  # the common cases first: every conv and pool call takes three
        return (v, v)
    if type(v) is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is int and min(v) >= minimum:
        return v
    t = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != 2 or not all(isinstance(n, (int, np.integer)) and n >= minimum for n in t):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or a pair of them, got {v!r}")
    return int(t[0]), int(t[1])


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:  # noqa: A002
    """Constant padding of the last ``len(pad) // 2`` dims; ``pad`` is ``(left, right, top, bottom, ...)`` from the
    last dim backwards, as in ``torch.nn.functional.pad``. Differentiable."""
    if mode != "constant":
        raise NotImplementedError(f"pad: only mode='constant' is supported, got {mode!r}")
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: expected an even number of pad sizes, at most 2 per dim of {input.shape}, got {pad}")
    if any(p < 0 for p in pad):
        raise NotImplementedError(f"pad: negative padding (cropping) is not supported, got {pad}")
    shape = list(input.shape)
    inner = [slice(None)] * input.ndim
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        inner[d] = slice(lo, lo + shape[d])
        shape[d] += lo + hi
    if shape == list(input.shape):
        return input
    out = full(tuple(shape), value, input.dtype, input._backend)
    write_into(out[tuple(inner)], "copy", input)
    out._view.storage.version = 0
    return record(out, "PadBackward", (input,), lambda n, g: (g[tuple(inner)],))


# ---------------------------------------------------------------------------------------------- unfold / fold
def _out_hw(op: str, shape: tuple[int, ...], k: Pair, s: Pair, p: Pair, d: Pair) -> Pair:
    try:
        return window_output_size(shape[-2:], k, s, p, d)
    except ValueError:
        raise ValueError(
            f"{op}: input of shape {shape} (padding {p}) is smaller than the kernel {k} with dilation {d}"
        ) from None


def _unfold(x: Tensor, k: Pair, s: Pair, p: Pair, d: Pair, value: float, op: str) -> Tensor:
    """(N, C, H, W) -> (N, C*kh*kw, L) windows, padded with ``value``; differentiable (backward: fold)."""
    n, c, h, w = x.shape
    oh, ow = _out_hw(op, x.shape, k, s, p, d)
    out = empty((n, c * k[0] * k[1], oh * ow), x.dtype, x._backend)
    if out.numel():
        x._backend.unfold(out._view, x._view, k, s, p, d, value)
    return record(out, "UnfoldBackward", (x,), lambda node, g: (_fold(g, (h, w), k, s, p, d, op),))


def _fold(cols: Tensor, hw: Pair, k: Pair, s: Pair, p: Pair, d: Pair, op: str) -> Tensor:
    """(N, C*kh*kw, L) -> (N, C, H, W), summing overlapping windows; differentiable (backward: unfold)."""
    n, rows, length = cols.shape
    kk = k[0] * k[1]
    oh, ow = _out_hw(op, (n, 1, *hw), k, s, p, d)
    if rows % kk or length != oh * ow:
        raise ValueError(
            f"{op}: input of shape {cols.shape} does not match kernel {k} and output size {hw}: expected "
            f"(N, C*{kk}, {oh * ow})"
        )
    out = empty((n, rows // kk, *hw), cols.dtype, cols._backend)
    if out.numel():
        cols._backend.fold(out._view, cols._view, k, s, p, d)
    return record(out, "FoldBackward", (cols,), lambda node, g: (_unfold(g, k, s, p, d, 0.0, op),))


def _batched(input: Tensor, op: str, rank: int = 4) -> tuple[Tensor, bool]:
    if input.ndim == rank - 1:
        return input.unsqueeze(0), True
    if input.ndim != rank:
        what = "3-D (C, H, W) or 4-D (N, C, H, W)" if rank == 4 else "2-D (C*kh*kw, L) or 3-D (N, C*kh*kw, L)"
        raise ValueError(f"{op}: expected a {what} input, got shape {input.shape}")
    return input, False


def unfold(
    input: Tensor,  # noqa: A002
    kernel_size: IntOr2,
    dilation: IntOr2 = 1,
    padding: IntOr2 = 0,
    stride: IntOr2 = 1,
) -> Tensor:
    """im2col as ``torch.nn.functional.unfold``: (N, C, H, W) -> (N, C*kh*kw, L)."""
    x, unbatched = _batched(input, "unfold")
    out = _unfold(
        x,
        _pair(kernel_size, "kernel_size", "unfold", 1),
        _pair(stride, "stride", "unfold", 1),
        _pair(padding, "padding", "unfold"),
        _pair(dilation, "dilation", "unfold", 1),
        0.0,
        "unfold",
    )
    return out.squeeze(0) if unbatched else out


def fold(
    input: Tensor,  # noqa: A002
    output_size: IntOr2,
    kernel_size: IntOr2,
    dilation: IntOr2 = 1,
    padding: IntOr2 = 0,
    stride: IntOr2 = 1,
) -> Tensor:
    """col2im as ``torch.nn.functional.fold``: (N, C*kh*kw, L) -> (N, C, H, W), overlapping entries summed."""
    x, unbatched = _batched(input, "fold", rank=3)
    out = _fold(
        x,
        _pair(output_size, "output_size", "fold", 1),
        _pair(kernel_size, "kernel_size", "fold", 1),
        _pair(stride, "stride", "fold", 1),
        _pair(padding, "padding", "fold"),
        _pair(dilation, "dilation", "fold", 1),
        "fold",
    )
    return out.squeeze(0) if unbatched else out


# ---------------------------------------------------------------------------------------------- conv2d
def _conv_padding(padding: IntOr2 | str, kernel: Pair, dilation: Pair, stride: Pair) -> tuple[int, int, int, int]:
    """(left, right, top, bottom); 'same' puts the odd extra pixel on the right/bottom, like PyTorch."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        if stride != (1, 1):
            raise ValueError(f"conv2d: padding='same' is not supported for strided convolutions (stride {stride})")
        th, tw = (d * (k - 1) for k, d in zip(kernel, dilation, strict=True))
        return (tw // 2, tw - tw // 2, th // 2, th - th // 2)
    if isinstance(padding, str):
        raise ValueError(f"conv2d: padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
    ph, pw = _pair(padding, "padding", "conv2d")
    return (pw, pw, ph, ph)


def conv2d(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOr2 = 1,
    padding: IntOr2 | str = 0,
    dilation: IntOr2 = 1,
    groups: int = 1,
) -> Tensor:
    """2-D cross-correlation, ``torch.nn.functional.conv2d``: input (N, C, H, W) or (C, H, W), weight
    (O, C/groups, kh, kw), optional bias (O,)."""
    input, weight, bias = lower("conv2d", input, weight, bias)  # noqa: A001 - under autocast: float16
    x, unbatched = _batched(input, "conv2d")
    same_backend("conv2d", [x, weight] + ([bias] if bias is not None else []))
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D (out_channels, in_channels/groups, kh, kw), got {weight.shape}")
    o, cg, kh, kw = weight.shape
    n, c = x.shape[:2]
    if groups < 1 or c % groups or o % groups:
        raise ValueError(f"conv2d: groups={groups} must divide in_channels={c} and out_channels={o}")
    if c // groups != cg:
        raise ValueError(
            f"conv2d: expected input with {cg * groups} channels (weight {weight.shape}, groups "
            f"{groups}), got input of shape {input.shape}"
        )
    if bias is not None and bias.shape != (o,):
        raise ValueError(f"conv2d: bias must have shape ({o},), got {bias.shape}")
    s = _pair(stride, "stride", "conv2d", 1)
    d = _pair(dilation, "dilation", "conv2d", 1)
    left, right, top, bottom = _conv_padding(padding, (kh, kw), d, s)
    if (left, top) != (right, bottom):  # 'same' with an even dilated extent: the primitive pads symmetrically
        x = pad(x, (0, right - left, 0, bottom - top))
    return _conv2d_node(x, weight, bias, s, (top, left), d, groups, unbatched)


#: the most bytes of window columns (im2col) an op holds at once: conv2d and max_pool2d's composition go through
#: the batch in chunks of whole images that fit (one image at least). Measured on the MNIST CNN at batch 512
#: (benchmarks/speed.py --memory, cpu): up to 40 MiB its step peaks at 263 MiB, under PyTorch's 275; 48 MiB gave
#: 267, 64 MiB 303. At 32 MiB its second conv's chunks are 50 images (GEMMs of N = 28,800 columns, still large
#: tiles on a GPU). Tests set it tiny to check that chunks change nothing.
COLUMN_BUDGET = 32 * 2**20


def _chunks(n: int, per_image: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of images whose columns (``per_image`` bytes each) fit in ``COLUMN_BUDGET``."""
    step = max(1, COLUMN_BUDGET // max(per_image, 1))
    return [(i, min(n, i + step)) for i in range(0, n, step)]


#: max-pooling's composition holds about this many window-sized tensors at once (the windows, the NaN rule's int32
#: mask and its reversed argmax in forward; the one-hot mask and the gradient's windows in backward)
_POOL_TEMPORARIES = 3


def _images(t: Tensor, i0: int, i1: int) -> Tensor:
    """Images [i0, i1) of a batch (``t`` itself for the whole batch)."""
    return t if (i0, i1) == (0, t.shape[0]) else t[i0:i1]


def _columns(x: Tensor, k: Pair, s: Pair, p: Pair, d: Pair, groups: int) -> Tensor:
    """x's unfold, stored (C*kh*kw, N, L) and viewed as one (C/groups*kh*kw, N*L) matrix per group (no autograd)."""
    n, c = x.shape[:2]
    oh, ow = _out_hw("conv2d", x.shape, k, s, p, d)
    rows = c * k[0] * k[1]
    cols = empty((rows, n, oh * ow), x.dtype, x._backend)
    if cols.numel():
        x._backend.unfold(cols.permute(1, 0, 2)._view, x._view, k, s, p, d, 0.0)
    return cols.reshape(groups, rows // groups, n * oh * ow)


def _conv2d_node(
    x: Tensor, weight: Tensor, bias: Tensor | None, s: Pair, p: Pair, d: Pair, groups: int, unbatched: bool
) -> Tensor:
    """The convolution of a batched, symmetrically padded problem: the backend's ``convolution`` primitive where it
    has one (implicit GEMM, no columns in memory), else chunked over images (see the module's notes)."""
    o, cg, kh, kw = weight.shape
    k = (kh, kw)
    n, c = x.shape[:2]
    ho, wo = _out_hw("conv2d", x.shape, k, s, p, d)
    length = ho * wo
    be = x._backend
    # a chunk's columns, and its GEMM result (forward) or gradient copy (backward) beside them, fit the budget
    chunks = _chunks(n, max(c * kh * kw, o) * length * x.dtype.itemsize)

    def direct(kind: str, out: Tensor, a: Tensor, b: Tensor, bias: Tensor | None = None) -> bool:
        return be.convolution(kind, out._view, a._view, b._view, k, s, p, d, None if bias is None else bias._view)

    fast = groups == 1  # the primitive's products are groups-1 GEMMs
    with no_grad():
        out = empty((n, o, ho, wo), x.dtype, be)
        if not (fast and direct("forward", out, x, weight, bias)):
            wm = weight.reshape(groups, o // groups, cg * kh * kw)
            for i0, i1 in chunks:
                cols = _columns(_images(x, i0, i1), k, s, p, d, groups)  # (groups, C/groups*kh*kw, n*L)
                if length >= PER_IMAGE_GEMM_PIXELS and cols.shape[1]:
                    _per_image_products(_images(out, i0, i1), wm, cols, bias)
                    continue
                prod = wm.matmul(cols).reshape(o, i1 - i0, ho, wo).permute(1, 0, 2, 3)  # (n, O, OH, OW), strided
                # the bias add (or a copy) writes the chunk into the contiguous result, as PyTorch's is
                if bias is not None:
                    write_into(_images(out, i0, i1), "add", prod, bias.reshape(1, o, 1, 1))
                else:
                    write_into(_images(out, i0, i1), "copy", prod)
        out._view.storage.version = 0

    def rule(node: Node, g: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        xs, ws = node.saved
        need_x, need_w, need_b = node.needs
        gx = empty(xs.shape, g.dtype, g._backend) if need_x else None
        gw = empty((o, cg * kh * kw), g.dtype, g._backend) if need_w else None
        gb = empty((o,), g.dtype, g._backend) if need_b and need_w else None
        # the bias gradient, where the primitive takes it, written by the weight gradient's GEMM (no reduction)
        w_done = gw is not None and fast and direct("weight", gw, g, xs, gb)
        w_left = gw is not None and not w_done
        if need_b and not w_done:
            gb = g.sum(dim=(0, 2, 3))
        # the input gradient last: the op that uses it next (a ReLU's mask) can then join its GEMM's epilogue
        x_left = gx is not None and not (fast and direct("input", gx, g, ws))
        if x_left or w_left:
            part = _conv2d_backward_chunks(g, xs, ws, gx if x_left else None, w_left, chunks, k, s, p, d, groups)
            gw = part if w_left else gw
        return gx, None if gw is None else gw.reshape(ws.shape), gb

    out = record(out, "ConvolutionBackward", (x, weight, bias), rule, (x, weight))
    return out.squeeze(0) if unbatched else out


#: output pixels per image from which the composition's forward multiplies image by image, straight into the
#: (N, O, OH, OW) result, instead of one GEMM over the chunk and a transposing copy (the bias add) after it. The
#: cpu backend (AMD EPYC, one thread) on the MNIST CNN's layers: 28x28 pixels with 9 taps 3.9 -> 1.2 ms, 14x14 with
#: 288 taps 12.9 -> 12.3 ms, a ResNet 56x56 layer 99 -> 94 ms; at 7x7 and 4x4 pixels the one GEMM stays faster
#: (5.6 against 6.5 ms, 3.7 against 4.3)
PER_IMAGE_GEMM_PIXELS = 128


def _per_image_products(out: Tensor, wm: Tensor, cols: Tensor, bias: Tensor | None) -> None:
    """``out[n] (groups, O/groups, L) = wm (groups, O/groups, K) @ cols[:, :, n]`` for each image of the chunk, as
    one batched matmul over strides (the weight broadcast), then the bias added in place."""
    n, o, ho, wo = out.shape
    groups, kdim = wm.shape[0], wm.shape[2]
    length = ho * wo
    og = o // groups
    ov = View(out._view.storage, (n, groups, og, length), (o * length, og * length, length, 1), out._view.offset)
    # cols' storage is (groups * K, n, L): image n's (K, L) matrix of group g has row stride n * L
    cv = cols._view
    bv = View(cv.storage, (n, groups, kdim, length), (length, kdim * n * length, n * length, 1), cv.offset)
    w = wm._view
    av = View(w.storage, (n, groups, og, kdim), (0, *w.strides), w.offset)
    out._backend.matmul(ov, av, bv)
    if bias is not None:
        write_into(out, "add", out, bias.reshape(1, o, 1, 1))


def _conv2d_backward_chunks(
    g: Tensor,
    xs: Tensor,
    ws: Tensor,
    gx: Tensor | None,
    want_w: bool,
    chunks: list[tuple[int, int]],
    k: Pair,
    s: Pair,
    p: Pair,
    d: Pair,
    groups: int,
) -> Tensor | None:
    """The composition's backward, chunk by chunk: folds the input gradient into ``gx`` (when given) and returns
    the weight gradient as (groups, O/groups, C/groups*kh*kw) (when ``want_w``)."""
    o, cg, kh, kw = ws.shape
    c, length = xs.shape[1], g.shape[2] * g.shape[3]
    wg = ws.reshape(groups, o // groups, cg * kh * kw)
    gw = None
    for i0, i1 in chunks:
        nb = i1 - i0
        gm = _images(g, i0, i1).permute(1, 0, 2, 3).reshape(groups, o // groups, nb * length)  # a copy
        if want_w:
            # as (cols @ gm^T)^T: the long K (every pixel) then runs down both operands' rows, which OpenBLAS
            # multiplies ~10 % faster than gm @ cols^T (the MNIST CNN's 64 x 28800 x 288 weight gradient, one
            # thread of an AMD EPYC: 14.8 -> 13.2 ms)
            part = _columns(_images(xs, i0, i1), k, s, p, d, groups).matmul(gm.mT).mT
            gw = part if gw is None else write_into(gw, "add", gw, part)
        if gx is not None and gx.numel():
            cols = wg.mT.matmul(gm).reshape(c * kh * kw, nb, length).permute(1, 0, 2)  # (n, C*kh*kw, L)
            g._backend.fold(_images(gx, i0, i1)._view, cols._view, k, s, p, d)
    if want_w and gw is None:  # an empty batch
        gw = full((o, cg * kh * kw), 0.0, ws.dtype, ws._backend)
    return gw


# ---------------------------------------------------------------------------------------------- pooling
def _pool_args(op: str, kernel_size: IntOr2, stride: IntOr2 | None, padding: IntOr2) -> tuple[Pair, Pair, Pair]:
    k = _pair(kernel_size, "kernel_size", op, 1)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _pair(stride, "stride", op, 1)
    p = _pair(padding, "padding", op)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{op}: padding {p} should be at most half of the kernel size {k}")
    return k, s, p


def _pool_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size: with ``ceil_mode`` a last partial window, unless it would start in the
    right padding."""
    span = d * (k - 1) + 1
    if n + 2 * p < span:
        raise ValueError(f"pooling: input of size {n} (padded {n + 2 * p}) is smaller than the kernel {span}")
    out = (n + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_input(
    x: Tensor, k: Pair, s: Pair, p: Pair, d: Pair, ceil_mode: bool, fill: float, op: str
) -> tuple[Tensor, Pair, tuple[int, int]]:
    """(input to unfold, its symmetric padding, (OH, OW)): with ``ceil_mode``, the partial last windows come from
    extra bottom/right padding of ``fill`` (a copy), the rest from the primitive's own padding."""
    h, w = x.shape[-2:]
    if not ceil_mode and p == (0, 0) and d == (1, 1) and h >= k[0] and w >= k[1]:  # _pool_size, written out
        return x, p, ((h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
    oh, ow = (_pool_size(n, k_, s_, p_, d_, ceil_mode) for n, k_, s_, p_, d_ in zip((h, w), k, s, p, d, strict=True))
    extra = [
        max(0, (o - 1) * s_ + d_ * (k_ - 1) + 1 - (n + 2 * p_))
        for o, n, k_, s_, p_, d_ in zip((oh, ow), (h, w), k, s, p, d, strict=True)
    ]
    if not any(extra):
        return x, p, (oh, ow)
    padded = pad(x, (p[1], p[1] + extra[1], p[0], p[0] + extra[0]), value=fill)
    return padded, (0, 0), (oh, ow)


_TAPS: dict[tuple[Backend, int], Tensor] = {}


def _taps(backend: Backend, kk: int) -> Tensor:
    """int32 arange(kk) shaped (1, 1, kk, 1) on ``backend``, cached (uploaded once per window size)."""
    t = _TAPS.get((backend, kk))
    if t is None:
        view = View(backend.from_numpy(np.arange(kk, dtype=np.int32), int32), (1, 1, kk, 1), (kk, kk, 1, 1), 0)
        t = _TAPS[(backend, kk)] = Tensor._make(view, backend)
    return t


@lru_cache(maxsize=64)
def _window_origins(w: int, k: Pair, s: Pair, p: Pair, d: Pair, oh: int, ow: int) -> tuple[np.ndarray, np.ndarray]:
    """For ``return_indices``: the flat input index (y * W + x) of each window's first tap (1, 1, 1, OH*OW), and
    each tap's offset from it (1, 1, kh*kw, 1)."""
    y0 = np.arange(oh) * s[0] - p[0]
    x0 = np.arange(ow) * s[1] - p[1]
    origin = (y0[:, None] * w + x0[None, :]).reshape(1, 1, 1, oh * ow)
    taps = (np.arange(k[0])[:, None] * d[0] * w + np.arange(k[1])[None, :] * d[1]).reshape(1, 1, -1, 1)
    return origin.astype(np.int32), taps.astype(np.int32)


def max_pool2d(
    input: Tensor,  # noqa: A002
    kernel_size: IntOr2,
    stride: IntOr2 | None = None,
    padding: IntOr2 = 0,
    dilation: IntOr2 = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Max over each window (padding counts as -inf); the gradient goes to the first maximum of each window (its
    last NaN where it has one, as in PyTorch).
    ``return_indices`` also gives, per output, the int32 index of its maximum in the flattened (H*W) input plane."""
    k, s, p = _pool_args("max_pool2d", kernel_size, stride, padding)
    d = _pair(dilation, "dilation", "max_pool2d", 1)
    x, unbatched = _batched(input, "max_pool2d")
    n, c, h, w = x.shape
    kk = k[0] * k[1]
    lowest = -math.inf if x.dtype.is_floating else float(np.iinfo(x.dtype.np).min)  # padding never wins the max
    needs_grad = is_grad_enabled() and x.requires_grad
    with no_grad():
        src, sp, (oh, ow) = _pool_input(x, k, s, p, d, ceil_mode, lowest, "max_pool2d")
        fused = None
        if (needs_grad or return_indices) and s == k and sp == (0, 0) and d == (1, 1) and src is x:
            fused = _fused_max_pool(x, k, oh, ow)  # the backend's one-pass primitive, where it has one
        if fused is not None:  # (N, C, OH, OW) both
            out, indices = fused
        else:  # (N, C, 1, OH*OW) both
            values, indices = _max_pool_windows(src, k, s, sp, d, lowest, oh * ow, needs_grad or return_indices)
            out = values.reshape(n, c, oh, ow)
    if needs_grad:
        ph, pw = src.shape[-2:]

        def rule(node: Node, g: Tensor) -> tuple[Tensor]:
            if fused is not None:  # the backend's primitive put the forward through: its backward may too
                grad = empty((n, c, h, w), g.dtype, g._backend)
                if g._backend.max_pool2d_backward(grad._view, g._view, indices._view, k):
                    return (grad,)
            # g at the argmax of each window (a one-hot over the window dim), then summed back onto the image; in
            # chunks of images, as forward's windows
            grad = empty((n, c, ph, pw), g.dtype, g._backend)
            g4, taps = g.reshape(n, c, 1, oh * ow), _taps(g._backend, kk)
            i4 = indices.reshape(n, c, 1, oh * ow)
            for i0, i1 in _chunks(n, _POOL_TEMPORARIES * c * kk * oh * ow * g.dtype.itemsize) if grad.numel() else ():
                hot = elementwise("eq", _images(i4, i0, i1), taps)
                cols_g = elementwise("where", hot, _images(g4, i0, i1), 0.0).reshape(i1 - i0, c * kk, oh * ow)
                g._backend.fold(_images(grad, i0, i1)._view, cols_g._view, k, s, sp, d)
            return (grad[..., p[0] : p[0] + h, p[1] : p[1] + w] if (ph, pw) != (h, w) else grad,)

        out = record(out, "MaxPool2DBackward", (x,), rule)
    out = out.squeeze(0) if unbatched else out
    if not return_indices:
        return out
    origin, taps = (x.new_tensor(a, int32) for a in _window_origins(w, k, s, p, d, oh, ow))
    flat = elementwise("add", origin, _take_taps(taps, indices.reshape(n, c, 1, oh * ow))).reshape(n, c, oh, ow)
    return out, flat.squeeze(0) if unbatched else flat


def _max_pool_windows(
    src: Tensor, k: Pair, s: Pair, p: Pair, d: Pair, lowest: float, length: int, argmax: bool
) -> tuple[Tensor, Tensor | None]:
    """(values, indices or None) as (N, C, 1, L) by the composition: unfold with ``lowest`` padding, then max (and
    argmax, with PyTorch's NaN rule) over the window dim, in chunks of images whose temporaries fit
    ``COLUMN_BUDGET``."""
    n, c = src.shape[:2]
    kk = k[0] * k[1]
    chunks = _chunks(n, _POOL_TEMPORARIES * c * kk * length * src.dtype.itemsize)
    values = indices = None
    if len(chunks) != 1:  # several chunks, or none (an empty batch)
        values = empty((n, c, 1, length), src.dtype, src._backend)
        indices = empty((n, c, 1, length), int32, src._backend) if argmax else None
    for i0, i1 in chunks:
        windows = _unfold(_images(src, i0, i1), k, s, p, d, lowest, "max_pool2d").reshape(i1 - i0, c, kk, length)
        if argmax:
            v, i = windows.max(dim=2, keepdim=True)
            i = _last_nan(windows, v, i, kk)
        else:  # inference: no argmax pass
            v, i = windows.amax(dim=2, keepdim=True), None
        if values is None:  # one chunk: its results are the results
            values, indices = v, i
            continue
        write_into(values[i0:i1], "copy", v)
        if indices is not None:
            write_into(indices[i0:i1], "copy", i)
    return values, indices


def _fused_max_pool(x: Tensor, k: Pair, oh: int, ow: int) -> tuple[Tensor, Tensor] | None:
    """(values, indices) as (N, C, OH, OW) from ``Backend.max_pool2d`` over the non-overlapping windows of ``x``, or
    ``None`` where the backend leaves it to the composition."""
    n, c = x.shape[:2]
    values = empty((n, c, oh, ow), x.dtype, x._backend)
    indices = empty((n, c, oh, ow), int32, x._backend)
    if not values.numel() or not x._backend.max_pool2d(values._view, indices._view, x._view, k):
        return None
    return values, indices


def _last_nan(windows: Tensor, values: Tensor, first: Tensor, kk: int) -> Tensor:
    """PyTorch's max-pooling index: the first maximum of a window (``first``), but its *last* NaN where it holds one
    (PyTorch's kernels take every NaN they meet)."""
    if not windows.dtype.is_floating:
        return first
    nan = cast(elementwise("ne", windows, windows), int32)
    backwards = Tensor._make(flip_view(nan._view, 2), nan._backend)  # the window dim walked from its end
    last = elementwise("sub", kk - 1, backwards.argmax(dim=2, keepdim=True))
    return elementwise("where", elementwise("ne", values, values), last, first)


def _take_taps(taps: Tensor, indices: Tensor) -> Tensor:
    """``taps[indices]`` for the (N, C, 1, L) argmax of each window over the (1, 1, kk, 1) tap offsets."""
    return taps.reshape(-1).index_select(0, indices.reshape(-1)).reshape(indices.shape)


@lru_cache(maxsize=64)
def _pool_divisors(h: int, w: int, k: Pair, s: Pair, p: Pair, oh: int, ow: int, include_pad: bool) -> np.ndarray:
    """Each window's divisor, as PyTorch counts it: the window clipped to the padded input (``include_pad``) or
    to the input itself; a ceil-mode window that runs past the padding counts only what it covers."""

    def axis(n: int, kk: int, ss: int, pp: int, o: int) -> np.ndarray:
        starts = np.arange(o) * ss - pp
        ends = np.minimum(starts + kk, n + pp)
        if include_pad:
            return ends - starts
        return np.minimum(ends, n) - np.maximum(starts, 0)

    return np.outer(axis(h, k[0], s[0], p[0], oh), axis(w, k[1], s[1], p[1], ow)).reshape(-1)


def avg_pool2d(
    input: Tensor,  # noqa: A002
    kernel_size: IntOr2,
    stride: IntOr2 | None = None,
    padding: IntOr2 = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over each window; ``count_include_pad=False`` divides by the real pixels only."""
    k, s, p = _pool_args("avg_pool2d", kernel_size, stride, padding)
    x, unbatched = _batched(input, "avg_pool2d")
    n, c, h, w = x.shape
    src, sp, (oh, ow) = _pool_input(x, k, s, p, (1, 1), ceil_mode, 0.0, "avg_pool2d")
    cols = _unfold(src, k, s, sp, (1, 1), 0.0, "avg_pool2d")
    total = cols.reshape(n, c, k[0] * k[1], oh * ow).sum(dim=2)  # backward: fold of g broadcast over the window
    divisors = _pool_divisors(h, w, k, s, p, oh, ow, count_include_pad)
    if divisor_override is not None:
        out = total * (1.0 / divisor_override)
    elif (divisors == k[0] * k[1]).all():
        out = total * (1.0 / (k[0] * k[1]))
    else:
        out = total / x.new_tensor(divisors.astype(np.float64))
    out = out.reshape(n, c, oh, ow)
    return out.squeeze(0) if unbatched else out
