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


def test_a_node_keeps_only_what_its_rule_saves(device: str) -> None:
    """An add saves nothing, so its input is freed with the last reference outside the graph (a residual
    branch's output in a transformer block); the gradient still reaches the leaf through the recorded edge."""
    w = randn(device, 128, 128, grad=True)
    before = allocated(device)
    a = w + 1.0
    b = a + 1.0
    del a
    assert allocated(device) - before == b.numel() * 4
    b.sum().backward()
    assert np.all(w.grad.numpy() == 1)


def test_an_in_place_op_after_a_use_leaves_that_uses_gradient_alone(device: str) -> None:
    """``z = y + 1`` took y before ``y.mul_(3)``: z's gradient flows into y's history as it was then (PyTorch's
    edges), not through the multiplication recorded later (which once read y.grad_fn at backward time)."""
    x = randn(device, 5, grad=True)
    y = x * 2.0
    z = y + 1.0
    y.mul_(3.0)
    (z.sum() + y.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(5, 8.0, np.float32))  # 2 from z, 6 from y
