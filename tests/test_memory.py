"""What a training step keeps in memory: the bytes the graph holds after forward and the peaks of forward and
backward, counted by the backend's statistics (``memory_stats``: live storages) on every device. The bounds are
PyTorch's: a node keeps what its backward rule needs and nothing more (benchmarks/gpt_memory.py compares the two
engines category by category)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from vkblas.models import GPT, GPTConfig
from vkblas.ops import conv as conv_ops


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


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_repeated_eager_steps_hold_nothing_past_the_step(device: str, loss: str) -> None:
    """Until the next sync point a device-side target check keeps a view of the caller's target, not a masked copy
    of it: a copy held per step grew memory without a sync, and on Vulkan shifted the pool's reuse order so that
    the step's dispatches bound new combinations of buffers (a bind group created per dispatch)."""
    vb.manual_seed(0)
    model = vb.nn.Linear(8, 4).to(device)
    opt = vb.optim.Adam(model.parameters(), lr=1e-3)
    x, y = randn(device, 3, 8), vb.tensor([0, -100, 3], device=device)
    fn = F.cross_entropy if loss == "cross_entropy" else (lambda z, t: F.nll_loss(F.log_softmax(z, 1), t))

    def step() -> None:
        opt.zero_grad()
        fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    backend = stats(device)
    before = backend.memory_stats()["allocated"]
    for _ in range(4):  # no sync in between
        step()
    assert backend.memory_stats()["allocated"] == before


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


def test_a_gpts_forward_keeps_what_pytorchs_does_per_layer() -> None:
    """After forward, a GPT holds per layer what PyTorch's nanoGPT saves: 16 tensors of (B*T, C) floats (both
    layer norms' inputs and outputs, q/k/v, the attention's output, the MLP's 4C input and GELU output). The
    attention writes its output (B, T, H, hs) in memory, as PyTorch's kernels do, so the block's
    ``transpose(1, 2).contiguous()`` is a view and ``c_proj`` saves the tensor the attention saves (17 while it
    wrote (B, H, T, hs) and the block copied it). Then ln_f's input and output, the logits (the caller's, which
    cross-entropy saves) and per-row statistics. Before nodes held edges instead of inputs, each block also kept its
    two residual branches' outputs alive (19 per layer)."""
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=256, dropout=0.0, bias=False)
    vb.manual_seed(0)
    model = GPT(cfg).to("cpu")
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, cfg.block_size + 1))
    x, y = vb.tensor(tokens[:, :-1], device="cpu"), vb.tensor(tokens[:, 1:], device="cpu")
    before = allocated("cpu")
    logits, loss = model(x, y)
    held = allocated("cpu") - before
    per_tensor = x.numel() * cfg.n_embd * 4
    # per row: each layer norm's mean and rstd, each attention's log-sum-exp per head; and a few small tensors
    # (the loss's per-row pairs, the targets, the dropout state)
    rows_stats = x.numel() * 4 * (2 * (2 * cfg.n_layer + 1) + cfg.n_head * cfg.n_layer) + 2048
    expected = (16 * cfg.n_layer + 2) * per_tensor + logits.numel() * 4
    assert expected <= held <= expected + rows_stats, (held, expected, per_tensor)


def test_conv2d_keeps_its_input_and_weight_and_a_budget_of_columns(monkeypatch) -> None:
    """conv2d saves its input and weight (the caller's) and nothing else, and its forward and backward hold one
    chunk of images' im2col columns (and the chunk's GEMM result or gradient copy) at a time. It held the whole
    batch's columns for backward, and backward made a second set for the input gradient."""
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 64 * 1024)
    x, w, b = randn("cpu", 32, 8, 12, 12, grad=True), randn("cpu", 16, 8, 3, 3, grad=True), randn("cpu", 16, grad=True)
    columns = x.shape[0] * 8 * 9 * 100 * 4  # the whole batch's: 14x the budget
    before = allocated("cpu")
    y, peak = peak_above("cpu", lambda: F.conv2d(x, w, b))
    out = y.numel() * 4
    assert allocated("cpu") - before == out
    assert peak <= out + 2 * conv_ops.COLUMN_BUDGET < columns, peak
    grads = (x.numel() + w.numel() + b.numel()) * 4
    _, peak = peak_above("cpu", lambda: y.backward(vb.ones(*y.shape, device="cpu")))
    assert peak <= out + grads + w.numel() * 4 + 3 * conv_ops.COLUMN_BUDGET < columns, peak


def test_a_cnns_step_peaks_at_its_activations_not_its_columns(monkeypatch) -> None:
    """The issue's CNN (conv 1->32, ReLU, conv 32->64, ReLU, max-pool, fc 9216->128, ReLU, fc): the step peaks in
    the second ReLU's backward, holding the first ReLU's output (conv2's input), the second's (its saved output)
    and the gradient into and out of it, beside the parameters' gradients and at most a budget of columns. At batch
    512 that is 263 MiB, under PyTorch CPU's 275 (``benchmarks/speed.py --memory``); with the whole batch's columns
    in the graph, and ReLU saving its input beside the conv, it was 779 MiB. Here batch 64, and the budget scaled
    with it (the default's 32 MiB at 512 images: 4 MiB), so conv2's columns are still two chunks."""
    from vkblas import nn

    batch = 64
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", conv_ops.COLUMN_BUDGET * batch // 512)
    vb.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    ).to("cpu")
    x = randn("cpu", batch, 1, 28, 28)
    y = vb.tensor(np.arange(batch) % 10, device="cpu")
    _, peak = peak_above("cpu", lambda: F.cross_entropy(model(x), y).backward())
    act1, act2 = batch * 32 * 26 * 26 * 4, batch * 64 * 24 * 24 * 4
    params = sum(p.numel() for p in model.parameters()) * 4
    assert peak <= act1 + 3 * act2 + params + conv_ops.COLUMN_BUDGET, (peak, act1, act2, params)
