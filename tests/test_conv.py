"""conv2d / max_pool2d / avg_pool2d against direct numpy loops, finite differences, and PyTorch when installed."""

from __future__ import annotations

import numpy as np
import pytest

import vkblas as vk
from vkblas.nn import functional as F

HAS_VULKAN = any(d.startswith("vulkan") for d in vk.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]


def _pad(x: np.ndarray, ph: int, pw: int, value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv_ref(x, w, b, stride=1, padding=0, dilation=1, groups=1):
    """The definition: a loop over output pixels."""
    s, p, d = (stride,) * 2 if isinstance(stride, int) else stride, (padding,) * 2 if isinstance(padding, int) \
        else padding, (dilation,) * 2 if isinstance(dilation, int) else dilation
    xp = _pad(x, *p)
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    ho, wo = (hp - d[0] * (kh - 1) - 1) // s[0] + 1, (wp - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(ho):
            for j in range(wo):
                patch = xp[:, g * cg:(g + 1) * cg, i * s[0]:i * s[0] + d[0] * (kh - 1) + 1:d[0],
                           j * s[1]:j * s[1] + d[1] * (kw - 1) + 1:d[1]]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3)) + (b[oc] if b is not None else 0)
    return out


def pool_ref(x, k, s, p, reduce, count_include_pad=True):
    xp = _pad(x, p, p, -np.inf if reduce == "max" else 0.0)
    ones = _pad(np.ones_like(x), p, p)
    ho, wo = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.zeros(x.shape[:2] + (ho, wo))
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            if reduce == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = k * k if count_include_pad else ones[:, :, i * s:i * s + k, j * s:j * s + k].sum(axis=(2, 3))
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


CONV_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1)),
    dict(groups=2, padding=1),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", CONV_CASES, ids=str)
def test_conv2d_matches_loop(device, kw):
    rng = np.random.default_rng(0)
    groups = kw.get("groups", 1)
    x, w, b = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((6, 4 // groups, 3, 2)), rng.standard_normal(6)
    want = conv_ref(x, w, b, **kw)
    got = F.conv2d(vk.tensor(x, device=device), vk.tensor(w, device=device), vk.tensor(b, device=device), **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw", CONV_CASES, ids=str)
def test_conv2d_gradcheck(kw):
    rng = np.random.default_rng(1)
    groups = kw.get("groups", 1)
    x = vk.tensor(rng.standard_normal((1, 2, 5, 4)), dtype=vk.float64, device="cpu", requires_grad=True)
    w = vk.tensor(rng.standard_normal((2, 2 // groups, 2, 2)), dtype=vk.float64, device="cpu", requires_grad=True)
    b = vk.tensor(rng.standard_normal(2), dtype=vk.float64, device="cpu", requires_grad=True)
    assert vk.gradcheck(lambda a, ww, bb: F.conv2d(a, ww, bb, **kw), [x, w, b])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce,k,s,p,cip", [("max", 2, 2, 0, True), ("max", 3, 2, 1, True), ("avg", 2, 2, 0, True),
                                              ("avg", 3, 2, 1, True), ("avg", 3, 1, 1, False)])
def test_pools_match_loop(device, reduce, k, s, p, cip):
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    want = pool_ref(x, k, s, p, reduce, cip)
    xt = vk.tensor(x, device=device)
    got = F.max_pool2d(xt, k, s, p) if reduce == "max" else F.avg_pool2d(xt, k, s, p, count_include_pad=cip)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce", ["max", "avg"])
def test_pool_gradcheck(reduce):
    # distinct values so max's subgradient is unique
    x = vk.tensor(np.random.default_rng(3).permutation(32).reshape(1, 2, 4, 4) / 7.0, dtype=vk.float64,
                  device="cpu", requires_grad=True)
    fn = (lambda a: F.max_pool2d(a, 3, 1, 1)) if reduce == "max" else (lambda a: F.avg_pool2d(a, 3, 2, 1, False, False))
    assert vk.gradcheck(fn, [x], eps=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_pool_grads_match_cpu_float64(device):
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))

    def grads(dev, dtype):
        xt = vk.tensor(x, dtype=dtype, device=dev, requires_grad=True)
        wt = vk.tensor(w, dtype=dtype, device=dev, requires_grad=True)
        y = F.avg_pool2d(F.max_pool2d(F.conv2d(xt, wt, padding=1), 2), 3, 1, 1)
        (y * y).sum().backward()
        return xt.grad.numpy(), wt.grad.numpy()

    for got, want in zip(grads(device, vk.float32), grads("cpu", vk.float64), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_unbatched_input_and_layer_errors():
    conv = vk.nn.Conv2d(3, 4, 3, padding="same", device="cpu")
    assert conv(vk.randn(3, 5, 5, device="cpu")).shape == (4, 5, 5)
    with pytest.raises(ValueError, match=r"Conv2d\(3, 4.*expected input of shape \(N, 3, H, W\).*\(2, 2, 5, 5\)"):
        conv(vk.randn(2, 2, 5, 5, device="cpu"))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        F.conv2d(vk.randn(1, 1, 2, 2, device="cpu"), vk.randn(1, 1, 3, 3, device="cpu"))
    with pytest.raises(ValueError, match="MaxPool2d"):
        vk.nn.MaxPool2d(2)(vk.randn(4, 4, device="cpu"))


def test_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((2, 4, 7, 7)), rng.standard_normal((4, 2, 3, 3)), rng.standard_normal(4)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, torch.tensor(b), 2, 1, 1, 2), 2, 1, 1)
    ty.square().sum().backward()
    vx = vk.tensor(x, dtype=vk.float64, device="cpu", requires_grad=True)
    vw = vk.tensor(w, dtype=vk.float64, device="cpu", requires_grad=True)
    vy = F.max_pool2d(F.conv2d(vx, vw, vk.tensor(b, dtype=vk.float64, device="cpu"), 2, 1, 1, 2), 2, 1, 1)
    vy.square().sum().backward()
    np.testing.assert_allclose(vy.detach().numpy(), ty.detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(vx.grad.numpy(), tx.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(vw.grad.numpy(), tw.grad.numpy(), atol=1e-10)
