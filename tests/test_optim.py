"""Optimizers and schedulers against references written from the published update rules (PyTorch's docs), and
against PyTorch itself when it is installed; clip_grad_norm_; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vkblas as vk
from conftest import require_torch
from vkblas import nn, optim
from vkblas.optim import lr_scheduler as sched

HAS_VULKAN = any(d.startswith("vulkan") for d in vk.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]
STEPS = 5


# ---------------------------------------------------------------- references (numpy, from the documented rules)
def sgd_ref(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    b = None
    for g in grads(p):
        g = -g if maximize else g
        g = g + weight_decay * p
        if momentum:
            b = g.copy() if b is None else momentum * b + (1 - dampening) * g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
        yield p


def adam_ref(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    m = v = vmax = np.zeros_like(p)
    for t, g in enumerate(grads(p), start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        mhat = m / (1 - betas[0] ** t)
        vmax = np.maximum(vmax, v) if amsgrad else v
        vhat = vmax / (1 - betas[1] ** t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
        yield p


def rmsprop_ref(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    v, gavg, b = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads(p):
        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        vt = v
        if centered:
            gavg = alpha * gavg + (1 - alpha) * g
            vt = v - gavg**2
        if momentum:
            b = momentum * b + g / (np.sqrt(vt) + eps)
            p = p - lr * b
        else:
            p = p - lr * g / (np.sqrt(vt) + eps)
        yield p


CASES = [
    (optim.SGD, sgd_ref, dict(lr=0.1)),
    (optim.SGD, sgd_ref, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (optim.SGD, sgd_ref, dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
    (optim.Adam, adam_ref, dict(lr=0.01)),
    (optim.Adam, adam_ref, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)),
    (optim.AdamW, lambda p, g, **kw: adam_ref(p, g, decoupled=True, **kw), dict(lr=0.01, weight_decay=0.1)),
    (
        optim.AdamW,
        lambda p, g, **kw: adam_ref(p, g, decoupled=True, **{"weight_decay": 1e-2, **kw}),
        dict(lr=0.01, amsgrad=True),
    ),  # AdamW's default weight_decay is 1e-2
    (optim.RMSprop, rmsprop_ref, dict(lr=0.01)),
    (optim.RMSprop, rmsprop_ref, dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
]
IDS = [f"{c.__name__}-{kw}" for c, _, kw in CASES]
P0 = np.random.default_rng(0).standard_normal((3, 4))
NOISE = np.random.default_rng(1).standard_normal((STEPS, 3, 4))


def _grad_of(p: np.ndarray, k: int) -> np.ndarray:
    """The gradient used at step k: depends on the current parameters, so state and updates interact."""
    return 2 * p * (1 + 0.1 * k) + NOISE[k]


def _reference(ref, kw):
    state = {"p": P0.copy()}

    def grads(p):
        for k in range(STEPS):
            yield _grad_of(state["p"], k)

    out = []
    for p in ref(P0.copy(), grads, **kw):
        state["p"] = p
        out.append(p)
    return out


def _run_vkblas(cls, kw, device):
    p = vk.tensor(P0, device=device, requires_grad=True)
    opt = cls([p], **kw)
    out = []
    for k in range(STEPS):
        p.grad = vk.tensor(_grad_of(p.detach().numpy().astype(np.float64), k), device=device)
        opt.step()
        out.append(p.detach().numpy())
    return out, opt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,ref,kw", CASES, ids=IDS)
def test_optimizer_matches_published_rule(device, cls, ref, kw):
    got, _ = _run_vkblas(cls, kw, device)
    for k, (g, w) in enumerate(zip(got, _reference(ref, kw), strict=True)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"step {k + 1}")


@pytest.mark.parametrize("cls,ref,kw", CASES, ids=IDS)
def test_optimizer_matches_torch(cls, ref, kw):
    torch = require_torch()
    tp = torch.tensor(P0, requires_grad=True)
    topt = getattr(torch.optim, cls.__name__)([tp], **kw)
    got, _ = _run_vkblas(cls, kw, "cpu")
    for k in range(STEPS):
        tp.grad = torch.tensor(_grad_of(tp.detach().numpy(), k))
        topt.step()
        np.testing.assert_allclose(got[k], tp.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"step {k + 1}")


def test_step_does_not_read_back_to_host(monkeypatch):
    p = vk.tensor(P0, device="cpu", requires_grad=True)
    p.grad = vk.ones(3, 4, device="cpu")
    backend = p._backend
    calls = []
    monkeypatch.setattr(type(backend), "to_numpy", lambda self, v: calls.append(v) or np.zeros(v.shape))
    for cls, _, kw in CASES:
        cls([p], **kw).step()
    assert not calls


def test_state_dict_round_trip_continues_identically():
    full, _ = _run_vkblas(optim.Adam, dict(lr=0.01, amsgrad=True), "cpu")
    p = vk.tensor(P0, device="cpu", requires_grad=True)
    opt = optim.Adam([p], lr=0.01, amsgrad=True)
    for k in range(2):
        p.grad = vk.tensor(_grad_of(p.detach().numpy().astype(np.float64), k), device="cpu")
        opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0] and sd["state"][0]["step"] == 2
    q = vk.tensor(p.detach().numpy(), device="cpu", requires_grad=True)
    opt2 = optim.Adam([q], lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.01
    for k in range(2, STEPS):
        q.grad = vk.tensor(_grad_of(q.detach().numpy().astype(np.float64), k), device="cpu")
        opt2.step()
    np.testing.assert_allclose(q.detach().numpy(), full[-1], rtol=1e-6)


def test_zero_grad_and_param_groups():
    a, b = vk.ones(2, device="cpu", requires_grad=True), vk.ones(2, device="cpu", requires_grad=True)
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    (a * 2 + b * 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), [0.8, 0.8])
    np.testing.assert_allclose(b.detach().numpy(), [-1.0, -1.0])
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and a.grad.numpy().max() == 0
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_bad_optimizer_input():
    leaf = vk.ones(2, device="cpu", requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD(nn.ReLU().parameters())
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([leaf * 2])
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([leaf, leaf])
    with pytest.raises(ValueError, match="Invalid learning rate value: -1"):
        optim.SGD([leaf], lr=-1)
    with pytest.raises(ValueError, match="beta parameter at index 1 value: 1.0"):
        optim.Adam([leaf], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([leaf], lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="iterable"):
        optim.SGD(leaf)


# ---------------------------------------------------------------- schedulers
def _lrs(make, n, opt_cls=optim.SGD, **opt_kw):
    p = vk.ones(1, device="cpu", requires_grad=True)
    opt = opt_cls([p], lr=0.1, **opt_kw)
    s = make(opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(n):
        opt.step()
        s.step()
        out.append(opt.param_groups[0]["lr"])
    return out, opt


SCHEDULERS = {
    "StepLR": (lambda o: sched.StepLR(o, 3, gamma=0.5), lambda t: 0.1 * 0.5 ** (t // 3)),
    "CosineAnnealingLR": (
        lambda o: sched.CosineAnnealingLR(o, T_max=8, eta_min=0.01),
        lambda t: 0.01 + 0.09 * (1 + math.cos(math.pi * t / 8)) / 2,
    ),
    "LinearLR": (
        lambda o: sched.LinearLR(o, start_factor=0.25, total_iters=4),
        lambda t: 0.1 * (0.25 + 0.75 * min(t, 4) / 4),
    ),
    "OneCycleLR": (lambda o: sched.OneCycleLR(o, max_lr=1.0, total_steps=10), None),
}


def _one_cycle_ref(t, total=10, pct=0.3, max_lr=1.0, div=25.0, final_div=1e4):
    """Smith & Topin's 1cycle with PyTorch's phase boundaries and cosine annealing."""
    lo, hi, end = max_lr / div, max_lr, max_lr / div / final_div
    up = pct * total - 1
    cos = lambda a, b, x: b + (a - b) / 2 * (math.cos(math.pi * x) + 1)  # noqa: E731
    return cos(lo, hi, t / up) if t <= up else cos(hi, end, (t - up) / (total - 1 - up))


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_matches_formula(name):
    make, ref = SCHEDULERS[name]
    got, _ = _lrs(make, 9)
    want = [(ref or _one_cycle_ref)(t) for t in range(10)]
    np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_matches_torch(name):
    torch = require_torch()
    make, _ = SCHEDULERS[name]
    tp = torch.ones(1, requires_grad=True)
    topt = torch.optim.SGD([tp], lr=0.1, momentum=0.9)
    ts = getattr(torch.optim.lr_scheduler, name)(
        topt,
        **{
            "StepLR": dict(step_size=3, gamma=0.5),
            "CosineAnnealingLR": dict(T_max=8, eta_min=0.01),
            "LinearLR": dict(start_factor=0.25, total_iters=4),
            "OneCycleLR": dict(max_lr=1.0, total_steps=10),
        }[name],
    )
    want, moms = [topt.param_groups[0]["lr"]], [topt.param_groups[0]["momentum"]]
    for _ in range(9):
        topt.step()
        ts.step()
        want.append(topt.param_groups[0]["lr"])
        moms.append(topt.param_groups[0]["momentum"])
    got, opt = _lrs(make, 9, momentum=0.9)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert opt.param_groups[0]["momentum"] == pytest.approx(moms[-1])


def test_one_cycle_cycles_adam_beta1():
    _, opt = _lrs(lambda o: sched.OneCycleLR(o, max_lr=1.0, total_steps=10), 3, opt_cls=optim.Adam)
    assert 0.85 < opt.param_groups[0]["betas"][0] < 0.95 and opt.param_groups[0]["betas"][1] == 0.999


# ---------------------------------------------------------------- clipping
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm(device, norm_type):
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    ps = [vk.zeros(*g.shape, device=device, requires_grad=True) for g in gs]
    for p, g in zip(ps, gs, strict=True):
        p.grad = vk.tensor(g, device=device)
    flat = np.concatenate([g.ravel() for g in gs])
    total = np.abs(flat).max() if math.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    got = nn.utils.clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type)
    np.testing.assert_allclose(got.item(), total, rtol=1e-5)
    for p, g in zip(ps, gs, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g * 0.5 / (total + 1e-6), rtol=1e-5)
    again = nn.utils.clip_grad_norm_(ps, max_norm=100.0, norm_type=norm_type)  # already small: unchanged
    assert again.item() == pytest.approx(0.5, rel=1e-4)
