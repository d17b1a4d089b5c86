"""What a training step keeps in memory: the bytes the graph holds after forward and the peaks of forward and
backward, counted by the backend's statistics (``memory_stats``: live storages) on every device. The bounds are
PyTorch's: a node keeps what its backward rule needs and nothing more (benchmarks/gpt_memory.py compares the two
engines category by category)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import vkblas as vb
import vkblas.nn.functional as F


def stats(device: str) -> Any:
    return vb.zeros(1, device=device)._backend


def peak_above(device: str, fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the most bytes allocated at once while it ran, above what was allocated before."""
    backend = stats(device)
    backend.synchronize()
    backend.reset_peak_memory_stats()
    before = backend.memory_stats()["allocated"]
    out = fn()
    backend.synchronize()
    return out, backend.memory_stats()["peak_allocated"] - before


def allocated(device: str) -> int:
    backend = stats(device)
    backend.synchronize()
    return backend.memory_stats()["allocated"]


def randn(device: str, *shape: int, grad: bool = False) -> vb.Tensor:
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return vb.tensor(a, device=device, requires_grad=grad)


def test_cross_entropy_of_class_indices_makes_no_copy_of_the_logits(device: str) -> None:
    """The fused node's forward is one pass over the logits: no log-probabilities (N, C) beside them, which the
    composition of ``log_softmax`` made (and threw away) before."""
    x = randn(device, 64, 2000, grad=True)
    y = vb.tensor(np.arange(64) % 2000, device=device)
    loss, peak = peak_above(device, lambda: F.cross_entropy(x, y))
    assert peak < 0.1 * x.numel() * 4, peak
    _, peak = peak_above(device, loss.backward)
    assert peak <= 1.2 * x.numel() * 4, peak  # the logits' gradient, and no more
