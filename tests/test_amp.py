"""vkblas.amp on cpu and vulkan: autocast's dtypes per op class, float32 gradients that match a float64 reference
within float16 error, the region's semantics (nesting, decorator, cache, threads, backward, checkpointing), the
error where float16 is unavailable, GradScaler against torch.amp.GradScaler, and a tiny GPT trained under it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from conftest import require_torch, requires_vulkan
from vkblas.amp import GradScaler, autocast
from vkblas.models import GPT, GPTConfig
from vkblas.utils.checkpoint import checkpoint

RNG = np.random.default_rng(0)


def _t(shape: tuple[int, ...], device: str, dtype: Any = vb.float32, requires_grad: bool = False) -> vb.Tensor:
    return vb.tensor(RNG.standard_normal(shape).astype(np.float32), device=device, dtype=dtype,
                     requires_grad=requires_grad)  # fmt: skip


def _x(d: str) -> vb.Tensor:
    return _t((2, 3), d)


def _w(d: str) -> vb.Tensor:
    return _t((4, 3), d)


def _h(d: str) -> vb.Tensor:
    return _t((2, 3), d, vb.float16)


def _pos(d: str) -> vb.Tensor:
    return (_t((2, 3), d).abs() + 0.5).half()


# (name, the op on its inputs, the dtype it returns under autocast); the inputs: float32 for the lowered ops
# (PyTorch's "lower precision" list), float16 for the float32 ones, either for the ones autocast leaves alone
LOWERED: list[tuple[str, Callable[[str], vb.Tensor]]] = [
    ("matmul", lambda d: vb.matmul(_x(d), _w(d).mT)),
    ("@", lambda d: _x(d) @ _w(d).mT),
    ("mm", lambda d: vb.mm(_x(d), _w(d).mT)),
    ("bmm", lambda d: vb.bmm(_t((2, 2, 3), d), _t((2, 3, 2), d))),
    ("linear", lambda d: F.linear(_x(d), _w(d), _t((4,), d))),
    ("nn.Linear", lambda d: vb.nn.Linear(3, 4).to(d)(_x(d))),
    ("conv1d", lambda d: F.conv1d(_t((1, 2, 5), d), _t((3, 2, 2), d), _t((3,), d))),
    ("conv2d", lambda d: F.conv2d(_t((1, 2, 4, 4), d), _t((3, 2, 2, 2), d), _t((3,), d))),
    ("conv_transpose2d", lambda d: F.conv_transpose2d(_t((1, 2, 3, 3), d), _t((2, 3, 2, 2), d))),
    ("sdpa", lambda d: F.scaled_dot_product_attention(_t((1, 2, 4, 8), d), _t((1, 2, 4, 8), d), _t((1, 2, 4, 8), d))),
    (
        "sdpa float mask",
        lambda d: F.scaled_dot_product_attention(
            _t((1, 4, 8), d), _t((1, 4, 8), d), _t((1, 4, 8), d), attn_mask=_t((4, 4), d)
        ),
    ),  # fmt: skip
    ("einsum (a bmm)", lambda d: vb.einsum("ij,kj->ik", _x(d), _w(d))),
]
FLOAT32: list[tuple[str, Callable[[str], vb.Tensor]]] = [
    ("softmax", lambda d: F.softmax(_h(d), -1)),
    ("Tensor.softmax", lambda d: _h(d).softmax(-1)),
    ("log_softmax", lambda d: F.log_softmax(_h(d), -1)),
    ("layer_norm", lambda d: F.layer_norm(_h(d), (3,))),
    ("nn.LayerNorm", lambda d: vb.nn.LayerNorm(3).to(d)(_h(d))),
    ("normalize", lambda d: F.normalize(_h(d))),
    ("cross_entropy", lambda d: F.cross_entropy(_h(d), vb.tensor([0, 2], device=d))),
    ("nll_loss", lambda d: F.nll_loss(_h(d), vb.tensor([0, 2], device=d))),
    ("mse_loss", lambda d: F.mse_loss(_h(d), _h(d))),
    ("l1_loss", lambda d: F.l1_loss(_h(d), _h(d))),
    ("bce_with_logits", lambda d: F.binary_cross_entropy_with_logits(_h(d), _pos(d) * 0)),
    ("sum", lambda d: _h(d).sum()),
    ("sum dim", lambda d: vb.sum(_h(d), 1)),
    ("prod", lambda d: _h(d).prod()),
    ("cumsum", lambda d: _h(d).cumsum(1)),
    ("cumprod", lambda d: vb.cumprod(_h(d), 1)),
    ("softplus", lambda d: F.softplus(_h(d))),
    ("exp", lambda d: _h(d).exp()),
    ("log", lambda d: vb.log(_pos(d))),
    ("pow", lambda d: _pos(d) ** 2),
    ("pow tensor", lambda d: vb.pow(_pos(d), _pos(d))),
    ("rsqrt", lambda d: _pos(d).rsqrt()),
    ("reciprocal", lambda d: _pos(d).reciprocal()),
    ("sinh", lambda d: _h(d).sinh()),
    ("cosh", lambda d: _h(d).cosh()),
    ("tan", lambda d: _h(d).tan()),
    ("asin", lambda d: (_pos(d) * 0.1).asin()),
    ("acos", lambda d: (_pos(d) * 0.1).acos()),
    ("erfinv", lambda d: (_pos(d) * 0.1).erfinv()),
]
UNCHANGED: list[tuple[str, Callable[[str], vb.Tensor], Any]] = [
    ("add float16", lambda d: _h(d) + _h(d), vb.float16),
    ("add float16 + float32 promotes", lambda d: _h(d) + _x(d), vb.float32),
    ("gelu", lambda d: F.gelu(_h(d)), vb.float16),
    ("relu", lambda d: F.relu(_h(d)), vb.float16),
    ("mean (not on PyTorch's list)", lambda d: _h(d).mean(), vb.float16),
    ("max", lambda d: _h(d).amax(), vb.float16),
    ("tanh", lambda d: _h(d).tanh(), vb.float16),
    ("float32 add", lambda d: _x(d) + 1, vb.float32),
    ("float32 softmax", lambda d: _x(d).softmax(-1), vb.float32),
    ("embedding", lambda d: F.embedding(vb.tensor([1, 0], device=d), _w(d)), vb.float32),
    ("exp_ in place", lambda d: _h(d).exp_(), vb.float16),
]


@pytest.mark.parametrize(("name", "op"), LOWERED, ids=[n for n, _ in LOWERED])
def test_lowered_ops_return_float16(device: str, name: str, op: Callable[[str], vb.Tensor]) -> None:
    assert op(device).dtype is vb.float32  # outside the region: as given
    with autocast(device):
        assert op(device).dtype is vb.float16
    with autocast(device, enabled=False):
        assert op(device).dtype is vb.float32


@pytest.mark.parametrize(("name", "op"), FLOAT32, ids=[n for n, _ in FLOAT32])
def test_float32_ops_upcast_float16(device: str, name: str, op: Callable[[str], vb.Tensor]) -> None:
    with autocast(device, dtype=vb.float16):  # the inputs are float16 (_h, _pos)
        out = op(device)
    assert out.dtype is vb.float32 and np.isfinite(out.detach().numpy()).all()


@pytest.mark.parametrize(("name", "op", "dtype"), UNCHANGED, ids=[n for n, _, _ in UNCHANGED])
def test_other_ops_keep_their_dtypes(device: str, name: str, op: Callable[[str], vb.Tensor], dtype: Any) -> None:
    with autocast(device):
        assert op(device).dtype is dtype


def test_mixed_dtype_matmul_runs_under_autocast(device: str) -> None:
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        _x(device) @ _h(device).mT  # PyTorch does not promote in matmul
    with autocast(device):
        assert (_x(device) @ _h(device).mT).dtype is vb.float16  # both operands float16 first


def test_autocast_is_per_device_type(device: str) -> None:
    other = "cpu" if device == "vulkan" else "vulkan"
    if other == "vulkan" and not any(d.startswith("vulkan") for d in vb.devices()):
        pytest.skip("no Vulkan adapter")
    with autocast(other):  # on for the other device type only
        assert (_x(device) @ _w(device).mT).dtype is vb.float32
        assert vb.amp.is_autocast_enabled(other) and not vb.amp.is_autocast_enabled(device)


def test_binary_cross_entropy_refuses_like_pytorch(device: str) -> None:
    x = (_pos(device) * 0.1).float()
    with autocast(device), pytest.raises(RuntimeError, match="binary_cross_entropy is unsafe to autocast"):
        F.binary_cross_entropy(x, x)
    with autocast(device), autocast(device, enabled=False):
        assert F.binary_cross_entropy(x, x).dtype is vb.float32


# ---------------------------------------------------------------- gradients
def _block(lib: Any, x: Any, w1: Any, b1: Any, w2: Any, g: Any, target: Any) -> Any:
    """linear -> gelu -> linear -> layer_norm -> attention -> cross-entropy: every op class autocast touches."""
    h = lib.gelu(lib.linear(x, w1, b1))
    z = lib.linear(h, w2)
    h = lib.layer_norm(z, (z.shape[-1],), g, None)
    q = h.reshape(1, 2, 4, 4)
    a = lib.sdpa(q, q, q, is_causal=True).reshape(8, 4)
    return lib.cross_entropy(a * 3.0 + h, target)


class _Vk:
    gelu, linear, layer_norm, cross_entropy = F.gelu, F.linear, F.layer_norm, F.cross_entropy
    sdpa = staticmethod(F.scaled_dot_product_attention)


def test_gradients_are_float32_and_match_float64(device: str) -> None:
    shapes = [(8, 6), (5, 6), (5,), (4, 5), (4,)]
    arrays = [RNG.standard_normal(s) * (0.5 if len(s) == 2 else 1.0) for s in shapes]
    target = RNG.integers(0, 4, 8)

    def run(dtype: Any, dev: str, amp: bool) -> tuple[float, list[Any], list[np.ndarray]]:
        leaves = [vb.tensor(a, device=dev, dtype=dtype, requires_grad=True) for a in arrays]
        with autocast(dev.split(":")[0], enabled=amp):
            loss = _block(_Vk, *leaves, vb.tensor(target, device=dev))
        loss.backward()
        return loss.item(), [t.grad.dtype for t in leaves], [t.grad.numpy().astype(np.float64) for t in leaves]

    ref_loss, _, ref = run(vb.float64, "cpu", False)
    loss32, _, g32 = run(vb.float32, device, False)
    loss16, dtypes, g16 = run(vb.float32, device, True)
    assert dtypes == [vb.float32] * 5 and isinstance(loss16, float)
    assert loss16 == pytest.approx(ref_loss, rel=5e-3)
    for want, got, full in zip(ref, g16, g32, strict=True):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, atol=2e-2 * scale, rtol=0)  # float16 storage: ~1e-3 relative per op
        np.testing.assert_allclose(full, want, atol=1e-5 * scale, rtol=0)
    # the region really computed in float16: its result is not float32's
    assert loss16 != loss32 and any(not np.array_equal(a, b) for a, b in zip(g16, g32, strict=True))


def test_large_float16_gemm_error_is_float16_sized(device: str) -> None:
    """A batched product big enough for Vulkan's default float16 GEMM (``*.h16``: float16 products and partial sums
    within each 16-deep K tile, float32 across tiles): its error stays within a few float16 roundings. Measured here:
    RMS relative error 3.6e-4 on the cpu (float32 accumulation: the float16 rounding of the inputs and result
    alone), 7.5e-4 on lavapipe."""
    a, b = RNG.standard_normal((128, 64, 256)), RNG.standard_normal((128, 256, 64))
    ref = a @ b
    with autocast(device):
        y = vb.tensor(a.astype(np.float32), device=device) @ vb.tensor(b.astype(np.float32), device=device)
    assert y.dtype is vb.float16
    err = y.float().numpy() - ref
    rms = np.sqrt((err**2).mean() / (ref**2).mean())
    assert 1e-4 < rms < 1.5e-3 and np.abs(err).max() < 3e-3 * np.abs(ref).max()


def test_linear_forward_and_backward_at_float16_gemm_sizes(device: str) -> None:
    """``linear`` big enough that its three products (y = x w^T, dx = g w, dw = g^T x: transposed operands on
    either side) take Vulkan's ``*.h16`` GEMMs: each within a few float16 roundings of float64 (measured RMS
    relative error 3.6e-4 on the cpu, 7.5e-4 on lavapipe), and the gradients float32."""
    x, w, g = (
        RNG.standard_normal((1024, 512)),
        RNG.standard_normal((1024, 512)) * 0.05,
        RNG.standard_normal((1024,) * 2),
    )
    xt = vb.tensor(x.astype(np.float32), device=device, requires_grad=True)
    wt = vb.tensor(w.astype(np.float32), device=device, requires_grad=True)
    with autocast(device):
        y = F.linear(xt, wt)
    y.backward(vb.tensor(g.astype(np.float16), device=device))
    assert y.dtype is vb.float16 and xt.grad.dtype is wt.grad.dtype is vb.float32
    for got, ref in ((y.detach().float().numpy(), x @ w.T), (xt.grad.numpy(), g @ w), (wt.grad.numpy(), g.T @ x)):
        err = got - ref
        assert np.sqrt((err**2).mean() / (ref**2).mean()) < 1.5e-3 and np.abs(err).max() < 3e-3 * np.abs(ref).max()


def test_backward_inside_the_region_gives_the_same_gradients(device: str) -> None:
    lin = vb.nn.Linear(3, 4).to(device)
    x = _x(device)

    def grads(backward_inside: bool) -> np.ndarray:
        lin.zero_grad()
        with autocast(device):
            loss = lin(x).float().exp().sum()
            if backward_inside:  # the engine runs with autocast off: exp's backward keeps float32
                loss.backward()
        if not backward_inside:
            loss.backward()
        assert lin.weight.grad.dtype is vb.float32
        return lin.weight.grad.numpy()

    np.testing.assert_array_equal(grads(True), grads(False))


def test_checkpointed_block_recomputes_in_the_first_passs_dtypes(device: str) -> None:
    """The recomputation runs in backward, where autocast is off: it restores the first pass's settings, so the
    gradients are those without checkpointing (a float32 recomputation would give others, and mismatched dtypes)."""
    lin1, lin2 = vb.nn.Linear(3, 5).to(device), vb.nn.Linear(5, 2).to(device)
    x = _t((4, 3), device, requires_grad=True)

    def block(t: vb.Tensor) -> vb.Tensor:
        return lin2(F.gelu(lin1(t)))

    def grads(ck: bool) -> list[np.ndarray]:
        for t in (x, *lin1.parameters(), *lin2.parameters()):
            t.grad = None
        with autocast(device):
            y = checkpoint(block, x) if ck else block(x)
            assert y.dtype is vb.float16
            loss = F.softmax(y, -1).square().sum()
        loss.backward()
        return [t.grad.numpy() for t in (x, lin1.weight, lin2.weight)]

    for a, b in zip(grads(True), grads(False), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- the region's semantics
def test_decorator_nesting_and_errors(device: str) -> None:
    @autocast(device)
    def f(a: vb.Tensor, depth: int) -> vb.Tensor:
        return f(a, depth - 1) if depth else a @ a.mT

    assert f(_x(device), 2).dtype is vb.float16 and not vb.amp.is_autocast_enabled(device)
    with autocast(device):
        with autocast(device, enabled=False):
            assert (_x(device) @ _w(device).mT).dtype is vb.float32
        assert (_x(device) @ _w(device).mT).dtype is vb.float16 and vb.amp.get_autocast_dtype(device) is vb.float16
    assert vb.autocast is autocast
    with pytest.raises(ValueError, match="device_type must be one of 'vulkan', 'cpu'.*got 'cuda:0'"):
        autocast("cuda:0")
    with pytest.raises(ValueError, match="lower precision is float16 .* got dtype vkblas.float32"):
        autocast(device, dtype=vb.float32)
    with pytest.raises(TypeError, match="unknown dtype 'bfloat16'"):
        autocast(device, dtype="bfloat16")


def test_parameters_are_cast_once_per_region(device: str) -> None:
    from vkblas.ops.autocast import lower

    w = _w(device).requires_grad_()
    with autocast(device):
        (a,) = lower("t", w)
        (b,) = lower("t", w)
        assert a is b and a.dtype is vb.float16
        with vb.no_grad():
            w.add_(1.0)  # a new version: cast again
        (c,) = lower("t", w)
        assert c is not a and float(c.float().sum().item()) == pytest.approx(float(w.sum().item()), rel=1e-2)
    with autocast(device, cache_enabled=False):
        assert lower("t", w)[0] is not lower("t", w)[0]
    with autocast(device):
        assert lower("t", w)[0] is not c  # the cache was emptied when the region ended


def test_autocast_is_per_thread(device: str) -> None:
    seen: list[Any] = []
    with autocast(device):
        t = threading.Thread(target=lambda: seen.append((_x(device) @ _w(device).mT).dtype))
        t.start()
        t.join()
    assert seen == [vb.float32]


def test_one_decorated_function_in_two_threads_restores_each_threads_state(device: str) -> None:
    """One ``@autocast`` function (one object) entered by two threads that leave it in the other order: each thread
    gets its own state back (the saved states once lived on the object, and the first to leave took the other's)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    @autocast(device)
    def region(first: bool) -> None:
        (a_in if first else b_in).set()
        assert (b_in if first else a_out).wait(20)

    def first_thread() -> None:
        region(True)
        seen.append(vb.amp.is_autocast_enabled(device))  # left the region: autocast is off in this thread
        a_out.set()

    a = threading.Thread(target=first_thread)
    a.start()
    assert a_in.wait(20)
    with autocast(device):  # this thread is in a region already: what it saves differs from the first's
        region(False)
        assert vb.amp.is_autocast_enabled(device)
    assert not vb.amp.is_autocast_enabled(device)
    a.join(20)
    assert seen == [False]


def test_float16_unavailable_is_a_clear_error(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No shader-f16 (simulated): entering the region refuses, and a lowered op on such a device refuses too;
    nothing runs in float32 in its stead."""
    backend = vb.ones(1, device=device)._backend
    x, w = _x(device), _w(device)
    with autocast(device):
        if device == "vulkan":
            monkeypatch.setattr(backend.dev, "has_f16", False)
        else:
            monkeypatch.setattr(type(backend), "supports", lambda self, dt: dt is not vb.float16)
        with pytest.raises(vb.UnsupportedError, match=r"linear of a float32\[2, 3\] tensor .*cannot store"):
            F.linear(x, w)
    assert not vb.amp.is_autocast_available(device)
    with pytest.raises(vb.UnsupportedError, match=f"autocast\\(device_type='{device}'.* cannot store or compute"):
        with autocast(device):
            pass
    with autocast(device, enabled=False):  # float32 stays possible, asked for explicitly
        assert (x @ w.mT).dtype is vb.float32


# ---------------------------------------------------------------- GradScaler
def _scaler_trajectory(lib: Any, device: str, grads: list[float], clip: bool, **kw: Any) -> list[Any]:
    if lib is vb:
        p = vb.zeros(2, device=device, requires_grad=True)
        scaler = GradScaler(device, init_scale=8.0, growth_interval=2, **kw)
    else:
        p = lib.zeros(2, requires_grad=True)
        scaler = lib.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2, **kw)
    opt = lib.optim.SGD([p], lr=0.5)
    out = []
    for g in grads:
        before = p.detach().numpy().tolist()
        opt.zero_grad()
        scaler.scale((p * g).sum() + (p * 1.0).sum()).backward()
        if clip:
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_([p], 100.0)
        scaler.step(opt)
        scaler.update()
        after = p.detach().numpy().tolist()
        out.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"], after == before, after))
    return out


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("kw", [{}, {"growth_factor": 4.0, "backoff_factor": 0.25}], ids=["default", "factors"])
def test_grad_scaler_matches_pytorch(device: str, clip: bool, kw: dict[str, float]) -> None:
    torch = require_torch()
    grads = [1.0, 2.0, float("inf"), 0.5, float("nan"), 1.0, 1.0, 1.0, -float("inf"), 3.0]
    want = _scaler_trajectory(torch, "cpu", grads, clip, **kw)
    assert _scaler_trajectory(vb, device, grads, clip, **kw) == want
    skipped = [i for i, (_, _, skip, _) in enumerate(want) if skip]
    assert skipped == [2, 4, 8]  # the inf / NaN steps change nothing


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None], ids=["nan", "inf", "-inf", "none"])
def test_grad_scaler_finds_one_bad_element(device: str, bad: float | None) -> None:
    """One non-finite element deep inside a large gradient skips the step; an empty gradient is finite."""
    p, e = vb.zeros(3000, device=device, requires_grad=True), vb.zeros(0, device=device, requires_grad=True)
    weights = np.ones(3000, np.float32)
    if bad is not None:
        weights[1777] = bad
    opt = vb.optim.SGD([p, e], lr=1.0)
    scaler = GradScaler(device, init_scale=4.0)
    scaler.scale((p * vb.tensor(weights, device=device)).sum() + e.sum()).backward()
    scaler.step(opt)
    scaler.update()
    moved = bool((p.detach() != 0).any().item())
    assert moved == (bad is None) and scaler.get_scale() == (4.0 if bad is None else 2.0)


def test_grad_scaler_unscales_contiguous_and_strided_gradients(device: str) -> None:
    p, q = vb.zeros(3, 2, device=device, requires_grad=True), vb.zeros(4, device=device, requires_grad=True)
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    p.grad = vb.tensor(a * 8, device=device).mT  # a strided gradient: unscaled by mul_, the others by foreach
    q.grad = vb.full((4,), 8.0, device=device)
    GradScaler(device, init_scale=8.0).unscale_(vb.optim.SGD([p, q], lr=1.0))
    np.testing.assert_array_equal(p.grad.numpy(), a.T)
    np.testing.assert_array_equal(q.grad.numpy(), np.ones(4, np.float32))


def test_grad_scaler_state_and_errors(device: str) -> None:
    torch = require_torch()
    scaler = GradScaler(device, init_scale=4.0, growth_interval=3)
    assert scaler.state_dict() == torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=3).state_dict()
    other = GradScaler(device)
    other.load_state_dict({**scaler.state_dict(), "_growth_tracker": 2})
    assert other.get_scale() == 4.0 and other._get_growth_tracker() == 2 and other.get_growth_interval() == 3
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        other.load_state_dict(GradScaler(device, enabled=False).state_dict())
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        GradScaler(device, growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff factor must be < 1.0"):
        GradScaler(device, backoff_factor=1.5)

    p = vb.zeros(2, device=device, dtype=vb.float16, requires_grad=True)
    opt = vb.optim.SGD([p], lr=0.1)
    scaler.scale(p.sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)
    q = vb.zeros(2, device=device, requires_grad=True)
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        scaler.step(vb.optim.SGD([q], lr=0.1))  # no gradients at all
    opt = vb.optim.SGD([q], lr=0.1)
    scaler.scale(q.sum()).backward()
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)
    scaler.step(opt)
    scaler.update(new_scale=vb.tensor(2.0))
    assert scaler.get_scale() == 2.0 and GradScaler(device, enabled=False).scale(q) is q


# ---------------------------------------------------------------- a tiny GPT
@pytest.mark.parametrize("ck", [False, True], ids=["plain", "checkpointing"])
def test_tiny_gpt_trains_under_autocast(device: str, ck: bool) -> None:
    vb.manual_seed(0)
    cfg = GPTConfig(block_size=8, vocab_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0, bias=False,
                    activation_checkpointing=ck)  # fmt: skip
    model = GPT(cfg).to(device)
    opt = model.configure_optimizers(0.0, 1e-2, (0.9, 0.95))
    scaler = GradScaler(device)
    seq = np.arange(9)[None, :] * np.array([[1], [3]]) % 16  # two periodic sequences: learnable
    x, y = vb.tensor(seq[:, :-1], device=device), vb.tensor(seq[:, 1:], device=device)
    losses = []
    for _ in range(6):
        with autocast(device):
            logits, loss = model(x, y)
        assert logits.dtype is vb.float16 and loss.dtype is vb.float32
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        assert all(p.grad.dtype is vb.float32 for p in model.parameters() if p.grad is not None)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.dtype is vb.float32 for p in model.parameters())
    assert losses[-1] < losses[0] - 0.3, losses
    assert scaler.get_scale() == 2.0**16  # nothing overflowed at this size


@requires_vulkan
def test_gpt_step_under_autocast_with_tensors_beyond_a_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPT step of tests/test_large_tensors.py under autocast, on a Vulkan backend that pretends its binding
    limit is 256 KiB: the float16 casts of the tied 5000 x 64 embedding / head and the float16 logits are split
    like float32 ones (``large.py``); loss and gradients agree with the cpu's under autocast."""
    from vkblas import backend
    from vkblas.backend.vulkan import VulkanBackend
    from vkblas.backend.vulkan.memory import LargeStorage

    small = VulkanBackend(limits={"max-storage-buffer-binding-size": 1 << 18, "max-buffer-size": 1 << 20})
    monkeypatch.setitem(backend._instances, backend._default_vulkan_key(), small)
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=64, block_size=32, vocab_size=5000, dropout=0.0,
                    activation_checkpointing=True)  # fmt: skip
    x, y = RNG.integers(0, 5000, (2, 32)), RNG.integers(0, 5000, (2, 32))
    results = []
    for dev in ("vulkan", "cpu"):
        vb.manual_seed(0)
        model = GPT(cfg).to(dev)
        with autocast(dev):
            logits, loss = model(vb.tensor(x, device=dev), vb.tensor(y, device=dev))
        assert logits.dtype is vb.float16
        if dev == "vulkan":
            assert isinstance(logits._view.storage, LargeStorage)
        loss.backward()
        results.append((loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()}))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-3)
    for name, g in results[1][1].items():
        np.testing.assert_allclose(results[0][1][name], g, atol=2e-2 * np.abs(g).max(), rtol=0, err_msg=name)
