"""vkblas.utils.checkpoint.checkpoint (activation checkpointing) and GPTConfig(activation_checkpointing=True):
the same loss and gradients as without it, dropout included (the recomputation replays the generator), on cpu and
vulkan; what it accepts and refuses; and the pool's peak live bytes, lower with it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import requires_vulkan
from vkblas import accelerator, nn
from vkblas.models import GPT, GPTConfig
from vkblas.utils.checkpoint import checkpoint

TINY = dict(n_layer=3, n_head=2, n_embd=16, block_size=8, vocab_size=29, bias=True)


def gpt_step(device: str, ck: bool, dropout: float, seed: int = 0) -> tuple[float, dict[str, np.ndarray], Any]:
    """Loss, every parameter's gradient and the generator's state after one forward and backward."""
    vb.manual_seed(seed)
    model = GPT(GPTConfig(**TINY, dropout=dropout, activation_checkpointing=ck)).to(device)
    x = np.random.default_rng(seed).integers(0, TINY["vocab_size"], (2, 8))
    _, loss = model(vb.tensor(x, device=device), vb.tensor(np.roll(x, 1, 1), device=device))
    loss.backward()
    grads = {n: p.grad.numpy() for n, p in model.named_parameters()}
    return loss.item(), grads, vb.random.default_generator.get_state()


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gpt_gradients_equal_without_checkpointing(device: str, dropout: float) -> None:
    plain, ck = gpt_step(device, False, dropout), gpt_step(device, True, dropout)
    assert ck[0] == plain[0]
    assert ck[1].keys() == plain[1].keys()
    for name, g in plain[1].items():
        # the same kernels on the same numbers in the same order: equal, not merely close
        np.testing.assert_array_equal(ck[1][name], g, err_msg=name)
        assert np.abs(g).max() > 0, name  # every parameter trains
    # the recomputation restores the generator afterwards: later draws are the ones without checkpointing
    assert ck[2] == plain[2]


@pytest.mark.parametrize("preserve", [True, False])
def test_dropout_replayed_exactly_in_a_plain_function(device: str, preserve: bool) -> None:
    """With the generator replayed the gradients are exactly those without checkpointing; without the replay
    (preserve_rng_state=False) the recomputation draws other masks and they differ, so the replay is what works."""
    vb.manual_seed(3)
    lin = nn.Linear(16, 16).to(device)
    x = vb.randn(4, 16, device=device, requires_grad=True)

    def f(t: vb.Tensor) -> vb.Tensor:
        return nn.functional.dropout(lin(t).tanh(), 0.5) * 3

    grads = []
    for use in (False, True):
        vb.manual_seed(11)
        x.grad, lin.weight.grad, lin.bias.grad = None, None, None
        y = checkpoint(f, x, use_reentrant=False, preserve_rng_state=preserve) if use else f(x)
        (y * y).sum().backward()
        grads.append([x.grad.numpy(), lin.weight.grad.numpy(), lin.bias.grad.numpy()])
    for a, b in zip(*grads, strict=True):
        if preserve:
            np.testing.assert_array_equal(a, b)
        else:
            assert not np.allclose(a, b)


def test_several_outputs_kwargs_and_values_passed_through(device: str) -> None:
    vb.manual_seed(0)
    w = vb.randn(3, 3, device=device, requires_grad=True)  # a leaf taken from outside (a parameter)
    a = vb.randn(2, 3, device=device, requires_grad=True)
    base = vb.randn(2, 3, device=device, requires_grad=True)
    idx = vb.tensor([1, 0], device=device)

    def f(x: vb.Tensor, k: int, *, y: vb.Tensor, ind: vb.Tensor) -> tuple[Any, ...]:
        h = (x @ w).sin()
        return h * y, h.sum(1), k + 1, ind, x  # an int, an int tensor and an argument handed back

    def loss_of(outs: tuple[Any, ...]) -> vb.Tensor:
        return outs[0].sum() + (outs[1] ** 2).sum() + (outs[4] * 5).sum()

    # y is not a leaf: its gradient flows on, through the graph before the checkpoint, to base
    want = vb.grad(loss_of(f(a, 1, y=base * 2, ind=idx)), [a, w, base])
    outs = checkpoint(f, a, 1, y=base * 2, ind=idx, use_reentrant=False)
    assert isinstance(outs, tuple) and outs[2] == 2 and outs[3] is idx
    got = vb.grad(loss_of(outs), [a, w, base])
    for g, wnt in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), wnt.numpy(), rtol=1e-6, atol=1e-6)
    only_first = checkpoint(f, a, 1, y=base * 2, ind=idx)[0]  # other outputs unused: no gradient from them
    np.testing.assert_allclose(
        vb.grad(only_first.sum(), [w])[0].numpy(), vb.grad(f(a, 1, y=base * 2, ind=idx)[0].sum(), [w])[0].numpy()
    )


def test_parameters_get_gradients_when_no_argument_requires_grad(device: str) -> None:
    """Non-reentrant semantics: the reentrant variant of PyTorch gives the parameters no gradient here."""
    lin = nn.Linear(4, 2).to(device)
    x = vb.ones(3, 4, device=device)
    checkpoint(lin, x).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.full((2, 4), 3.0), rtol=1e-6)
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(2, 3.0), rtol=1e-6)


def test_retain_graph_recomputes_for_each_backward(device: str) -> None:
    x = vb.tensor([1.0, 2.0], device=device, requires_grad=True)
    calls = []

    def f(t: vb.Tensor) -> vb.Tensor:
        calls.append(1)
        return t * t

    y = checkpoint(f, x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    assert len(calls) == 3  # the first pass and one recomputation per backward


def test_without_grad_it_just_calls(device: str) -> None:
    x = vb.ones(2, device=device, requires_grad=True)
    calls = []
    with vb.no_grad():
        y = checkpoint(lambda t: calls.append(1) or t * 2, x)
    assert not y.requires_grad and len(calls) == 1


def test_a_tensor_computed_with_grad_outside_is_refused(device: str) -> None:
    x = vb.ones(2, device=device, requires_grad=True)
    h = x * 3  # has a grad_fn: would need the graph outside the checkpoint
    with pytest.raises(RuntimeError, match=r"shape \(2,\) that was computed with grad outside it; pass it as an"):
        checkpoint(lambda t: t * h, x)


def test_a_recomputation_that_differs_is_refused(device: str) -> None:
    a = vb.ones(2, device=device, requires_grad=True)
    b = vb.ones(3, device=device, requires_grad=True)
    seen: list[int] = []

    def f(t: vb.Tensor) -> vb.Tensor:
        seen.append(1)
        return t * (a.sum() if len(seen) == 1 else b.sum())

    y = checkpoint(f, vb.ones(2, device=device))
    with pytest.raises(RuntimeError, match=r"recomputation used a tensor of shape \(3,\) .* the first pass did not"):
        y.sum().backward()


@requires_vulkan
def test_checkpointing_lowers_the_pools_peak() -> None:
    """Peak live bytes of a forward and backward of a GPT whose activations outweigh its weights."""
    cfg = dict(n_layer=6, n_head=2, n_embd=32, block_size=64, vocab_size=64, dropout=0.0)
    x = vb.tensor(np.random.default_rng(0).integers(0, 64, (8, 64)), device="vulkan")
    peaks = {}
    for ck in (False, True):
        vb.manual_seed(0)
        model = GPT(GPTConfig(**cfg, activation_checkpointing=ck)).to("vulkan")
        vb.synchronize("vulkan")
        accelerator.reset_peak_memory_stats("vulkan")
        base = accelerator.memory_allocated("vulkan")
        _, loss = model(x, x)
        loss.backward()
        loss.item()
        peaks[ck] = accelerator.max_memory_allocated("vulkan") - base
        del model, loss
    # 6 blocks' activations (~29 floats a token a block) against about one block's: less than half the peak
    assert peaks[True] < 0.5 * peaks[False], peaks
