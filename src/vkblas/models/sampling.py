"""Drawing the next token from a row of logits, with a temperature and an optional top-k cut.

vkblas has no ``topk`` or ``multinomial`` op yet (issue 14 part B), so the last position's logits (one row of
``vocab_size`` numbers per sequence) are read back and the draw is made on the host: inverse-CDF sampling with
uniform numbers from vkblas's generator, so ``vkblas.manual_seed`` makes generation reproducible on every device.
Generation reads every new token back anyway (it decides the next input).

>>> import vkblas
>>> logits = vkblas.tensor([[0.0, 10.0, 0.0]], device="cpu")
>>> sample_next(logits, temperature=1.0, top_k=1).tolist()
[[1]]
"""

from __future__ import annotations

import numpy as np

from ..creation import rand, tensor
from ..dtypes import int32
from ..tensor import Tensor


def probabilities(logits: np.ndarray, temperature: float, top_k: int | None) -> np.ndarray:
    """softmax(logits / temperature) over the last axis, with everything below the ``top_k``-th largest logit of a
    row set to probability 0 (ties with it are kept)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = logits.astype(np.float64) / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k}")
        k = min(top_k, z.shape[-1])
        kth = np.partition(z, -k, axis=-1)[..., [-k]]
        z = np.where(z < kth, -np.inf, z)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """One token per row of ``logits`` (B, vocab): an int32 tensor (B, 1) on the cpu device."""
    if logits.ndim != 2:
        raise ValueError(f"sample_next: expected logits of shape (B, vocab), got {logits.shape}")
    p = probabilities(logits.detach().numpy(), temperature, top_k)
    u = rand(p.shape[0], 1, device="cpu").numpy().astype(np.float64)
    cdf = np.cumsum(p, axis=-1)
    picks = np.minimum((cdf < u * cdf[:, -1:]).sum(axis=-1, keepdims=True), p.shape[-1] - 1)
    return tensor(picks, dtype=int32, device="cpu")
