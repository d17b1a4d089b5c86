"""``interpolate`` (``torch.nn.functional.interpolate``): ``nearest``, ``nearest-exact``, ``linear`` and
``bilinear`` resampling, with PyTorch's source-index rules (``align_corners`` and scale factors included).

Each spatial axis is resampled on its own (bilinear is linear along H, then along W): ``nearest`` is one gather of
the chosen rows; ``linear`` gathers the two neighbours and blends them as PyTorch does, ``a * (1 - w) + b * w``
(so an infinite neighbour with weight 0 gives NaN there, and one with weight in (0, 1) gives inf). The indices and
weights depend only on the sizes, so they are computed once on the host per (device, sizes, mode) and cached; the
ops are differentiable, so the gradient needs no rule of its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..dtypes import int32
from ..tensor import Tensor, from_host
from .indexing import take_along

MODES = ("nearest", "nearest-exact", "linear", "bilinear")
_SPATIAL = {"linear": 1, "bilinear": 2}
_TABLES: dict[tuple, tuple[Tensor, ...]] = {}


def _source_scale(n_in: int, n_out: int, scale: float | None, align_corners: bool) -> float:
    """PyTorch's area_pixel_compute_scale: output index -> input coordinate."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _tables(
    x: Tensor, mode: str, n_in: int, n_out: int, scale: float | None, align_corners: bool
) -> tuple[Tensor, ...]:
    """(index,) for the nearest modes, (lower index, upper index, weight of the lower, of the upper) for linear."""
    key = (id(x._backend), x.dtype.name, mode, n_in, n_out, scale, align_corners)
    t = _TABLES.get(key)
    if t is not None:
        return t
    dst = np.arange(n_out)
    s = _source_scale(n_in, n_out, scale, align_corners)
    if mode in ("nearest", "nearest-exact"):
        # computed in float32, as PyTorch does, so that its rounding is reproduced
        src = (dst.astype(np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0.0)) * np.float32(s)
        t = (from_host(np.minimum(np.floor(src), n_in - 1).astype(np.int32), int32, x._backend),)
    else:
        src = dst * s if align_corners else np.maximum((dst + 0.5) * s - 0.5, 0.0)
        lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        t = (
            from_host(lo.astype(np.int32), int32, x._backend),
            from_host(hi.astype(np.int32), int32, x._backend),
            from_host(1.0 - (src - lo), x.dtype, x._backend),
            from_host(src - lo, x.dtype, x._backend),
        )
    _TABLES[key] = t
    return t


def _resample_axis(x: Tensor, d: int, mode: str, n_out: int, scale: float | None, align_corners: bool) -> Tensor:
    tables = _tables(x, mode, x.shape[d], n_out, scale, align_corners)
    if len(tables) == 1:
        return take_along(x, d, tables[0])
    lo, hi, w_lo, w_hi = tables
    shape = (n_out, *(1,) * (x.ndim - d - 1))
    return take_along(x, d, lo) * w_lo.reshape(shape) + take_along(x, d, hi) * w_hi.reshape(shape)


def interpolate(
    input: Tensor,  # noqa: A002
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) ``input`` to ``size``, or by ``scale_factor``
    (``floor(in * scale)``), with ``mode`` ``nearest`` (PyTorch's legacy rule ``floor(out_index * scale)``),
    ``nearest-exact`` (pixel centres), ``linear`` (one spatial dim) or ``bilinear`` (two)."""
    if mode not in MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (supported: {MODES})")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    k = input.ndim - 2
    if k < 1 or (mode in _SPATIAL and k != _SPATIAL[mode]):
        want = f"{_SPATIAL[mode] + 2}-D" if mode in _SPATIAL else "3-D or more"
        raise ValueError(f"interpolate: mode {mode!r} expects a {want} (N, C, ...) input, got shape {input.shape}")
    if align_corners is not None and mode not in _SPATIAL:
        raise ValueError(
            "interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear"
        )
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: either size or scale_factor should be defined (and only one of them)")
    spatial = input.shape[2:]
    scales: list[float | None]
    if size is not None:
        sizes = [int(size)] * k if isinstance(size, int) else [int(v) for v in size]
        scales = [None] * k
    else:
        factors = [float(scale_factor)] * k if isinstance(scale_factor, (int, float)) else list(scale_factor)
        sizes = [int(math.floor(n * f)) for n, f in zip(spatial, factors, strict=True)] if len(factors) == k else []
        scales = [None if recompute_scale_factor else float(f) for f in factors]
    if len(sizes) != k or any(v <= 0 for v in sizes):
        raise ValueError(f"interpolate: output size {sizes} does not fit the {k} spatial dims of {input.shape}")
    out = input
    for i in range(k):
        if sizes[i] != spatial[i] or scales[i] not in (None, 1.0):
            out = _resample_axis(out, 2 + i, mode, sizes[i], scales[i], bool(align_corners))
    return out if out is not input else input.clone()
