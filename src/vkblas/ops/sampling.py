"""``multinomial``: draws category indices from rows of non-negative weights, on the device.

* with replacement: ``u * total`` against the row's cumulative sum (``cumsum``); the index is the number of
  cumulative weights at or below it, so a zero-weight category is never drawn;
* without replacement: the ``k`` largest keys ``log(u) / w`` (Efraimidis & Spirakis, 2006: the same distribution as
  drawing one at a time and renormalising), through ``topk``.

The weights are checked on the device (negative, inf or NaN entries, rows summing to 0, fewer positive weights than
draws without replacement): a bad row raises at the next sync point, as CUDA's device-side asserts do.
"""

from __future__ import annotations

import numpy as np

from ..backend.elementwise import define
from ..dtypes import int32
from ..random import Generator
from ..tensor import Tensor
from ._core import cast, elementwise
from .indexing import check_index
from .random import random_tensor
from .scan import cumsum
from .sorting import topk

# log(u) / w: the Efraimidis-Spirakis key (-inf for a zero weight)
define("es_key", lambda m, u, w: m.log(u) / w, float_only=True)

_NOT_PROBABILITIES = "multinomial: probability tensor contains either `inf`, `nan` or element < 0"


def multinomial(
    input: Tensor,  # noqa: A002
    num_samples: int,
    replacement: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """``num_samples`` int32 indices per row of ``input`` (1-D or 2-D weights, not necessarily normalised)."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got shape {input.shape}")
    if not input.dtype.is_floating:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got {input.dtype!r}")
    n = input.shape[-1]
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample <= 0 samples (got {num_samples})")
    if not replacement and num_samples > n:
        raise RuntimeError(
            f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement "
            f"({num_samples} > {n})"
        )
    w = input.detach() if input.ndim == 2 else input.detach().unsqueeze(0)
    # a weight that is no probability: negative, infinite or NaN (outside [0, the largest finite value])
    w._backend.check_values(w._view, 0.0, float(np.finfo(w.dtype.np).max), _NOT_PROBABILITIES, RuntimeError)
    positive = cast(elementwise("gt", w, 0), int32).sum(-1)
    check_index(
        positive, 1, n + 1, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)", RuntimeError
    )
    rows = w.shape[0]
    if replacement:
        cdf = cumsum(w, -1)
        u = random_tensor((rows, num_samples), "uniform", w.dtype, w._backend, generator)
        target = (u * cdf[:, n - 1 :]).unsqueeze(-1)  # (rows, samples, 1)
        out = cast(elementwise("le", cdf.unsqueeze(1), target), int32).sum(-1)
        # rounding can put u * total at the total: the last category that has weight, then
        last = (n - 1) - cast(elementwise("gt", w.flip(-1), 0), int32).argmax(-1, keepdim=True)
        out = elementwise("minimum", out, last)
    else:
        check_index(
            positive,
            num_samples,
            n + 1,
            "multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative "
            f"category to sample): {{bad}} categories have weight, {num_samples} samples asked for",
            RuntimeError,
        )
        u = random_tensor((rows, n), "uniform", w.dtype, w._backend, generator)
        out = topk(elementwise("es_key", u, w), num_samples, -1).indices
    return out if input.ndim == 2 else out.squeeze(0)
