"""float64 references written with numpy alone, independent of vkblas's code: the definitions of convolution and
pooling as loops, the counter-based generator of ``backend/base.py`` from its documented formula, and gradients by
central finite differences of any such reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


# ---------------------------------------------------------------- gradients of a reference
def numeric_grad(
    ref: Callable[..., Any], args: Sequence[Any], i: int, weights: Sequence[np.ndarray], eps: float = 1e-6
) -> np.ndarray:
    """d/d args[i] of ``sum_k sum(ref(*args)[k] * weights[k])`` by central differences, in float64."""
    base = np.array(args[i], dtype=np.float64)
    grad = np.zeros_like(base)
    for k in range(base.size):
        total = []
        for delta in (eps, -eps):
            probe = base.copy()
            probe.reshape(-1)[k] += delta
            outs = ref(*[probe if j == i else a for j, a in enumerate(args)])
            outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            total.append(sum(float((np.asarray(o, np.float64) * w).sum()) for o, w in zip(outs, weights, strict=True)))
        grad.reshape(-1)[k] = (total[0] - total[1]) / (2 * eps)
    return grad


# ---------------------------------------------------------------- convolution and pooling, by definition
def pad_hw(x: np.ndarray, ph: int, pw: int, value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv_ref(x, w, b, stride=1, padding=0, dilation=1, groups=1):
    """The definition: a loop over output pixels."""
    s, p, d = (
        (stride,) * 2 if isinstance(stride, int) else stride,
        (padding,) * 2 if isinstance(padding, int) else padding,
        (dilation,) * 2 if isinstance(dilation, int) else dilation,
    )
    xp = pad_hw(x, *p)
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    ho, wo = (hp - d[0] * (kh - 1) - 1) // s[0] + 1, (wp - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(ho):
            for j in range(wo):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * s[0] : i * s[0] + d[0] * (kh - 1) + 1 : d[0],
                    j * s[1] : j * s[1] + d[1] * (kw - 1) + 1 : d[1],
                ]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3)) + (b[oc] if b is not None else 0)
    return out


def pool_ref(x, k, s, p, reduce, count_include_pad=True):
    xp = pad_hw(x, p, p, -np.inf if reduce == "max" else 0.0)
    ones = pad_hw(np.ones_like(x), p, p)
    ho, wo = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.zeros(x.shape[:2] + (ho, wo))
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * s : i * s + k, j * s : j * s + k]
            if reduce == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = k * k if count_include_pad else ones[:, :, i * s : i * s + k, j * s : j * s + k].sum(axis=(2, 3))
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


# ---------------------------------------------------------------- the counter-based generator (backend/base.py)
_M32 = 0xFFFFFFFF


def _pcg(x: np.ndarray) -> np.ndarray:
    """pcg(x) in uint64 arithmetic masked to 32 bits (the backends work in uint32)."""
    s = (x * 747796405 + 2891336453) & _M32
    w = (((s >> ((s >> 28) + 4)) ^ s) * 277803737) & _M32
    return w ^ (w >> 22)


def _bits(n: int, seed: int, counter: int) -> np.ndarray:
    i = np.arange(n, dtype=np.uint64)
    key = _pcg(np.array([seed & _M32], dtype=np.uint64))[0]
    return _pcg(((np.uint64(counter) + i) & _M32) ^ key)


def pcg_uniform(shape: tuple[int, ...], seed: int, counter: int = 0) -> np.ndarray:
    """uniform = (bits >> 8) * 2**-24, element i (C order) from counter + i."""
    n = int(np.prod(shape))
    return ((_bits(n, seed, counter) >> 8).astype(np.float64) * 2.0**-24).reshape(shape)


def pcg_normal(shape: tuple[int, ...], seed: int, counter: int = 0) -> np.ndarray:
    """normal = sqrt(-2 log u1) cos(2 pi u2), u1 = ((pcg(bits) >> 8) + 1) * 2**-24, u2 = uniform."""
    n = int(np.prod(shape))
    bits = _bits(n, seed, counter)
    u1 = ((_pcg(bits) >> 8).astype(np.float64) + 1.0) * 2.0**-24
    u2 = (bits >> 8).astype(np.float64) * 2.0**-24
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).reshape(shape)
