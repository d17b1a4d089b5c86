"""OpInfo entries of ``nn.functional`` ops: ``scaled_dot_product_attention``, ``interpolate``, ``conv1d``,
``conv_transpose2d``, ``pad`` modes, pooling with ``ceil_mode`` / ``return_indices``, ``normalize``, ``embedding``
(``tests/op_table.py`` appends them). References are numpy in float64, written from the definitions."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

import vkblas as vb
from op_samples import Sample, uniform
from opinfo import _Z, F16, NUMERIC, OpInfo, errors
from references import conv_ref, pad_hw, pcg_uniform

F = vb.nn.functional
Rng = np.random.Generator


# ---------------------------------------------------------------- attention
def np_sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v, a fully masked row giving 0 (PyTorch's safe softmax)."""
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * sc
    ok = np.ones(s.shape, bool)
    if is_causal:
        ok &= np.tril(np.ones(s.shape[-2:], bool))
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            ok = ok & attn_mask
        else:
            ok = ok & ~np.isneginf(attn_mask)
            s = s + np.where(np.isneginf(attn_mask), 0.0, attn_mask)
    s = np.where(ok, s, -np.inf)
    m = np.max(s, -1, keepdims=True, initial=-np.inf)
    e = np.where(ok, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.matmul(np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0), v)


def sdpa_samples(rng: Rng) -> Iterator[Sample]:
    """Odd sizes (not multiples of the kernels' tiles), L != S, broadcast batch dims and masks, 3-D inputs."""
    u = uniform
    yield Sample((u(rng, (2, 3, 5, 4)), u(rng, (2, 3, 7, 4)), u(rng, (2, 3, 7, 6))))
    yield Sample((u(rng, (1, 2, 9, 8)), u(rng, (1, 2, 9, 8)), u(rng, (1, 2, 9, 8))), {"is_causal": True})
    yield Sample((u(rng, (2, 6, 4)), u(rng, (2, 5, 4)), u(rng, (2, 5, 3))), {"scale": 0.3})
    yield Sample((u(rng, (2, 2, 4, 3)), u(rng, (2, 1, 6, 3)), u(rng, (1, 2, 6, 5))))  # batch broadcast
    mask = rng.random((4, 6)) < 0.6
    mask[1] = False  # a fully masked row: 0
    yield Sample((u(rng, (2, 1, 4, 5)), u(rng, (2, 1, 6, 5)), u(rng, (2, 1, 6, 5)), mask))
    fmask = u(rng, (2, 1, 1, 6))
    fmask[0, 0, 0, 2] = -np.inf
    yield Sample((u(rng, (2, 2, 3, 4)), u(rng, (2, 2, 6, 4)), u(rng, (2, 2, 6, 4)), fmask))
    yield Sample((u(rng, (1, 1, 40, 16)), u(rng, (1, 1, 40, 16)), u(rng, (1, 1, 40, 16))), {"is_causal": True})
    yield Sample((u(rng, (1, 2, 0, 4)), u(rng, (1, 2, 3, 4)), u(rng, (1, 2, 3, 4))))
    yield Sample((u(rng, (1, 2, 3, 4)), u(rng, (1, 2, 0, 4)), u(rng, (1, 2, 0, 4))))


# ---------------------------------------------------------------- convolutions
def np_conv1d(x, w, b, stride=1, padding=0, dilation=1, groups=1):
    if x.ndim == 2:
        return np_conv1d(x[None], w, b, stride, padding, dilation, groups)[0]
    return conv_ref(x[:, :, None], w[:, :, None], b, (1, stride), (0, padding), (1, dilation), groups)[:, :, 0]


def np_conv_transpose2d(x, w, b, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The definition: every input pixel scatters its weighted kernel onto the output."""
    if x.ndim == 3:
        return np_conv_transpose2d(x[None], w, b, stride, padding, output_padding, groups, dilation)[0]
    s, p, op, d = ((v, v) if isinstance(v, int) else v for v in (stride, padding, output_padding, dilation))
    n, cin, h, wd = x.shape
    _, cg, kh, kw = w.shape
    oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    ow = (wd - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    full = np.zeros((n, cg * groups, oh + 2 * p[0] + kh * d[0], ow + 2 * p[1] + kw * d[1]))
    per = cin // groups
    for c in range(cin):
        g = c // per
        for i in range(h):
            for j in range(wd):
                for a in range(kh):
                    for e in range(kw):
                        y, z = i * s[0] + a * d[0], j * s[1] + e * d[1]
                        full[:, g * cg : (g + 1) * cg, y, z] += x[:, c, i, j][:, None] * w[c, :, a, e][None, :]
    out = full[:, :, p[0] : p[0] + oh, p[1] : p[1] + ow]
    return out + (b.reshape(1, -1, 1, 1) if b is not None else 0)


def conv1d_samples(rng: Rng) -> Iterator[Sample]:
    x = uniform(rng, (2, 4, 9))
    yield Sample((x, uniform(rng, (3, 4, 3)), uniform(rng, (3,))))
    yield Sample((x, uniform(rng, (6, 2, 2)), None), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2})
    yield Sample((uniform(rng, (3, 7)), uniform(rng, (2, 3, 3)), None), {"padding": 1})


def conv_transpose_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 4, 3, 4)), uniform(rng, (4, 3, 3, 3)), uniform(rng, (3,))))
    yield Sample(
        (uniform(rng, (1, 4, 3, 3)), uniform(rng, (4, 1, 3, 2)), uniform(rng, (2,))),
        {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2},
    )
    yield Sample((uniform(rng, (3, 2, 2)), uniform(rng, (3, 2, 2, 2)), None), {"stride": (2, 1), "dilation": 2})


# ---------------------------------------------------------------- padding
_NP_PAD_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def np_pad(x: np.ndarray, pad: tuple[int, ...], mode: str = "constant", value: float | None = None) -> np.ndarray:
    widths = [(0, 0)] * (x.ndim - len(pad) // 2) + [
        (pad[2 * i], pad[2 * i + 1]) for i in reversed(range(len(pad) // 2))
    ]
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, x.shape, strict=True))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    kw = {"constant_values": value or 0.0} if mode == "constant" else {}
    return np.pad(x, widths, mode=_NP_PAD_MODE[mode], **kw)


def pad_samples(rng: Rng) -> Iterator[Sample]:
    for mode, shapes in [
        ("constant", [((2, 3, 4), (1, 2)), ((3, 4), (2, 0, 1, 1)), ((2, 5), (-1, 2))]),
        ("reflect", [((2, 3, 5), (2, 1)), ((1, 2, 4, 4), (3, 1, 0, 2))]),
        ("replicate", [((2, 3, 4), (3, 2)), ((1, 2, 3, 3), (1, 4, 2, 0)), ((1, 1, 2, 2, 3), (1, 1, 2, 0, 1, 1))]),
        ("circular", [((2, 2, 4), (1, 3)), ((1, 1, 3, 4), (2, 2, 1, 0))]),
    ]:
        for shape, pads in shapes:
            yield Sample((uniform(rng, shape), pads), {"mode": mode} if mode != "constant" else {"value": 0.5})


# ---------------------------------------------------------------- pooling with ceil_mode / return_indices
def _pool_out(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = d * (k - 1) + 1
    o = -(-(n + 2 * p - span) // s) + 1 if ceil else (n + 2 * p - span) // s + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def np_max_pool(x, k, s, p, dilation=1, ceil_mode=False, return_indices=False):
    """By definition: every window's max (and its flat index in the H*W plane)."""
    n, c, h, w = x.shape
    oh, ow = _pool_out(h, k, s, p, dilation, ceil_mode), _pool_out(w, k, s, p, dilation, ceil_mode)
    out, idx = np.full((n, c, oh, ow), -np.inf), np.zeros((n, c, oh, ow), np.int32)
    for i in range(oh):
        for j in range(ow):
            for a in range(k):
                for b in range(k):
                    y, z = i * s - p + a * dilation, j * s - p + b * dilation
                    if 0 <= y < h and 0 <= z < w:
                        v = x[:, :, y, z]
                        better = v > out[:, :, i, j]
                        out[:, :, i, j] = np.where(better, v, out[:, :, i, j])
                        idx[:, :, i, j] = np.where(better, y * w + z, idx[:, :, i, j])
    return (out, idx) if return_indices else out


def np_avg_pool(x, k, s, p, ceil_mode=False, count_include_pad=True):
    n, c, h, w = x.shape
    oh, ow = _pool_out(h, k, s, p, 1, ceil_mode), _pool_out(w, k, s, p, 1, ceil_mode)
    xp = pad_hw(x, p, p)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, z0 = i * s - p, j * s - p
            y1, z1 = min(y0 + k, h + p), min(z0 + k, w + p)
            win = xp[:, :, max(y0, -p) + p : y1 + p, max(z0, -p) + p : z1 + p]
            if count_include_pad:
                count = (y1 - y0) * (z1 - z0)
            else:
                count = (min(y1, h) - max(y0, 0)) * (min(z1, w) - max(z0, 0))
            out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


def ceil_pool_samples(rng: Rng) -> Iterator[Sample]:
    """Distinct values (unique maxima); sizes where ceil_mode adds a partial window."""
    x = rng.permutation(70).reshape(1, 2, 5, 7) / 10.0 - 3.5
    yield Sample((x, 2, 2, 0), {"ceil_mode": True})
    yield Sample((x, 3, 2, 1), {"ceil_mode": True})
    yield Sample((x, 2, 3, 1), {"ceil_mode": True})
    yield Sample((x, 3, 2, 1), {})


# ---------------------------------------------------------------- resampling
def _src_coord(n_in: int, n_out: int, mode: str, align_corners: bool, scale: float | None) -> np.ndarray:
    """PyTorch's documented mapping from output index to input coordinate."""
    dst = np.arange(n_out, dtype=np.float64)
    s = 1.0 / scale if scale else n_in / n_out
    if mode == "nearest":
        return np.minimum(np.floor((dst * np.float32(s)).astype(np.float32)), n_in - 1)
    if mode == "nearest-exact":
        return np.minimum(np.floor(((dst + 0.5) * np.float32(s)).astype(np.float32)), n_in - 1)
    if align_corners:
        return dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    return np.maximum((dst + 0.5) * s - 0.5, 0.0)


def np_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    k = x.ndim - 2
    sizes = [size] * k if isinstance(size, int) else list(size) if size is not None else None
    factors = [scale_factor] * k if isinstance(scale_factor, (int, float)) else scale_factor
    if sizes is None:
        sizes = [int(np.floor(n * f)) for n, f in zip(x.shape[2:], factors, strict=True)]
    out = x
    for i in range(k):
        n_in, n_out = x.shape[2 + i], sizes[i]
        src = _src_coord(n_in, n_out, mode, bool(align_corners), None if factors is None else factors[i])
        if mode.startswith("nearest"):
            out = np.take(out, src.astype(int), axis=2 + i)
        else:
            lo = np.minimum(np.floor(src).astype(int), n_in - 1)
            hi = np.minimum(lo + 1, n_in - 1)
            w = (src - lo).reshape((-1,) + (1,) * (k - 1 - i))
            out = np.take(out, lo, axis=2 + i) * (1 - w) + np.take(out, hi, axis=2 + i) * w
    return out


def interpolate_samples(rng: Rng) -> Iterator[Sample]:
    x2, x1 = uniform(rng, (2, 3, 4, 5)), uniform(rng, (2, 3, 5))
    for mode in ("nearest", "nearest-exact"):
        yield Sample((x2,), {"size": (7, 3), "mode": mode})
        yield Sample((x2,), {"scale_factor": 1.5, "mode": mode})
        yield Sample((x1,), {"size": 8, "mode": mode})
    for ac in (False, True):
        yield Sample((x2,), {"size": (6, 9), "mode": "bilinear", "align_corners": ac})
        yield Sample((x2,), {"size": (3, 2), "mode": "bilinear", "align_corners": ac})
        yield Sample((x1,), {"scale_factor": 2.5, "mode": "linear", "align_corners": ac})
    yield Sample((x2,), {"scale_factor": (0.5, 2.0), "mode": "bilinear"})


# ---------------------------------------------------------------- normalize, embedding, dropout
def np_normalize(x: np.ndarray, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> np.ndarray:
    norm = (np.abs(x) ** p).sum(dim, keepdims=True) ** (1.0 / p)
    return x / np.maximum(norm, eps)


def np_embedding(idx, w, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False):
    w = w.copy()
    if max_norm is not None:
        rows = np.unique(idx)
        norms = (np.abs(w[rows]) ** norm_type).sum(-1) ** (1 / norm_type)
        w[rows] *= np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)[:, None]
    return w[idx]


def _seeded(fn: Any) -> Any:
    return lambda x, **kw: fn(x, generator=vb.Generator(11), **kw)


def np_dropout(x: np.ndarray, p: float, training: bool = True, mask_shape: tuple[int, ...] | None = None) -> np.ndarray:
    keep = pcg_uniform(mask_shape or x.shape, 11) >= p
    return x * keep / (1 - p)


def np_alpha_dropout(x: np.ndarray, p: float, training: bool = True, channels: bool = False) -> np.ndarray:
    a_prime = -1.7580993408473766
    shape = x.shape[:2] + (1,) * (x.ndim - 2) if channels else x.shape
    keep = pcg_uniform(shape, 11) >= p
    a = 1 / np.sqrt((1 - p) + a_prime**2 * (1 - p) * p)
    return a * np.where(keep, x, a_prime) - a * a_prime * p


# ---------------------------------------------------------------- layer_norm, rms_norm, cross_entropy (the fused nodes)
def np_layer_norm(x: np.ndarray, ns: tuple, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> np.ndarray:
    axes = tuple(range(x.ndim - len(ns), x.ndim))
    c = x - x.mean(axes, keepdims=True)
    y = c / np.sqrt((c * c).mean(axes, keepdims=True) + eps)
    return y * (1.0 if weight is None else weight) + (0.0 if bias is None else bias)


def np_rms_norm(x: np.ndarray, ns: tuple, weight: Any = None, eps: float | None = None) -> np.ndarray:
    axes = tuple(range(x.ndim - len(ns), x.ndim))
    e = np.finfo(x.dtype).eps if eps is None else eps
    return x / np.sqrt((x * x).mean(axes, keepdims=True) + e) * (1.0 if weight is None else weight)


def norm_samples(rng: Rng, bias: bool = True) -> Iterator[Sample]:
    u = uniform
    for shape, ns in (((3, 5), (5,)), ((2, 3, 4), (3, 4)), ((4, 1), (1,)), ((0, 3), (3,)), ((2, 300), (300,))):
        params = (u(rng, ns), u(rng, ns)) if bias else (u(rng, ns),)
        yield Sample((u(rng, shape) * 2 + 1, ns, *params), {"eps": 1e-5})
    yield Sample((u(rng, (3, 6)), (6,)), {})  # no weight / bias, the default eps


def np_cross_entropy(
    x: np.ndarray,
    target: np.ndarray,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> np.ndarray:
    """Class-index cross-entropy over dim 1 of (N, C, ...) logits, from the definition."""
    xr = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1]) if x.ndim > 1 else x[None]
    t = target.reshape(-1)
    m = xr.max(1, keepdims=True)
    logp = xr - m - np.log(np.exp(xr - m).sum(1, keepdims=True))
    w = np.ones(xr.shape[1]) if weight is None else weight
    keep = t != ignore_index
    safe = np.where(keep, t, 0)
    wt = w[safe] * keep
    loss = -(1 - label_smoothing) * wt * logp[np.arange(len(t)), safe]
    loss = loss - label_smoothing / xr.shape[1] * (logp * w).sum(1) * keep
    if reduction == "none":
        return loss.reshape(target.shape)
    return np.array(loss.sum() if reduction == "sum" else loss.sum() / wt.sum())


def ce_samples(rng: Rng) -> Iterator[Sample]:
    u = uniform
    yield Sample((u(rng, (6, 5)) * 2, np.array([0, 4, -100, 2, 2, 1])))
    yield Sample((u(rng, (6, 5)), np.array([0, 4, 1, 2, 2, 1]), np.array([1, 3, 2, 1, 2])), {"label_smoothing": 0.2})
    yield Sample((u(rng, (2, 4, 3)), np.array([[0, 3, 1], [2, -100, 0]])), {"reduction": "none"})
    yield Sample((u(rng, (3, 4)), np.array([1, 2, 3]), np.array([2, 1, 1, 3])), {"reduction": "sum"})
    yield Sample((u(rng, (5,)), np.array(2)), {"label_smoothing": 0.1})  # unbatched


NN_OPS: list[OpInfo] = [
    OpInfo(
        "scaled_dot_product_attention",
        F.scaled_dot_product_attention,
        np_sdpa,
        sdpa_samples,
        dtypes=(F16,),
        error_inputs=errors(
            ((_Z((1, 1, 3, 4)),) * 3 + (np.ones((3, 3), bool),), {"is_causal": True}, RuntimeError, "is_causal"),
            ((_Z((1, 1, 3, 4)), _Z((1, 1, 3, 5)), _Z((1, 1, 3, 4))), {}, RuntimeError, "must be"),
            ((_Z((1, 1, 3, 4)),) * 3, {"dropout_p": 1.5}, ValueError, "dropout_p"),
            ((_Z((2, 1, 3, 4)), _Z((3, 1, 3, 4)), _Z((3, 1, 3, 4))), {}, RuntimeError, "cannot be broadcast"),
        ),
    ),
    OpInfo("conv1d", F.conv1d, np_conv1d, conv1d_samples, dtypes=(F16,)),
    OpInfo(
        "conv_transpose2d",
        F.conv_transpose2d,
        np_conv_transpose2d,
        conv_transpose_samples,
        dtypes=(F16,),
        error_inputs=errors(
            (
                (_Z((1, 2, 3, 3)), _Z((2, 1, 2, 2)), None),
                {"stride": 2, "output_padding": 2},
                ValueError,
                "smaller than",
            ),
            ((_Z((1, 3, 3, 3)), _Z((2, 1, 2, 2)), None), {}, ValueError, "channels"),
        ),
    ),
    OpInfo(
        "pad",
        F.pad,
        np_pad,
        pad_samples,
        dtypes=NUMERIC,
        error_inputs=errors(
            ((_Z((1, 2, 3)), (3, 0)), {"mode": "reflect"}, RuntimeError, "at most 2"),
            ((_Z((1, 2, 3)), (1, 1)), {"mode": "wrap"}, NotImplementedError, "not one of"),
            ((_Z((2, 3)), (1,)), {}, ValueError, "even number"),
        ),
    ),
    OpInfo(
        "max_pool2d (ceil_mode)",
        lambda x, k, s, p, **kw: F.max_pool2d(x, k, s, p, **kw),
        lambda x, k, s, p, **kw: np_max_pool(x, k, s, p, **kw),
        ceil_pool_samples,
        dtypes=(F16,),
    ),
    OpInfo(
        "max_pool2d (return_indices)",
        lambda x, k, s, p, **kw: F.max_pool2d(x, k, s, p, return_indices=True, **kw),
        lambda x, k, s, p, **kw: np_max_pool(x, k, s, p, return_indices=True, **kw),
        lambda rng: (
            Sample(smp.args, dict(smp.kwargs, **extra))
            for smp in ceil_pool_samples(rng)
            for extra in ({}, {"dilation": 2})
            if not (extra and smp.args[1] == 3)
        ),
    ),
    OpInfo(
        "avg_pool2d (ceil_mode)",
        lambda x, k, s, p, **kw: F.avg_pool2d(x, k, s, p, **kw),
        lambda x, k, s, p, **kw: np_avg_pool(x, k, s, p, **kw),
        lambda rng: (
            Sample(smp.args, dict(smp.kwargs, count_include_pad=c))
            for smp in ceil_pool_samples(rng)
            for c in (True, False)
        ),
        dtypes=(F16,),
    ),
    OpInfo(
        "interpolate",
        F.interpolate,
        np_interpolate,
        interpolate_samples,
        dtypes=(F16,),
        error_inputs=errors(
            ((_Z((1, 1, 4)),), {"size": 3, "mode": "bilinear"}, ValueError, "expects a 4-D"),
            ((_Z((1, 1, 4, 4)),), {"size": 3, "align_corners": True}, ValueError, "align_corners"),
            ((_Z((1, 1, 4, 4)),), {"size": 3, "mode": "bicubic"}, NotImplementedError, "not supported"),
        ),
    ),
    OpInfo("layer_norm", F.layer_norm, np_layer_norm, norm_samples, dtypes=(F16,)),
    OpInfo("rms_norm", F.rms_norm, np_rms_norm, lambda rng: norm_samples(rng, bias=False), dtypes=(F16,)),
    OpInfo(
        "cross_entropy",
        # the class weight is not differentiable (PyTorch refuses one that requires grad): given as integers, which
        # the table makes no leaves of, and cast to the logits' dtype
        lambda x, t, w=None, **kw: F.cross_entropy(x, t, None if w is None else w.to(x.dtype), **kw),
        np_cross_entropy,
        ce_samples,
        dtypes=(F16,),
        error_inputs=errors(
            ((_Z((3, 4)), np.array([0, 4, 1])), {}, IndexError, "out of range for 4 classes"),
            ((_Z((3, 4)), np.array([0, 1])), {}, ValueError, "expected target of shape"),
            ((_Z((3, 4)), np.array([0, -2, -1])), {"ignore_index": -1}, IndexError, "index -2 is out of range"),
            ((_Z((3, 4)), np.array([0, -1, 1])), {}, IndexError, "index -1 is out of range"),
        ),
    ),
    OpInfo(
        "normalize",
        F.normalize,
        np_normalize,
        lambda rng: (
            Sample((uniform(rng, s),), kw)
            for s, kw in [((3, 4), {}), ((2, 3, 4), {"dim": -1}), ((4, 3), {"p": 1.0, "dim": 0}), ((2, 5), {"p": 3.0})]
        ),
        dtypes=(F16,),
    ),
    OpInfo(
        "normalize (zero rows)",
        F.normalize,
        np_normalize,
        lambda rng: (Sample((np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]]),)),),
        differentiable=False,  # d/dx at 0 is 1/eps (PyTorch's): no finite difference sees it (tests/test_nn_more.py)
    ),
    OpInfo(
        "embedding",
        lambda i, w, **kw: F.embedding(i, w, **kw),
        np_embedding,
        lambda rng: (
            Sample((np.array(i, dtype=np.int64), uniform(rng, (5, 3))), {}) for i in ([[0, 2, 2], [4, 1, 0]], [3], [])
        ),
        error_inputs=errors(((_Z(3), _Z((4, 2))), {}, TypeError, "integer tensor")),
    ),
    OpInfo(
        "embedding (padding_idx)",
        lambda i, w, **kw: F.embedding(i, w, **kw),
        np_embedding,
        lambda rng: (Sample((np.array([3, 3, 1]), uniform(rng, (5, 3))), {"padding_idx": 3}),),
        differentiable=False,  # the padding row gets no gradient by definition (tests/test_nn_more.py)
    ),
    OpInfo(
        "embedding (max_norm)",
        lambda i, w, **kw: F.embedding(i, w, **kw),
        np_embedding,
        lambda rng: (
            Sample((np.array([[0, 2, 2], [4, 1, 0]]), uniform(rng, (5, 3)) * 2), {"max_norm": m, "norm_type": t})
            for m, t in [(1.0, 2.0), (2.0, 1.0)]
        ),
        differentiable=False,  # the renormalisation is an in-place change of the weight, outside autograd
        noncontiguous=False,  # (it writes into the weight view: a contiguous copy would not see it)
    ),
    OpInfo(
        "dropout",
        _seeded(F.dropout),
        np_dropout,
        lambda rng: (Sample((uniform(rng, s),), {"p": p}) for s, p in [((3, 4), 0.3), ((2, 3, 5), 0.7), ((0, 2), 0.5)]),
        dtypes=(F16,),
    ),
    OpInfo(
        "dropout2d",
        _seeded(F.dropout2d),
        lambda x, p: np_dropout(x, p, mask_shape=x.shape[:2] + (1, 1)),
        lambda rng: (Sample((uniform(rng, (3, 4, 2, 3)),), {"p": 0.4}),),
    ),
    OpInfo(
        "dropout1d",
        _seeded(F.dropout1d),
        lambda x, p: np_dropout(x, p, mask_shape=x.shape[:-1] + (1,)),
        lambda rng: (Sample((uniform(rng, s),), {"p": 0.5}) for s in [(3, 5, 4), (6, 3)]),
        error_inputs=errors(((_Z((2, 3, 4, 5)),), {}, RuntimeError, "Expected 2D or 3D")),
    ),
    OpInfo(
        "dropout3d",
        _seeded(F.dropout3d),
        lambda x, p: np_dropout(x, p, mask_shape=x.shape[:2] + (1, 1, 1)),
        lambda rng: (Sample((uniform(rng, (2, 5, 2, 2, 3)),), {"p": 0.3}),),
    ),
    OpInfo(
        "alpha_dropout",
        lambda x, p: _seeded(F.alpha_dropout)(x, p=p, training=True),
        lambda x, p: np_alpha_dropout(x, p),
        lambda rng: (Sample((uniform(rng, (4, 5)),), {"p": 0.2}),),
    ),
    OpInfo(
        "feature_alpha_dropout",
        lambda x, p: _seeded(F.feature_alpha_dropout)(x, p=p, training=True),
        lambda x, p: np_alpha_dropout(x, p, channels=True),
        lambda rng: (Sample((uniform(rng, (3, 4, 2, 2)),), {"p": 0.25}),),
    ),
]
