"""``pad`` (``torch.nn.functional.pad``) in its four modes.

``constant`` fills new positions with a value (``ops/conv.py``'s pad; a negative pad crops). ``reflect``,
``replicate`` and ``circular`` read every output position from an input position: per padded dim, one
``index_select`` with a cached index (so it runs inside a graph capture once it ran eagerly), whose backward adds
the gradient of every copy back to its source.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backend.base import Backend
from ..dtypes import int32
from ..tensor import Tensor, from_host
from .conv import pad as _constant_pad
from .indexing import take_along

MODES = ("constant", "reflect", "replicate", "circular")
_INDEX: dict[tuple[int, str, int, int, int], Tensor] = {}


def _source_index(backend: Backend, mode: str, n: int, lo: int, hi: int) -> Tensor:
    """int32 input position of each of the ``lo + n + hi`` output positions of a padded dim."""
    key = (id(backend), mode, n, lo, hi)
    t = _INDEX.get(key)
    if t is None:
        j = np.arange(-lo, n + hi)
        if mode == "reflect":  # mirror without repeating the edge: -1 -> 1, n -> n - 2
            period = 2 * (n - 1)
            j = (j + period) % period if n > 1 else np.zeros_like(j)
            j = np.where(j >= n, period - j, j)
        elif mode == "replicate":
            j = np.clip(j, 0, n - 1)
        else:  # circular
            j = j % n
        t = _INDEX[key] = from_host(j.astype(np.int32), int32, backend)
    return t


def _cropped(x: Tensor, pads: list[int]) -> tuple[Tensor, list[int]]:
    """Negative pads crop (PyTorch's): ``x`` narrowed by them, and the pads with the negative ones zeroed."""
    for i in range(len(pads) // 2):
        d = x.ndim - 1 - i
        lo, hi = pads[2 * i], pads[2 * i + 1]
        if lo < 0 or hi < 0:
            start, stop = max(-lo, 0), x.shape[d] - max(-hi, 0)
            if stop < start:
                raise RuntimeError(f"pad: cropping {(lo, hi)} removes more than the {x.shape[d]} elements of dim {d}")
            x = x.narrow(d, start, stop - start)
    return x, [max(q, 0) for q in pads]


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """Pad the last ``len(pad) // 2`` dims; ``pad`` is ``(left, right, top, bottom, ...)`` from the last dim
    backwards. ``reflect`` mirrors without repeating the edge (a pad must be smaller than its dim), ``replicate``
    repeats the edge, ``circular`` wraps around; those pad at most the last three dims of a batched input."""
    if mode not in MODES:
        raise NotImplementedError(f"pad: mode {mode!r} is not one of {MODES}")
    pads = [int(q) for q in pad]
    if len(pads) % 2 or len(pads) // 2 > input.ndim:
        raise ValueError(f"pad: expected an even number of pad sizes, at most 2 per dim of {input.shape}, got {pads}")
    x, pads = _cropped(input, pads)
    if mode == "constant":
        return _constant_pad(x, pads, value=0.0 if value is None else value)
    if value:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    k = len(pads) // 2
    if not (k + 1 <= x.ndim <= k + 2):
        raise NotImplementedError(
            f"pad: {mode} padding of {k} dims needs a {k + 1}-D or {k + 2}-D input, got shape {input.shape}"
        )
    for i in range(k):
        d = x.ndim - 1 - i
        n, lo, hi = x.shape[d], pads[2 * i], pads[2 * i + 1]
        if not lo and not hi:
            continue
        limit = n - 1 if mode == "reflect" else n if mode == "circular" else None  # replicate: any width
        if n == 0 or (limit is not None and (lo > limit or hi > limit)):
            raise RuntimeError(
                f"pad: {mode} padding {(lo, hi)} of dim {d} (size {n}) must be at most {limit} on each side"
            )
        x = take_along(x, d, _source_index(x._backend, mode, n, lo, hi))
    return x
