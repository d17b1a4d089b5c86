"""Tensors larger than one storage binding (``backend/vulkan/large.py``), against the cpu backend.

Most tests run on a Vulkan device whose pool pretends the binding limit is 256 KiB and the buffer limit 1 MiB, so
tensors of a few MB take every path (windows, segments, pieces, workspaces, staging) at lavapipe speed; every
primitive is covered, scan, sort, scatter and attention included (or its clear refusal where a piece cannot be
cut: one sort row, one attention head beyond a binding). A few real
ones run on the device as it is, above lavapipe's 128 MiB binding limit: PyTorch's MNIST example network evaluated
at batch 1000 (its conv activations), and a tensor above the 2 GiB buffer limit only with ``VKBLAS_BIG_TESTS=1``
(memory: ~7 GB; the lead's GPU check runs it).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from conftest import requires_vulkan
from vkblas.backend.base import UnsupportedError
from vkblas.backend.vulkan.memory import LargeStorage
from vkblas.tensor import from_host

pytestmark = [requires_vulkan, pytest.mark.vulkan]
BINDING, BUFFER = 1 << 18, 1 << 20


@pytest.fixture(scope="module")
def small() -> Any:
    """A Vulkan backend with small binding and buffer limits (the same adapter, the same kernels)."""
    from vkblas.backend.vulkan import VulkanBackend

    return VulkanBackend(limits={"max-storage-buffer-binding-size": BINDING, "max-buffer-size": BUFFER})


RNG = np.random.default_rng(5)


def on(backend: Any, a: np.ndarray, requires_grad: bool = False) -> vb.Tensor:
    dtype = vb.float32 if a.dtype.kind == "f" else vb.int32 if a.dtype.kind in "iu" else vb.bool
    t = from_host(a, dtype, backend)
    return t.requires_grad_() if requires_grad else t


def cpu(a: np.ndarray, requires_grad: bool = False) -> vb.Tensor:
    dtype = vb.float32 if a.dtype.kind == "f" else None
    return vb.tensor(a, dtype=dtype, device="cpu", requires_grad=requires_grad)


def big(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def same(got: vb.Tensor, want: vb.Tensor, rtol: float = 2e-5, atol: float = 2e-5) -> None:
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_storage_is_split_and_round_trips(small: Any) -> None:
    a = big(700, 900)  # 2.5 MB: 3 segments of 1 MiB, no view of it fits one 256 KiB binding
    t = on(small, a)
    assert len(t._view.storage.segments) == 3
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t[350:352].numpy(), a[350:352])  # a small view straddling a segment boundary
    np.testing.assert_array_equal(t.T[5].numpy(), a.T[5])  # a strided one across all segments


def test_elementwise_broadcasting_views_and_in_place(small: Any) -> None:
    a, row, col = big(600, 800), big(800), big(600, 1)
    t = on(small, a)
    same(t * on(small, row) + on(small, col), cpu(a) * cpu(row) + cpu(col))
    same((t.T * 2).contiguous(), (cpu(a).T * 2).contiguous())
    same(vb.where(t > 0, t, on(small, row)).exp(), vb.where(cpu(a) > 0, cpu(a), cpu(row)).exp(), rtol=1e-4)
    t.mul_(0.5).add_(on(small, row))
    same(t, cpu(a) * 0.5 + cpu(row))
    same(vb.cat([t, t[:100]]), vb.cat([cpu(a) * 0.5 + cpu(row), (cpu(a) * 0.5 + cpu(row))[:100]]))


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "prod", "mean"])
def test_reductions_over_every_layout(small: Any, op: str) -> None:
    a = RNG.uniform(0.9, 1.1, (600, 800)).astype(np.float32)
    t, c = on(small, a), cpu(a)
    for dim in (None, 0, 1, (0, 1)) if op != "prod" else (None, 0, 1):  # prod takes one dim
        for tt, cc in ((t, c), (t.T, c.T)):
            got = getattr(tt, op)(dim) if dim is not None else getattr(tt, op)()
            want = getattr(cc, op)(dim) if dim is not None else getattr(cc, op)()
            same(got, want, rtol=5e-4, atol=1e-3)


def test_argmax_and_max_with_indices_across_pieces(small: Any) -> None:
    a = big(600, 800)
    a[123, 456] = 50.0  # unique maxima: indices must agree exactly
    a[599, :] = 60.0  # ties along a row: the first index wins
    t, c = on(small, a), cpu(a)
    assert t.argmax().item() == c.argmax().item()
    np.testing.assert_array_equal(t.argmax(0).numpy(), c.argmax(0).numpy())
    np.testing.assert_array_equal(t.argmin(1).numpy(), c.argmin(1).numpy())
    values, indices = t.max(1)
    np.testing.assert_array_equal(indices.numpy(), c.max(1).indices.numpy())
    same(values, c.max(1).values)


def test_matmul_with_large_operands_and_output(small: Any) -> None:
    a, w = big(500, 700), big(700, 600)
    for ta, tw, ca, cw in [
        (on(small, a), on(small, w), cpu(a), cpu(w)),  # all three large
        (on(small, a[:64]), on(small, w), cpu(a[:64]), cpu(w)),  # a strided-slice-like wide operand
        (on(small, w).T, on(small, a).T, cpu(w).T, cpu(a).T),  # transposed operands
    ]:
        same(ta @ tw, ca @ cw, rtol=1e-4, atol=1e-3)
    x = big(3, 200, 300)  # batched
    same(on(small, x) @ on(small, w[:300, :400]), cpu(x) @ cpu(w[:300, :400]), rtol=1e-4, atol=1e-3)


def test_matmul_of_large_operands_with_the_autotuner_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The autotuner (on for every GPU, off for lavapipe unless asked) times its candidates on the call's operands:
    a large tensor's matmul is cut into pieces first, and those are what it may time."""
    from vkblas.backend.vulkan import VulkanBackend

    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tuned = VulkanBackend(limits={"max-storage-buffer-binding-size": BINDING, "max-buffer-size": BUFFER})
    a, w = big(500, 700), big(700, 600)
    same(on(tuned, a) @ on(tuned, w), cpu(a) @ cpu(w), rtol=1e-4, atol=1e-3)


def test_gather_index_select_embedding_and_scatter_add(small: Any) -> None:
    table = big(5000, 64)  # 1.3 MB: the embedding table is the large target
    idx = RNG.integers(0, 5000, (32, 16))
    emb, cemb = on(small, table, True), cpu(table, True)
    out, cout = F.embedding(on(small, idx), emb), F.embedding(cpu(idx), cemb)
    same(out, cout)
    g = big(32, 16, 64)
    out.backward(on(small, g))
    cout.backward(cpu(g))
    same(emb.grad, cemb.grad, atol=1e-4)  # scatter_add into the large gradient
    gi = RNG.integers(0, 5000, (7, 64))
    same(vb.gather(on(small, table), 0, on(small, gi)), vb.gather(cpu(table), 0, cpu(gi)))
    with pytest.raises(IndexError, match="out of bounds"):
        on(small, table)[on(small, np.array([1, 5000]))].numpy()


def test_scans_sorts_and_scatters_across_pieces(small: Any) -> None:
    """The primitives of issue 14 on tensors larger than a binding: scan (rows cut, a long axis halved with a
    carry), sort (rows cut, a strided row through compact copies), scatter with every reduction."""
    a = RNG.uniform(0.99, 1.01, (600, 800)).astype(np.float32)
    t, c = on(small, a, True), cpu(a, True)
    for dim in (0, 1):
        same(t.cumsum(dim), c.cumsum(dim), rtol=1e-4, atol=1e-3)
        same(t.cumprod(dim), c.cumprod(dim), rtol=1e-3)
    same(t.reshape(-1).cumsum(0), c.reshape(-1).cumsum(0), rtol=1e-4, atol=0.5)  # one axis of 480000
    t.cumsum(1).sum().backward()  # the reversed scan of the gradient
    c.cumsum(1).sum().backward()
    same(t.grad, c.grad, rtol=1e-4, atol=1e-2)
    for dim in (0, 1):
        got, want = t.sort(dim, descending=True), c.sort(dim, descending=True)
        same(got.values, want.values)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(t.topk(5, 0).indices.numpy(), c.topk(5, 0).indices.numpy())
    idx = RNG.integers(0, 600, (600, 800))
    src = big(600, 800)
    for reduce in ("sum", "prod", "amax", "amin", "mean"):
        got = on(small, a).scatter_reduce(0, on(small, idx), on(small, src), reduce)
        same(got, cpu(a).scatter_reduce(0, cpu(idx), cpu(src), reduce), rtol=1e-4, atol=1e-4)
    perm = np.argsort(RNG.random((600, 800)), 0)  # distinct indices per column: assign has one winner
    same(on(small, a).scatter(0, on(small, perm), on(small, src)), cpu(a).scatter(0, cpu(perm), cpu(src)))


def test_a_sort_row_beyond_a_binding_is_refused_naming_the_limit(small: Any) -> None:
    with pytest.raises(UnsupportedError, match=f"sort: .*binding limit of {BINDING} bytes"):
        on(small, big(600 * 800)).sort()


def test_attention_forward_and_backward_across_pieces(small: Any) -> None:
    """Batches, then heads, halved; the dropout mask is the one the whole draws (the same as on the cpu)."""
    q, k, v = big(4, 4, 256, 64), big(4, 4, 192, 64), big(4, 4, 192, 32)  # 1 MiB of queries, 64 KiB a head
    mask = RNG.random((256, 192)) > 0.2
    for kw in ({"is_causal": True}, {"attn_mask": mask, "dropout_p": 0.3}):
        outs, grads = [], []
        for make in (lambda x, g=True: on(small, x, g), lambda x, g=True: cpu(x, g)):
            tq, tk, tv = make(q), make(k), make(v)
            extra = {"attn_mask": make(mask, False)} if "attn_mask" in kw else {}
            args = {**kw, **extra, "generator": vb.Generator(7)}
            out = F.scaled_dot_product_attention(tq, tk, tv, **args)
            out.backward(make(big(4, 4, 256, 32) * 0 + 1, False))
            outs.append(out)
            grads.append((tq.grad, tk.grad, tv.grad))
        same(outs[0], outs[1], rtol=1e-4, atol=1e-4)
        for g_small, g_cpu in zip(*grads, strict=True):
            same(g_small, g_cpu, rtol=1e-3, atol=1e-3)


def test_attention_on_a_gpts_views_goes_through_compact_copies(small: Any) -> None:
    """q, k, v as a GPT passes them (heads of one (T, 3C) tensor: each spans all of its rows, more than a binding)
    and the output (T, H, hs) in memory: the heads are halved until their compact copies fit, then staged."""
    b, t, h, hs = 1, 256, 8, 64  # x: 1.5 MiB; one head's rows span all of it; q compact: 512 KiB, half: 256 KiB
    x = big(b, t, 3 * h * hs)
    for kw in ({"is_causal": True}, {"dropout_p": 0.3}):
        outs, grads = [], []
        for make in (lambda a: on(small, a, True), lambda a: cpu(a, True)):
            tx = make(x)
            q, k, v = (p.view(b, t, h, hs).transpose(1, 2) for p in tx.split(h * hs, 2))
            y = F.scaled_dot_product_attention(q, k, v, **kw, generator=vb.Generator(7))
            y.transpose(1, 2).contiguous().view(b, t, h * hs).sum().backward()
            outs.append(y)
            grads.append(tx.grad)
        same(outs[0], outs[1], rtol=1e-4, atol=1e-4)
        same(grads[0], grads[1], rtol=1e-3, atol=1e-3)


def test_attention_of_one_head_beyond_a_binding_is_refused_naming_the_limit(small: Any) -> None:
    q = on(small, big(1, 1, 1200, 64))  # 300 KiB: one (batch, head)
    with pytest.raises(UnsupportedError, match=f"attention: .*binding limit of {BINDING} bytes"):
        F.scaled_dot_product_attention(q, q, q).numpy()


def test_conv_pool_and_their_gradients(small: Any) -> None:
    x, w, b = big(8, 4, 40, 40), big(6, 4, 3, 3), big(6)  # cols of 8 x 36 x 1444: 1.7 MB
    tx, tw, tb = on(small, x, True), on(small, w, True), on(small, b, True)
    cx, cw, cb = cpu(x, True), cpu(w, True), cpu(b, True)
    y = F.max_pool2d(vb.conv2d(tx, tw, tb, padding=1).relu(), 2)
    cy = F.max_pool2d(vb.conv2d(cx, cw, cb, padding=1).relu(), 2)
    same(y, cy, rtol=1e-4, atol=1e-4)
    y.sum().backward()
    cy.sum().backward()
    same(tx.grad, cx.grad, rtol=1e-4, atol=1e-3)
    same(tw.grad, cw.grad, rtol=1e-4, atol=1e-2)
    same(tb.grad, cb.grad, rtol=1e-4, atol=1e-2)


def test_linear_gradients_of_large_operands(small: Any) -> None:
    """A Linear layer's weight and bias gradients from one GEMM where the operands fit their bindings; cut into
    pieces (``large.py``), the matmul and then the bias gradient's own reduction."""
    x, g = big(3000, 64), big(3000, 40)  # 768 KB and 480 KB: beyond the 256 KiB binding
    w, b = big(40, 64), big(40)
    tx, tw, tb = on(small, x, True), on(small, w, True), on(small, b, True)
    cx, cw, cb = cpu(x, True), cpu(w, True), cpu(b, True)
    y, cy = F.linear(tx, tw, tb), F.linear(cx, cw, cb)
    same(y, cy, rtol=1e-4, atol=1e-4)
    y.backward(on(small, g))
    cy.backward(cpu(g))
    for got, want in ((tx.grad, cx.grad), (tw.grad, cw.grad), (tb.grad, cb.grad)):
        same(got, want, rtol=1e-4, atol=1e-2)


def test_softmax_cross_entropy_and_random(small: Any) -> None:
    logits, target = big(3000, 100), RNG.integers(0, 100, 3000)
    same(on(small, logits).log_softmax(-1), cpu(logits).log_softmax(-1), atol=1e-4)
    same(F.cross_entropy(on(small, logits), on(small, target)), F.cross_entropy(cpu(logits), cpu(target)), atol=1e-5)
    u = vb.empty(400, 900, device="cpu").uniform_(generator=vb.Generator(3))
    uv = from_host(np.zeros((400, 900), np.float32), vb.float32, small).uniform_(generator=vb.Generator(3))
    np.testing.assert_array_equal(uv.numpy(), u.numpy())  # the same counter-based numbers, piece by piece


def test_layer_norm_beyond_a_binding_takes_the_composition(small: Any) -> None:
    """Rows in a storage of several segments: the fused kernel cannot bind them, the composition (elementwise and
    reduce, which split) gives the same values and gradients."""
    x, w, b, g = big(700, 300), big(300), big(300), big(700, 300)
    tx, tw, tb = on(small, x, True), on(small, w, True), on(small, b, True)
    cx, cw, cb = cpu(x, True), cpu(w, True), cpu(b, True)
    y, cy = F.layer_norm(tx, (300,), tw, tb), F.layer_norm(cx, (300,), cw, cb)
    same(y, cy, atol=1e-4)
    y.backward(on(small, g))
    cy.backward(cpu(g))
    for got, want in ((tx, cx), (tw, cw), (tb, cb)):
        same(got.grad, want.grad, rtol=1e-4, atol=1e-3)


def test_a_reduction_whose_two_partial_outputs_exceed_a_binding(small: Any) -> None:
    """The reduced dim spans the most bytes, and the output is more than half a binding: halving the reduced dim
    would need a (2, *out) workspace larger than a binding, so a kept dim is halved first (this recursed forever:
    a GPT's bias gradients over batch * time at a large vocabulary)."""
    a = big(3, 40000)  # 480 KB; the output, 160 KB, is more than half of the 256 KiB binding
    for op in ("sum", "amax", "amin", "prod"):
        same(getattr(on(small, a), op)(0), getattr(cpu(a), op)(0), rtol=1e-5)
    same(on(small, a).argmax(0), cpu(a).argmax(0))
    g = big(1, 64, 5000)  # the gradient of a broadcast (1, 5000) bias, summed over 64 rows
    same(on(small, g).sum((0, 1)), cpu(g).sum((0, 1)), rtol=1e-4, atol=1e-4)


def test_gpt_training_step_with_every_large_op(small: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPT whose token embedding (5000 x 64, tied to the head: 1.3 MB in two segments), logits and their
    gradient (2 x 32 x 5000: 1.3 MB) and AdamW state all exceed the 256 KiB binding, as the 1.2B GPT's logits exceed
    an H200's 2 GiB one: embedding forward and backward (scatter into the large gradient), the head's matmul,
    cross-entropy over 5000 classes, AdamW on the embedding, with dropout and activation checkpointing on -- the
    same numbers as on the cpu."""
    from vkblas import backend
    from vkblas.models import GPT, GPTConfig

    monkeypatch.setitem(backend._instances, backend._default_vulkan_key(), small)  # "vulkan" means `small` here
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=64, block_size=32, vocab_size=5000, dropout=0.1)
    cfg.activation_checkpointing = True
    x, y = RNG.integers(0, 5000, (2, 32)), RNG.integers(0, 5000, (2, 32))
    results = []
    for dev in ("vulkan", "cpu"):
        vb.manual_seed(0)
        model = GPT(cfg).to(dev)
        opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95))
        start = model.lm_head.weight.detach().numpy()
        _, loss = model(vb.tensor(x, device=dev), vb.tensor(y, device=dev))
        loss.backward()
        grads = {n: p.grad.numpy() for n, p in model.named_parameters()}
        opt.step()
        results.append((loss.item(), grads, {n: p.detach().numpy() for n, p in model.named_parameters()}, model))
    assert isinstance(results[0][3].lm_head.weight._view.storage, LargeStorage)
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    for name, g in results[1][1].items():
        np.testing.assert_allclose(results[0][1][name], g, rtol=1e-3, atol=1e-5, err_msg=name)
        # Adam's first step is lr * g / (|g| + eps): where |g| is near eps, tiny differences in g move it, so the
        # parameters agree to a tenth of the step (a wrong or missing update is off by a whole one)
        np.testing.assert_allclose(results[0][2][name], results[1][2][name], atol=1e-3, err_msg=name)
    moved = np.abs(results[0][2]["transformer.wte.weight"] - start)  # both runs start from the same seeded weights
    assert np.median(moved) > 5e-3  # the step was taken on the large embedding (lr 1e-2)


# ---------------------------------------------------------------- real sizes, above lavapipe's 128 MiB binding
def mnist_example_net() -> vb.nn.Module:
    """PyTorch's examples/mnist network (conv 32, conv 64, max pool, dropout, fc 128, fc 10)."""
    nn = vb.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )


def test_pytorch_mnist_example_evaluates_at_batch_1000() -> None:
    """conv2's output for 1000 images is 147 MB, its im2col columns 663 MB: both beyond one 128 MiB binding."""
    vb.manual_seed(0)
    # built on cpu whatever the default device is (a GPU's Vulkan adapter is the default there)
    net = mnist_example_net().to("cpu").eval()
    images = RNG.standard_normal((1000, 1, 28, 28)).astype(np.float32)
    with vb.no_grad():
        want = net(vb.tensor(images, device="cpu")).numpy()
        got = net.to("vulkan")(vb.tensor(images, device="vulkan")).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == want.argmax(1)).all()


BIG = pytest.mark.skipif(os.environ.get("VKBLAS_BIG_TESTS") != "1", reason="GBs of memory: set VKBLAS_BIG_TESTS=1")


def _beyond(nbytes: int) -> None:
    """A float32 tensor of ``nbytes`` + 4 MiB on the device as it is: values, a tail slice and a sum."""
    n = nbytes // 4 + (1 << 20)
    x = vb.arange(n, dtype=vb.float32, device="vulkan")
    y = (x * 2 + 1)[n - 5 :]
    np.testing.assert_array_equal(y.numpy(), (np.arange(n - 5, n, dtype=np.float64) * 2 + 1).astype(np.float32))
    ones = vb.ones(n, device="vulkan")
    assert ones.sum().item() == pytest.approx(n, rel=1e-6)
    assert x[n // 2 :].amax().item() == float(np.float32(n - 1))


@BIG
def test_a_tensor_beyond_the_binding_limit() -> None:
    """The H200's binding limit is 2 GiB: its MNIST activations fit, this does not."""
    _beyond(vb.backend.get("vulkan").pool.binding)


@BIG
def test_a_tensor_beyond_the_buffer_limit() -> None:
    limit = vb.backend.get("vulkan").pool.limit
    if limit > 8 << 30:
        pytest.skip(f"max-buffer-size is {limit} bytes: a tensor beyond it would not fit in memory here")
    x = vb.empty(limit // 4 + 16, device="vulkan")
    assert len(x._view.storage.segments) == 2
    _beyond(limit)
