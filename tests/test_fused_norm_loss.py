"""The fused ``layer_norm`` / ``rms_norm`` node (``ops/norm.py`` over ``Backend.layer_norm``) and the fused
cross-entropy of class indices (``nn/functional.py``), against float64 numpy, PyTorch and finite differences, on
every device; their composed fallbacks (a backend without the primitive, a tensor beyond a Vulkan binding); and
what the fusion is for: fewer saved bytes (the pool's peak of a small GPT step) and fewer dispatches per step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from conftest import float_dtype, require_torch, requires_vulkan
from vkblas.backend.base import Backend
from vkblas.gradcheck import gradcheck


def t(a: Any, device: str, grad: bool = False, dtype: Any = None) -> vb.Tensor:
    return vb.tensor(np.asarray(a), dtype=dtype or float_dtype(device), device=device, requires_grad=grad)


def tol(device: str) -> dict[str, float]:
    return {"rtol": 1e-10, "atol": 1e-12} if device == "cpu" else {"rtol": 2e-5, "atol": 2e-5}


# ---------------------------------------------------------------- float64 numpy references
def np_norm(x: np.ndarray, k: int, w: Any, b: Any, eps: float, center: bool) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    c = x - x.mean(axes, keepdims=True) if center else x
    y = c / np.sqrt((c * c).mean(axes, keepdims=True) + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def np_norm_grads(x: np.ndarray, k: int, w: Any, g: np.ndarray, eps: float, center: bool) -> tuple[np.ndarray, ...]:
    """(dx, dweight, dbias) written from the definition: xhat = (x - mean) * rstd, h = g * w."""
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    c = x - x.mean(axes, keepdims=True) if center else x
    rstd = 1.0 / np.sqrt((c * c).mean(axes, keepdims=True) + eps)
    xhat = c * rstd
    h = g * (1.0 if w is None else w)
    dx = h - xhat * (h * xhat).mean(axes, keepdims=True)
    if center:
        dx = dx - h.mean(axes, keepdims=True)
    return dx * rstd, (g * xhat).sum(lead), g.sum(lead)


NORM_CASES = [  # (input shape, normalized_shape, weight/bias shape or None)
    ((4, 6), (6,), (6,)),
    ((2, 3, 5), (3, 5), (3, 5)),
    ((2, 3, 5), (3, 5), (5,)),  # weight/bias broadcast to normalized_shape
    ((5, 7), (7,), None),
    ((3, 1), (1,), (1,)),  # rows of one: output = bias
    ((2, 700), (700,), (700,)),  # longer than a workgroup (several loop trips per invocation)
    ((0, 4), (4,), (4,)),
    ((3, 0), (0,), (0,)),
    ((), (), ()),  # 0-d: one row of one
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference's means of rows of no elements
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("case", NORM_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_norm_forward_backward_match_numpy(case: tuple, center: bool, device: str, rng: np.random.Generator) -> None:
    shape, ns, ws = case
    x = rng.standard_normal(shape) * 3 + 2
    w = None if ws is None else rng.standard_normal(ws)
    b = None if ws is None or not center else rng.standard_normal(ws)
    g = rng.standard_normal(shape)
    eps = 1e-5
    vx, vw, vbias = t(x, device, True), None if w is None else t(w, device, True), None
    if center:
        vbias = None if b is None else t(b, device, True)
        y = F.layer_norm(vx, ns, vw, vbias, eps)
    else:
        y = F.rms_norm(vx, ns, vw, eps)
    np.testing.assert_allclose(y.detach().numpy(), np_norm(x, len(ns), w, b, eps, center), **tol(device))
    y.backward(t(g, device))
    dx, dw, db = np_norm_grads(x, len(ns), None if w is None else np.broadcast_to(w, ns), g, eps, center)
    np.testing.assert_allclose(vx.grad.numpy(), dx, **tol(device))
    if w is not None:  # a broadcast weight's gradient is summed back to its own shape
        lead = tuple(range(len(ns) - np.ndim(w)))
        np.testing.assert_allclose(vw.grad.numpy(), dw.sum(lead) if lead else dw, **tol(device))
    if vbias is not None:
        lead = tuple(range(len(ns) - np.ndim(b)))
        np.testing.assert_allclose(vbias.grad.numpy(), db.sum(lead) if lead else db, **tol(device))


@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_norm_matches_torch(center: bool, device: str, rng: np.random.Generator) -> None:
    torch = require_torch()
    x, w, b, g = (rng.standard_normal(s) for s in ((3, 4, 8), (8,), (8,), (3, 4, 8)))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    vx, vw, vbias = (t(a, device, True) for a in (x, w, b))
    if center:
        want, got = torch.nn.functional.layer_norm(tx, (8,), tw, tb, 1e-3), F.layer_norm(vx, (8,), vw, vbias, 1e-3)
    else:
        want, got = torch.nn.functional.rms_norm(tx, (8,), tw), F.rms_norm(vx, (8,), vw)  # eps: the dtype's
    want.backward(torch.tensor(g))
    got.backward(t(g, device))
    loose = {"rtol": 1e-9, "atol": 1e-9} if device == "cpu" else {"rtol": 1e-4, "atol": 1e-4}
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **loose)
    pairs = [(vx, tx), (vw, tw)] + ([(vbias, tb)] if center else [])
    for v, tt in pairs:
        np.testing.assert_allclose(v.grad.numpy(), tt.grad.numpy(), **loose)


@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_norm_gradcheck(center: bool, rng: np.random.Generator) -> None:
    x, w, b = (vb.tensor(rng.standard_normal(s), dtype=vb.float64, requires_grad=True) for s in ((3, 5), (5,), (5,)))
    if center:
        assert gradcheck(lambda x, w, b: F.layer_norm(x, (5,), w, b), (x, w, b))
    else:
        assert gradcheck(lambda x, w: F.rms_norm(x, (5,), w, 1e-6), (x, w))


def test_norm_noncontiguous_input_and_long_rows(device: str, rng: np.random.Generator) -> None:
    """A transposed input, a row of 8192 and more rows than one grid dimension holds (65535 workgroups)."""
    for shape, transpose in (((6, 5), True), ((3, 8192), False), ((70000, 3), False)):
        x = rng.standard_normal(shape) * 2 - 1
        n = x.shape[0] if transpose else x.shape[1]
        vx = t(x, device, True)
        src = vx.T if transpose else vx
        assert not transpose or not src.is_contiguous()
        want_x = x.T if transpose else x
        y = F.layer_norm(src, (n,))
        # float32 rows of 3 with a small variance: the gradient's error scales with rstd
        loose = tol(device) if device == "cpu" else {"rtol": 1e-3, "atol": 1e-3}
        np.testing.assert_allclose(y.detach().numpy(), np_norm(want_x, 1, None, None, 1e-5, True), **loose)
        g = rng.standard_normal(want_x.shape)
        y.backward(t(g, device))
        dx = np_norm_grads(want_x, 1, None, g, 1e-5, True)[0]
        np.testing.assert_allclose(vx.grad.numpy(), dx.T if transpose else dx, **loose)


def test_norm_special_values_match_torch(device: str) -> None:
    """NaN and infinities make their row NaN (PyTorch's), other rows are untouched; gradients likewise."""
    torch = require_torch()
    x = np.array([[1.0, math.nan, 2.0, 0.5], [math.inf, 1.0, 0.0, -1.0], [-math.inf, 2.0, 3.0, 4.0], [0, 0, 0, 0]])
    x = np.concatenate([x, [[1.0, -2.0, 0.5, 3.0]]])
    for center in (True, False):
        tx = torch.tensor(x, requires_grad=True)
        vx = t(x, device, True)
        fn_t = torch.nn.functional.layer_norm if center else torch.nn.functional.rms_norm
        fn_v = F.layer_norm if center else F.rms_norm
        want, got = fn_t(tx, (4,), eps=1e-5), fn_v(vx, (4,), eps=1e-5)
        want.sum().backward()
        got.sum().backward()
        for a, e in ((got.detach().numpy(), want.detach().numpy()), (vx.grad.numpy(), tx.grad.numpy())):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


@requires_vulkan
def test_norm_float16_on_vulkan(rng: np.random.Generator) -> None:
    if not vb.zeros(1, device="vulkan")._backend.supports(vb.float16):
        pytest.skip("this Vulkan adapter has no float16 (shader-f16)")
    x, w, b = rng.standard_normal((4, 300)), rng.standard_normal(300), rng.standard_normal(300)
    half = [np.asarray(a, np.float16).astype(np.float64) for a in (x, w, b)]
    vx, vw, vbias = (t(a, "vulkan", True, vb.float16) for a in half)
    y = F.layer_norm(vx, (300,), vw, vbias)
    assert y.dtype is vb.float16
    np.testing.assert_allclose(y.detach().numpy(), np_norm(*half[:1], 1, half[1], half[2], 1e-5, True), atol=2e-2)
    y.sum().backward()
    dx = np_norm_grads(half[0], 1, half[1], np.ones((4, 300)), 1e-5, True)[0]
    np.testing.assert_allclose(vx.grad.numpy().astype(np.float64), dx, atol=3e-2)


def test_norm_errors(device: str) -> None:
    x = t(np.zeros((2, 3)), device)
    with pytest.raises(ValueError, match=r"expected input with shape \(\*, 4\)"):
        F.layer_norm(x, (4,))
    with pytest.raises(RuntimeError, match=r"weight of shape \(2,\)"):
        F.layer_norm(x, (3,), t(np.ones(2), device))
    with pytest.raises(TypeError, match="floating-point"):
        F.layer_norm(vb.zeros(2, 3, dtype=vb.int32, device=device), (3,))


def _norm_results(rng: np.random.Generator) -> list[np.ndarray]:
    x, w, b, g = (rng.standard_normal(s) for s in ((4, 9), (9,), (9,), (4, 9)))
    out = []
    for center in (True, False):
        vx, vw, vbias = (t(a, "cpu", True) for a in (x, w, b))
        y = F.layer_norm(vx, (9,), vw, vbias) if center else F.rms_norm(vx, (9,), vw)
        y.backward(t(g, "cpu"))
        out += [y.detach().numpy(), vx.grad.numpy(), vw.grad.numpy(), vbias.grad.numpy() if center else 0.0]
    return out


def _ce_results(rng: np.random.Generator) -> list[np.ndarray]:
    x, w = rng.standard_normal((6, 5)), rng.random(5) + 0.5
    target = vb.tensor([0, 4, -100, 2, 2, 1])
    out = []
    for kw in ({}, {"reduction": "none", "label_smoothing": 0.2}, {"weight": t(w, "cpu"), "label_smoothing": 0.1}):
        vx = t(x, "cpu", True)
        y = F.cross_entropy(vx, target, **kw)
        y.sum().backward()
        out += [y.detach().numpy(), vx.grad.numpy()]
    return out


@pytest.mark.parametrize(
    "primitives, results",
    [
        (("layer_norm", "layer_norm_backward"), _norm_results),
        (("cross_entropy", "cross_entropy_backward"), _ce_results),
    ],
    ids=["norm", "cross_entropy"],
)
def test_composition_fallback_matches_the_primitive(
    primitives: tuple[str, ...], results: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend without the primitive (the base class's default) gets the same node composed from elementwise,
    reduce, gather and scatter: the same values and gradients."""
    fused = results(np.random.default_rng(3))
    for name in primitives:
        monkeypatch.setattr(type(vb.zeros(1)._backend), name, getattr(Backend, name))
    composed = results(np.random.default_rng(3))
    for a, e in zip(fused, composed, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- cross-entropy
CE_OPTIONS = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"label_smoothing": 0.2},
    {"weight": True},
    {"weight": True, "label_smoothing": 0.3},
    {"weight": True, "reduction": "none", "label_smoothing": 0.1},
    {"ignore_index": 2, "reduction": "sum"},
    {"ignore_index": -1},  # nanoGPT's: its targets are checked as one interval
]
CE_SHAPES = [((6, 5), (6,)), ((2, 4, 3), (2, 3)), ((5,), ()), ((0, 4), (0,)), ((3, 1), (3,))]


@pytest.mark.parametrize("opts", CE_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("shapes", CE_SHAPES, ids=lambda s: str(s[0]))
def test_cross_entropy_matches_torch(shapes: tuple, opts: dict, device: str, rng: np.random.Generator) -> None:
    torch = require_torch()
    shape, tshape = shapes
    n_classes = shape[1] if len(shape) > 1 else shape[0]
    x = rng.standard_normal(shape) * 3
    target = rng.integers(0, n_classes, tshape)
    if target.size > 1:
        target.reshape(-1)[0] = opts.get("ignore_index", -100)  # an ignored target
    w = rng.random(n_classes) + 0.5
    tkw = {k: torch.tensor(w) if k == "weight" else v for k, v in opts.items()}
    vkw = {k: t(w, device) if k == "weight" else v for k, v in opts.items()}
    tx, vx = torch.tensor(x, requires_grad=True), t(x, device, True)
    want = torch.nn.functional.cross_entropy(tx, torch.tensor(target), **tkw)
    got = F.cross_entropy(vx, vb.tensor(target, device=device), **vkw)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol(device))
    g = rng.standard_normal(tuple(want.shape))
    want.backward(torch.tensor(g))
    got.backward(t(g, device))
    np.testing.assert_allclose(vx.grad.numpy(), tx.grad.numpy(), **tol(device))


def np_cross_entropy(x: np.ndarray, target: np.ndarray, w: np.ndarray, smoothing: float) -> float:
    """Weighted mean with label smoothing and ignore_index -100, from the definition."""
    m = x.max(1, keepdims=True)
    logp = x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    keep = target != -100
    safe = np.where(keep, target, 0)
    picked = logp[np.arange(len(x)), safe]
    c = x.shape[1]
    loss = -(1 - smoothing) * w[safe] * picked - smoothing / c * (logp * w).sum(1)
    return float((loss * keep).sum() / (w[safe] * keep).sum())


def test_cross_entropy_matches_numpy_and_gradcheck(device: str, rng: np.random.Generator) -> None:
    x, w = rng.standard_normal((7, 4)) * 2, rng.random(4) + 0.5
    target = np.array([0, 3, -100, 1, 2, 2, 3])
    got = F.cross_entropy(t(x, device), vb.tensor(target, device=device), t(w, device), label_smoothing=0.25)
    np.testing.assert_allclose(got.item(), np_cross_entropy(x, target, w, 0.25), **tol(device))
    if device == "cpu":
        vx = vb.tensor(x, dtype=vb.float64, requires_grad=True)
        vt, vw = vb.tensor(target), vb.tensor(w, dtype=vb.float64)
        assert gradcheck(lambda x: F.cross_entropy(x, vt, vw, label_smoothing=0.25), (vx,))
        assert gradcheck(lambda x: F.cross_entropy(x, vt, reduction="none"), (vx,))


def test_cross_entropy_special_values_match_torch(device: str) -> None:
    """NaN / inf logits give what PyTorch gives (NaN losses, and gradients of the rows that hold them); an ignored
    row holding NaN contributes nothing; every target ignored makes the mean NaN (0 / 0) and the sum 0."""
    torch = require_torch()
    x = np.array([[1.0, math.nan, 0.0], [math.inf, 0.0, 1.0], [-math.inf, 0.0, 1.0], [1e30, -1e30, 0.0], [0, 1, 2]])
    for target, reduction in (([0, 1, 2, 0, 1], "none"), ([-100, 0, 1, 2, 2], "none"), ([-100] * 5, "mean")):
        tx, vx = torch.tensor(x, requires_grad=True), t(x, device, True)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(target), reduction=reduction)
        got = F.cross_entropy(vx, vb.tensor(target, device=device), reduction=reduction)
        want.sum().backward()
        got.sum().backward()
        for a, e in ((got.detach().numpy(), want.detach().numpy()), (vx.grad.numpy(), tx.grad.numpy())):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"{target} {reduction}")
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- what the fusion buys (Vulkan's pool and counter)
def composed_layer_norm(input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5):  # noqa: A002
    """The composition ``layer_norm`` was before the fused node (its autograd keeps the centred and normalised
    input)."""
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    centered = input - input.mean(dims, keepdim=True)
    out = centered * (centered.square().mean(dims, keepdim=True) + eps).rsqrt()
    out = out if weight is None else out * weight
    return out if bias is None else out + bias


def composed_cross_entropy(input: Any, target: Any, ignore_index: int = -100, **kw: Any) -> Any:  # noqa: A002
    """The composition ``cross_entropy`` was: ``log_softmax`` (kept for its backward) and ``nll_loss``."""
    return F.nll_loss(F.log_softmax(input, 1), target, ignore_index=ignore_index, **kw)


def _compose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(F, "layer_norm", composed_layer_norm)
    monkeypatch.setattr(F, "cross_entropy", composed_cross_entropy)


GPT = {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 4096, "block_size": 64}
BATCH = 4


def _gpt_step(tokens: np.ndarray) -> tuple[int, int]:
    """(pool peak bytes, dispatches) of one training step of a small GPT on Vulkan, after a warm-up step."""
    from vkblas.models import gpt

    vb.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(**GPT, dropout=0.0, bias=True)).to("vulkan")
    opt = vb.optim.AdamW(model.parameters(), lr=1e-3)
    x = vb.tensor(tokens[:, :-1], device="vulkan")
    y = vb.tensor(tokens[:, 1:], device="vulkan")
    rt_backend = vb.zeros(1, device="vulkan")._backend
    rt = rt_backend.rt

    def step() -> None:
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    rt_backend.synchronize()
    vb.accelerator.reset_peak_memory_stats("vulkan")
    before = rt.dispatches
    step()
    rt_backend.synchronize()
    return vb.accelerator.max_memory_allocated("vulkan"), rt.dispatches - before


@requires_vulkan
@pytest.mark.vulkan
def test_fusion_lowers_a_gpt_steps_peak_memory_and_dispatches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Expected saving at the peak (the loss's backward): the composition holds the logits (the caller's),
    log_softmax's output and its gradient and the logits' gradient (four (B*T, V) float32 buffers), the fused node
    the logits and their gradient (two); the layer norms' saved centred inputs (2 layers x 2 + 1 of (B*T, C)) are
    small beside that. (Until the fused forward stopped computing an unused log_softmax, its two temporaries made
    the fused step's peak, and the saving was one buffer.)"""
    tokens = np.random.default_rng(0).integers(0, GPT["vocab_size"], (BATCH, GPT["block_size"] + 1))
    fused_peak, fused_dispatches = _gpt_step(tokens)
    _compose(monkeypatch)
    composed_peak, composed_dispatches = _gpt_step(tokens)
    logits_bytes = BATCH * GPT["block_size"] * GPT["vocab_size"] * 4
    saving = composed_peak - fused_peak
    assert 1.5 * logits_bytes <= saving <= 2.2 * logits_bytes, (composed_peak, fused_peak, logits_bytes)
    assert fused_dispatches < composed_dispatches - 20, (fused_dispatches, composed_dispatches)


@requires_vulkan
@pytest.mark.vulkan
def test_fused_cross_entropy_lowers_an_mlp_steps_dispatches(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = vb.tensor(rng.standard_normal((64, 32)), dtype=vb.float32, device="vulkan")
    y = vb.tensor(rng.integers(0, 10, 64), device="vulkan")
    rt_backend = vb.zeros(1, device="vulkan")._backend
    rt = rt_backend.rt
    counts = []
    for compose in (False, True):
        if compose:
            _compose(monkeypatch)
        vb.manual_seed(0)
        model = vb.nn.Sequential(vb.nn.Linear(32, 16), vb.nn.ReLU(), vb.nn.Linear(16, 10)).to("vulkan")
        opt = vb.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(2):
            before = rt.dispatches
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rt_backend.synchronize()
        counts.append(rt.dispatches - before)
    fused, composed = counts
    assert fused <= composed - 5, counts


@pytest.mark.parametrize(
    "shape, fits",
    [((512, 10), True), ((256, 64), True), ((1638, 10), True), ((1639, 10), False), ((100, 65), False)],
    ids=lambda v: str(v) if isinstance(v, tuple) else ("mean in the pass" if v else "sum and division after"),
)
def test_cross_entropy_mean_in_the_rows_pass(
    shape: tuple[int, int], fits: bool, device: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """float32 logits get their mean and its denominator from the rows' own pass (on Vulkan a small batch only, at
    most 16384 logits and 64 classes), larger ones from a sum and a division after it: the same values and
    gradients as PyTorch's in float64 either way, transposed (strided) logits, ignored rows, class weights and label
    smoothing included."""
    torch = require_torch()
    calls: list[bool] = []
    backend_type = type(vb.zeros(1, device=device)._backend)
    primitive = backend_type.cross_entropy

    def spy(self: Any, *args: Any) -> bool:
        done = primitive(self, *args)
        calls.append(len(args) == 9 and done)
        return done

    monkeypatch.setattr(backend_type, "cross_entropy", spy)
    x = (rng.standard_normal(shape[::-1]) * 3).T  # strided rows
    target = rng.integers(0, shape[1], shape[0])
    target[::7] = -100
    w = rng.random(shape[1]) + 0.5
    for kw in ({}, {"weight": True, "label_smoothing": 0.2}):
        tkw = {k: torch.tensor(w) if k == "weight" else v for k, v in kw.items()}
        vkw = {k: t(w, device, dtype=vb.float32) if k == "weight" else v for k, v in kw.items()}
        tx = torch.tensor(x.astype(np.float32).astype(np.float64), requires_grad=True)
        leaf = vb.tensor(np.ascontiguousarray(x.T), dtype=vb.float32, device=device, requires_grad=True)
        vx = leaf.T  # (M, C) rows of stride 1 over (C, M) storage
        assert not vx.is_contiguous()
        calls.clear()
        got = F.cross_entropy(vx, vb.tensor(target, device=device), **vkw)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(target), **tkw)
        assert any(calls) == (fits or device == "cpu"), calls  # the cpu backend sums any size
        np.testing.assert_allclose(got.item(), want.item(), rtol=2e-6)
        got.backward()
        want.backward()
        np.testing.assert_allclose(leaf.grad.numpy().T, tx.grad.numpy(), rtol=1e-5, atol=1e-8)


@pytest.mark.vulkan
def test_cross_entropy_mean_in_the_rows_pass_saves_two_dispatches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sum of the rows and the mean's division are not dispatches of their own for a small batch."""
    from vkblas.backend.vulkan.kernels import xent

    rng = np.random.default_rng(0)
    x = vb.tensor(rng.standard_normal((512, 10)), dtype=vb.float32, device="vulkan")
    y = vb.tensor(rng.integers(0, 10, 512), device="vulkan")
    rt = x._backend.rt
    counts, losses = [], []
    for fits in (True, False):
        monkeypatch.setattr(xent, "mean_fits", lambda x, fits=fits: fits)
        F.cross_entropy(x, y)  # plans built before counting
        before = rt.dispatches
        losses.append(F.cross_entropy(x, y).item())
        counts.append(rt.dispatches - before)
    assert counts[0] == counts[1] - 2, counts
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
