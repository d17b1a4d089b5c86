"""Convolution and pooling, composed from existing primitives so they run (and differentiate) on every backend.

``unfold`` (im2col) is a constant pad followed by one ``gather`` with a host-precomputed int32 index, cached per
shape and device; ``conv2d`` is unfold + ``matmul`` (groups as a batch dim); ``max_pool2d`` is unfold + ``max`` over
the window; ``avg_pool2d`` is unfold + ``sum`` / count. Backward flows through gather's scatter-add, so no rule is
written here except ``pad``'s. Dedicated kernels can later replace these behind the same signatures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..autograd import record
from ..backend.base import Backend
from ..dtypes import int32
from ..tensor import Tensor
from ._core import full, same_backend, write_into
from .indexing import take_along

IntOr2 = int | Sequence[int]


def _pair(v: IntOr2, name: str, op: str, minimum: int = 0) -> tuple[int, int]:
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


def _out_size(n: int, k: int, s: int, d: int, op: str, shape: tuple[int, ...]) -> int:
    span = d * (k - 1) + 1
    if n < span:
        raise ValueError(f"{op}: input of shape {shape} is smaller than the (dilated) kernel: padded size {n} < {span}")
    return (n - span) // s + 1


@lru_cache(maxsize=256)
def _unfold_index_host(hp: int, wp: int, kernel: tuple[int, int], stride: tuple[int, int],
                       dilation: tuple[int, int]) -> tuple[np.ndarray, int, int]:
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    ho = _out_size(hp, kh, sh, dh, "unfold", (hp, wp))
    wo = _out_size(wp, kw, sw, dw, "unfold", (hp, wp))
    rows = (np.arange(kh)[:, None, None, None] * dh + np.arange(ho)[None, None, :, None] * sh)
    cols = (np.arange(kw)[None, :, None, None] * dw + np.arange(wo)[None, None, None, :] * sw)
    return (rows * wp + cols).astype(np.int32).reshape(-1), ho, wo


_DEVICE_INDEX: dict[tuple[int, tuple], Tensor] = {}


def _unfold_index(backend: Backend, key: tuple) -> tuple[Tensor, int, int]:
    host, ho, wo = _unfold_index_host(*key)
    idx = _DEVICE_INDEX.get((id(backend), key))
    if idx is None:
        from ..creation import tensor
        from ..device import of_backend

        if len(_DEVICE_INDEX) > 256:
            _DEVICE_INDEX.clear()
        idx = _DEVICE_INDEX[(id(backend), key)] = tensor(host, dtype=int32, device=of_backend(backend))
    return idx, ho, wo


def _windows(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int, int, int],
             dilation: tuple[int, int], value: float, op: str) -> tuple[Tensor, int, int]:
    """(N, C, H, W) -> (N, C, kh*kw, Ho*Wo): every window, padded with ``value``."""
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape {x.shape}")
    xp = pad(x, padding, value=value)
    n, c, hp, wp = xp.shape
    for size, k, d, dim in ((hp, kernel[0], dilation[0], "height"), (wp, kernel[1], dilation[1], "width")):
        if size < d * (k - 1) + 1:
            raise ValueError(f"{op}: input of shape {x.shape} (padded {dim} {size}) is smaller than the kernel "
                             f"{kernel} with dilation {dilation}")
    idx, ho, wo = _unfold_index(x._backend, (hp, wp, kernel, stride, dilation))
    cols = take_along(xp.reshape(n, c, hp * wp), 2, idx)
    return cols.reshape(n, c, kernel[0] * kernel[1], ho * wo), ho, wo


def _batched(input: Tensor, op: str) -> tuple[Tensor, bool]:
    if input.ndim == 3:
        return input.unsqueeze(0), True
    if input.ndim != 4:
        raise ValueError(f"{op}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape {input.shape}")
    return input, False


def unfold(input: Tensor, kernel_size: IntOr2, dilation: IntOr2 = 1, padding: IntOr2 = 0,  # noqa: A002
           stride: IntOr2 = 1) -> Tensor:
    """im2col as ``torch.nn.functional.unfold``: (N, C, H, W) -> (N, C*kh*kw, L)."""
    k = _pair(kernel_size, "kernel_size", "unfold", 1)
    p = _pair(padding, "padding", "unfold")
    cols, _, _ = _windows(input, k, _pair(stride, "stride", "unfold", 1), (p[1], p[1], p[0], p[0]),
                          _pair(dilation, "dilation", "unfold", 1), 0.0, "unfold")
    n, c, kk, ll = cols.shape
    return cols.reshape(n, c * kk, ll)


def _conv_padding(padding: IntOr2 | str, kernel: tuple[int, int], dilation: tuple[int, int],
                  stride: tuple[int, int]) -> tuple[int, int, int, int]:
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


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOr2 = 1,  # noqa: A002
           padding: IntOr2 | str = 0, dilation: IntOr2 = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, ``torch.nn.functional.conv2d``: input (N, C, H, W) or (C, H, W), weight
    (O, C/groups, kh, kw), optional bias (O,)."""
    x, unbatched = _batched(input, "conv2d")
    same_backend("conv2d", [x, weight] + ([bias] if bias is not None else []))
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D (out_channels, in_channels/groups, kh, kw), got {weight.shape}")
    o, cg, kh, kw = weight.shape
    n, c = x.shape[:2]
    if groups < 1 or c % groups or o % groups:
        raise ValueError(f"conv2d: groups={groups} must divide in_channels={c} and out_channels={o}")
    if c // groups != cg:
        raise ValueError(f"conv2d: expected input with {cg * groups} channels (weight {weight.shape}, groups "
                         f"{groups}), got input of shape {input.shape}")
    if bias is not None and bias.shape != (o,):
        raise ValueError(f"conv2d: bias must have shape ({o},), got {bias.shape}")
    s = _pair(stride, "stride", "conv2d", 1)
    d = _pair(dilation, "dilation", "conv2d", 1)
    cols, ho, wo = _windows(x, (kh, kw), s, _conv_padding(padding, (kh, kw), d, s), d, 0.0, "conv2d")
    cols = cols.reshape(n, groups, cg * kh * kw, ho * wo)
    out = weight.reshape(groups, o // groups, cg * kh * kw).matmul(cols).reshape(n, o, ho, wo)
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1)
    return out.squeeze(0) if unbatched else out


def _pool_args(op: str, kernel_size: IntOr2, stride: IntOr2 | None, padding: IntOr2,
               ceil_mode: bool) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    k = _pair(kernel_size, "kernel_size", op, 1)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _pair(stride, "stride", op, 1)
    p = _pair(padding, "padding", op)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{op}: padding {p} should be at most half of the kernel size {k}")
    if ceil_mode:
        raise NotImplementedError(f"{op}: ceil_mode=True is not supported yet")
    return k, s, p


def max_pool2d(input: Tensor, kernel_size: IntOr2, stride: IntOr2 | None = None, padding: IntOr2 = 0,  # noqa: A002
               dilation: IntOr2 = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """Max over each window (padding counts as -inf); the gradient goes to the first maximum of each window."""
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported yet")
    k, s, p = _pool_args("max_pool2d", kernel_size, stride, padding, ceil_mode)
    x, unbatched = _batched(input, "max_pool2d")
    cols, ho, wo = _windows(x, k, s, (p[1], p[1], p[0], p[0]), _pair(dilation, "dilation", "max_pool2d", 1),
                            -math.inf, "max_pool2d")
    out = cols.max(dim=2).values.reshape(x.shape[0], x.shape[1], ho, wo)
    return out.squeeze(0) if unbatched else out


@lru_cache(maxsize=64)
def _pool_counts(h: int, w: int, k: tuple[int, int], s: tuple[int, int], p: tuple[int, int]) -> np.ndarray:
    """How many real (non-padding) pixels each window covers."""
    def axis(n: int, kk: int, ss: int, pp: int) -> np.ndarray:
        starts = np.arange(_out_size(n + 2 * pp, kk, ss, 1, "avg_pool2d", (h, w))) * ss - pp
        return np.minimum(starts + kk, n) - np.maximum(starts, 0)

    return np.outer(axis(h, k[0], s[0], p[0]), axis(w, k[1], s[1], p[1])).reshape(-1)


def avg_pool2d(input: Tensor, kernel_size: IntOr2, stride: IntOr2 | None = None, padding: IntOr2 = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over each window; ``count_include_pad=False`` divides by the real pixels only."""
    k, s, p = _pool_args("avg_pool2d", kernel_size, stride, padding, ceil_mode)
    x, unbatched = _batched(input, "avg_pool2d")
    cols, ho, wo = _windows(x, k, s, (p[1], p[1], p[0], p[0]), (1, 1), 0.0, "avg_pool2d")
    total = cols.sum(dim=2)
    if divisor_override is not None:
        out = total * (1.0 / divisor_override)
    elif count_include_pad or p == (0, 0):
        out = total * (1.0 / (k[0] * k[1]))
    else:
        counts = _pool_counts(x.shape[2], x.shape[3], k, s, p)
        out = total / x.new_tensor(counts.astype(np.float64))
    out = out.reshape(x.shape[0], x.shape[1], ho, wo)
    return out.squeeze(0) if unbatched else out
