"""Drawing the next token from a row of logits, with a temperature and an optional top-k cut, on the logits' device
(``topk``, ``softmax`` and ``multinomial``, as nanoGPT does it), with draws from vkblas's generator, so
``vkblas.manual_seed`` makes generation reproducible on every device.

>>> import vkblas
>>> logits = vkblas.tensor([[0.0, 10.0, 0.0]], device="cpu")
>>> sample_next(logits, temperature=1.0, top_k=1).tolist()
[[1]]
"""

from __future__ import annotations

from ..ops.reduction import softmax
from ..ops.sampling import multinomial
from ..ops.sorting import topk
from ..tensor import Tensor


def probabilities(logits: Tensor, temperature: float, top_k: int | None) -> Tensor:
    """softmax(logits / temperature) over the last dim, with everything below the ``top_k``-th largest logit of a
    row set to probability 0 (ties with it are kept)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k}")
        kth = topk(z, min(top_k, z.shape[-1]), dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return softmax(z, dim=-1)


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """One token per row of ``logits`` (B, vocab): an int32 tensor (B, 1) on the logits' device."""
    if logits.ndim != 2:
        raise ValueError(f"sample_next: expected logits of shape (B, vocab), got {logits.shape}")
    return multinomial(probabilities(logits.detach(), temperature, top_k), 1)
