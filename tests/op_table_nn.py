"""OpInfo entries of ``nn.functional`` ops: ``scaled_dot_product_attention``, ``interpolate``, ``conv1d``,
``conv_transpose2d``, ``pad`` modes, pooling with ``ceil_mode`` / ``return_indices``, ``normalize``, ``embedding``
(``tests/op_table.py`` appends them). References are numpy in float64, written from the definitions."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

import vkblas as vb
from op_samples import Sample, uniform
from op_table import _Z, F16, OpInfo, errors

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
]
