"""The unfold / fold primitives and conv2d / max_pool2d / avg_pool2d against direct numpy loops, finite differences,
the adjoint identity, and PyTorch when installed."""

from __future__ import annotations

import numpy as np
import pytest

import vkblas as vk
from conftest import require_torch, requires_vulkan
from references import conv_ref, pad_hw, pool_ref
from vkblas.backend.base import View
from vkblas.nn import functional as F
from vkblas.ops import conv as conv_ops
from vkblas.ops.conv import fold as vk_fold

HAS_VULKAN = any(d.startswith("vulkan") for d in vk.devices())
DEVICES = ["cpu", pytest.param("vulkan", marks=pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter"))]


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
@pytest.mark.parametrize(
    "reduce,k,s,p,cip",
    [
        ("max", 2, 2, 0, True),
        ("max", 3, 2, 1, True),
        ("avg", 2, 2, 0, True),
        ("avg", 3, 2, 1, True),
        ("avg", 3, 1, 1, False),
    ],
)
def test_pools_match_loop(device, reduce, k, s, p, cip):
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5))
    want = pool_ref(x, k, s, p, reduce, cip)
    xt = vk.tensor(x, device=device)
    got = F.max_pool2d(xt, k, s, p) if reduce == "max" else F.avg_pool2d(xt, k, s, p, count_include_pad=cip)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduce", ["max", "avg"])
def test_pool_gradcheck(reduce):
    # distinct values so max's subgradient is unique
    x = vk.tensor(
        np.random.default_rng(3).permutation(32).reshape(1, 2, 4, 4) / 7.0,
        dtype=vk.float64,
        device="cpu",
        requires_grad=True,
    )
    fn = (lambda a: F.max_pool2d(a, 3, 1, 1)) if reduce == "max" else (lambda a: F.avg_pool2d(a, 3, 2, 1, False, False))
    assert vk.gradcheck(fn, [x], eps=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_pool_grads_match_cpu_float64(device):
    """Code generation: the same expression on the device and the cpu (the maths: test_conv_pool_against_torch and
    the loop / finite-difference tests above)."""
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
    torch = require_torch()
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


# ------------------------------------------------------------------------------------------ the primitives
def unfold_ref(x, k, s, p, d, value=0.0):
    """The definition of unfold, one window element at a time (vectorised over N and C only)."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1, (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full((n, c, k[0], k[1], oh, ow), value, dtype=x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            for a in range(oh):
                for b in range(ow):
                    y, xx = a * s[0] - p[0] + i * d[0], b * s[1] - p[1] + j * d[1]
                    if 0 <= y < h and 0 <= xx < w:
                        out[:, :, i, j, a, b] = x[:, :, y, xx]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


def fold_ref(cols, hw, k, s, p, d):
    """The adjoint, accumulated entry by entry."""
    n, rows, _ = cols.shape
    c = rows // (k[0] * k[1])
    oh, ow = (
        (hw[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1,
        (hw[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1,
    )
    c6 = cols.reshape(n, c, k[0], k[1], oh, ow)
    out = np.zeros((n, c, *hw), dtype=cols.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            for a in range(oh):
                for b in range(ow):
                    y, xx = a * s[0] - p[0] + i * d[0], b * s[1] - p[1] + j * d[1]
                    if 0 <= y < hw[0] and 0 <= xx < hw[1]:
                        out[:, :, y, xx] += c6[:, :, i, j, a, b]
    return out


# (N, C, H, W), kernel, stride, padding, dilation: odd sizes, N or C of 1, every parameter away from 1 somewhere
WINDOW_CASES = [
    ((2, 3, 7, 5), (3, 2), (2, 1), (1, 0), (1, 2)),
    ((1, 1, 5, 6), (2, 2), (2, 2), (0, 1), (1, 1)),
    ((3, 2, 9, 8), (3, 3), (1, 3), (2, 2), (2, 1)),
    ((1, 4, 4, 3), (1, 1), (1, 1), (0, 0), (1, 1)),
    ((2, 1, 6, 7), (4, 3), (3, 2), (1, 1), (1, 2)),
]


def _backend(device):
    return vk.zeros(1, device=device)._backend


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_unfold_fold_primitives_match_loop(device, case):
    shape, k, s, p, d = case
    rng = np.random.default_rng(6)
    be = _backend(device)
    # a non-contiguous input: the (N, C, H, W) image read through a transposed (N, C, W, H) storage
    x = rng.standard_normal(shape).astype(np.float32)
    xs = vk.tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2)), device=device).transpose(2, 3)
    assert not xs.is_contiguous()
    for value in (0.0, -np.inf):
        want = unfold_ref(x, k, s, p, d, value)
        out = vk.full(want.shape, 7.0, device=device)
        be.unfold(out._view, xs._view, k, s, p, d, value)
        np.testing.assert_array_equal(out.numpy(), want)
    # a strided output: the (C*kh*kw, N, L) layout conv2d uses
    want = unfold_ref(x, k, s, p, d)
    t = vk.zeros(want.shape[1], want.shape[0], want.shape[2], device=device).permute(1, 0, 2)
    be.unfold(t._view, xs._view, k, s, p, d, 0.0)
    np.testing.assert_array_equal(t.numpy(), want)
    # fold of strided cols into a (pre-filled: it must overwrite) image
    cols = rng.standard_normal(want.shape).astype(np.float32)
    ct = vk.tensor(np.ascontiguousarray(cols.transpose(1, 0, 2)), device=device).permute(1, 0, 2)
    img = vk.full(shape, 7.0, device=device)
    be.fold(img._view, ct._view, k, s, p, d)
    np.testing.assert_allclose(img.numpy(), fold_ref(cols, shape[2:], k, s, p, d), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", WINDOW_CASES[:3], ids=str)
def test_fold_is_the_adjoint_of_unfold(device, case):
    shape, k, s, p, d = case
    rng = np.random.default_rng(7)
    dt = vk.float64 if device == "cpu" else vk.float32
    x = vk.tensor(rng.standard_normal(shape), dtype=dt, device=device)
    u = F.unfold(x, k, d, p, s)
    c = vk.tensor(rng.standard_normal(u.shape), dtype=dt, device=device)
    lhs = float((u * c).sum())
    rhs = float((x * vk_fold(c, shape[2:], k, d, p, s)).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12 if device == "cpu" else 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_window_primitive_errors(device):
    be = _backend(device)
    x = vk.zeros(1, 2, 5, 5, device=device)
    with pytest.raises(ValueError, match="should be"):
        be.unfold(vk.zeros(1, 18, 8, device=device)._view, x._view, (3, 3), (1, 1), (0, 0), (1, 1), 0.0)
    with pytest.raises(ValueError, match="smaller than"):
        be.fold(x._view, vk.zeros(1, 2 * 49, 1, device=device)._view, (7, 7), (1, 1), (0, 0), (1, 1))
    if device == "vulkan":  # a view reaching outside its storage is refused before any kernel runs
        short = View(vk.zeros(10, device=device)._view.storage, (1, 18, 9), (162, 9, 1), 0)
        with pytest.raises(ValueError, match="outside its storage"):
            be.unfold(short, x._view, (3, 3), (1, 1), (0, 0), (1, 1), 0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_unfold_fold_ops_against_torch(device):
    torch = require_torch()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 7, 6))
    kw = dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 1), stride=(2, 1))
    want = torch.nn.functional.unfold(torch.tensor(x), **kw).numpy()
    got = F.unfold(vk.tensor(x, device=device), **kw)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    cols = rng.standard_normal(want.shape)
    want = torch.nn.functional.fold(torch.tensor(cols), (7, 6), **kw).numpy()
    np.testing.assert_allclose(
        vk_fold(vk.tensor(cols, device=device), (7, 6), **kw).numpy(), want, rtol=1e-5, atol=1e-5
    )
    # unbatched forms
    assert F.unfold(vk.zeros(3, 7, 6, device=device), **kw).shape == cols.shape[1:]
    assert vk_fold(vk.zeros(*cols.shape[1:], device=device), (7, 6), **kw).shape == (3, 7, 6)


def test_unfold_fold_gradcheck():
    rng = np.random.default_rng(9)
    x = vk.tensor(rng.standard_normal((1, 2, 5, 4)), dtype=vk.float64, device="cpu", requires_grad=True)
    assert vk.gradcheck(lambda a: F.unfold(a, (2, 3), (2, 1), 1, (1, 2)), [x])
    c = vk.tensor(rng.standard_normal((1, 12, 10)), dtype=vk.float64, device="cpu", requires_grad=True)
    assert vk.gradcheck(lambda a: vk_fold(a, (5, 4), (2, 3), (2, 1), 1, (1, 2)), [c])


# ------------------------------------------------------------------------------------------ backward vs loops
def conv_grads_ref(x, w, g, stride, padding, dilation, groups):
    """dx, dw, db of conv_ref for the output gradient g, by the same loop."""
    s, p, d = stride, padding, dilation
    xp = pad_hw(x, *p)
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    o, cg, kh, kw = w.shape
    og = o // groups
    for oc in range(o):
        gi = oc // og
        for i in range(g.shape[2]):
            for j in range(g.shape[3]):
                sl = (
                    slice(None),
                    slice(gi * cg, (gi + 1) * cg),
                    slice(i * s[0], i * s[0] + d[0] * (kh - 1) + 1, d[0]),
                    slice(j * s[1], j * s[1] + d[1] * (kw - 1) + 1, d[1]),
                )
                gg = g[:, oc, i, j][:, None, None, None]
                dw[oc] += (xp[sl] * gg).sum(axis=0)
                dxp[sl] += w[oc][None] * gg
    return dxp[:, :, p[0] : p[0] + x.shape[2], p[1] : p[1] + x.shape[3]], dw, g.sum(axis=(0, 2, 3))


def pool_grad_ref(x, g, k, s, p, reduce):
    xp = pad_hw(x, p, p, -np.inf if reduce == "max" else 0.0)
    dxp = np.zeros_like(xp)
    n, c = x.shape[:2]
    for i in range(g.shape[2]):
        for j in range(g.shape[3]):
            win = xp[:, :, i * s : i * s + k, j * s : j * s + k].reshape(n, c, k * k)
            part = np.zeros_like(win)
            if reduce == "max":
                np.put_along_axis(part, win.argmax(axis=2)[:, :, None], g[:, :, i, j][:, :, None], axis=2)
            else:
                part[:] = g[:, :, i, j][:, :, None] / (k * k)
            dxp[:, :, i * s : i * s + k, j * s : j * s + k] += part.reshape(n, c, k, k)
    return dxp[:, :, p : p + x.shape[2], p : p + x.shape[3]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kw",
    [
        dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1),
        dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    ],
    ids=str,
)
def test_conv2d_backward_matches_loop(device, kw):
    rng = np.random.default_rng(10)
    x, w, b = (
        rng.standard_normal((3, 4, 7, 8)),
        rng.standard_normal((4, 4 // kw["groups"], 3, 2)),
        rng.standard_normal(4),
    )
    dt = vk.float64 if device == "cpu" else vk.float32
    # a non-contiguous input (a channel slice of a wider tensor)
    xt = vk.tensor(np.concatenate([x, x], axis=1), dtype=dt, device=device)[:, 2:6].detach().requires_grad_()
    xt_in = xt
    wt, bt = (vk.tensor(a, dtype=dt, device=device, requires_grad=True) for a in (w, b))
    y = F.conv2d(xt_in, wt, bt, **kw)
    g = rng.standard_normal(y.shape)
    y.backward(vk.tensor(g, dtype=dt, device=device))
    tol = 1e-10 if device == "cpu" else 1e-4
    dx, dw, db = conv_grads_ref(np.concatenate([x, x], axis=1)[:, 2:6], w, g, **kw)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=tol, atol=tol)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=tol, atol=tol)
    np.testing.assert_allclose(bt.grad.numpy(), db, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce,k,s,p", [("max", 2, 2, 0), ("max", 3, 2, 1), ("avg", 3, 1, 1), ("avg", 2, 2, 1)])
def test_pool_backward_matches_loop(device, reduce, k, s, p):
    x = np.random.default_rng(11).permutation(2 * 3 * 7 * 5).reshape(2, 3, 7, 5) / 10.0  # distinct: unique argmax
    dt = vk.float64 if device == "cpu" else vk.float32
    xt = vk.tensor(x, dtype=dt, device=device, requires_grad=True)
    y = F.max_pool2d(xt, k, s, p) if reduce == "max" else F.avg_pool2d(xt, k, s, p)
    g = np.random.default_rng(12).standard_normal(y.shape)
    y.backward(vk.tensor(g, dtype=dt, device=device))
    np.testing.assert_allclose(xt.grad.numpy(), pool_grad_ref(x, g, k, s, p, reduce), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_pool_against_torch(device):
    torch = require_torch()
    rng = np.random.default_rng(13)
    x, w, b = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    tf = torch.nn.functional
    ty = tf.avg_pool2d(tf.max_pool2d(tf.conv2d(tx, tw, tb, 1, "same", (2, 1)), 3, 2, 1), 2, 1, 1)
    ty.square().sum().backward()
    dt = vk.float64 if device == "cpu" else vk.float32
    vx, vw, vb = (vk.tensor(a, dtype=dt, device=device, requires_grad=True) for a in (x, w, b))
    vy = F.avg_pool2d(F.max_pool2d(F.conv2d(vx, vw, vb, 1, "same", (2, 1)), 3, 2, 1), 2, 1, 1)
    vy.square().sum().backward()
    tol = 1e-10 if device == "cpu" else 1e-3
    for got, want in ((vy.detach(), ty.detach()), (vx.grad, tx.grad), (vw.grad, tw.grad), (vb.grad, tb.grad)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_window_ops_in_other_dtypes(device):
    x = np.random.default_rng(14).standard_normal((2, 3, 7, 6)) * 3
    dtypes = [vk.int32] + ([vk.float16] if _backend(device).supports(vk.float16) else [])
    for dt in dtypes:
        xt = vk.tensor(x, dtype=dt, device=device)
        xn = xt.numpy().astype(np.float64)
        np.testing.assert_array_equal(F.max_pool2d(xt, 3, 2, 1).numpy(), pool_ref(xn, 3, 2, 1, "max"))
        np.testing.assert_array_equal(F.unfold(xt, 3, 2, 1, 1).numpy(), unfold_ref(xn, (3, 3), (1, 1), (1, 1), (2, 2)))
        cols = F.unfold(xt, 2, 1, 0, 2)
        want = fold_ref(cols.numpy().astype(np.float64), (7, 6), (2, 2), (2, 2), (0, 0), (1, 1))
        np.testing.assert_allclose(vk_fold(cols, (7, 6), 2, 1, 0, 2).numpy(), want, rtol=1e-3)


def test_bench_conv_runs(capsys):
    from vkblas.bench.conv import Layer, run
    from vkblas.cli import main

    cols, rows = run([Layer("tiny", 2, 2, 3, 6)], ["cpu"], use_torch=False, budget=0.01)
    assert cols == ["layer", "vk cpu fwd ms", "vk cpu f+b ms", "vk cpu f+b host ms"]
    assert rows[0][0] == "tiny" and rows[0][2] > 0 and rows[0][3] > 0
    with pytest.raises(SystemExit):
        main(["bench", "conv", "--help"])
    assert "conv2d" in capsys.readouterr().out


def test_bench_conv_host_time_is_the_issuing_threads_cpu_time():
    """The host column is CPU time of the calling thread while it issues calls, not the wait for the device: a
    call that only waits (here: sleeps) costs ~0 of it, one that computes costs about its wall time."""
    import time

    from vkblas.bench.conv import _timed

    def spin() -> None:
        end = time.thread_time() + 0.002
        while time.thread_time() < end:
            pass

    wall, host = _timed(lambda: time.sleep(0.002), lambda: None, 0.03)
    assert wall >= 2.0 and host < wall / 2
    wall, host = _timed(spin, lambda: time.sleep(0.005), 0.03)
    assert 2.0 <= host <= wall


@requires_vulkan
def test_bench_conv_times_the_captured_step_where_the_device_captures():
    from vkblas.bench.conv import Layer, run

    cols, rows = run([Layer("tiny", 2, 2, 3, 6)], ["vulkan"], use_torch=False, budget=0.01)
    assert cols == ["layer", "vk vulkan fwd ms", "vk vulkan f+b ms", "vk vulkan f+b host ms", "vk vulkan graph f+b ms"]
    assert all(t > 0 for t in rows[0][1:])


@requires_vulkan
def test_bench_conv_says_what_the_first_call_spent_tuning(capsys, monkeypatch, tmp_path):
    """The first forward+backward of a layer compiles and tunes its GEMMs: the progress line gives its seconds and
    the tuner's split of them (a layer whose tuning outlasted a device lease left no other trace)."""
    from vkblas import backend as backends
    from vkblas.backend.vulkan import autotune, gemm
    from vkblas.bench.conv import Layer, run

    be = backends.get("vulkan")
    monkeypatch.setenv("VKBLAS_AUTOTUNE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(autotune, "MIN_TUNE_FLOPS", 1)
    monkeypatch.setattr(gemm, "candidates", lambda *a, **k: [(gemm.BY_NAME["32x32k16.4x4.db"], 1)])
    monkeypatch.delattr(be, "_gemm_tuner", raising=False)  # a tuner that sees VKBLAS_AUTOTUNE=1 and no cache
    be.plans.clear()
    try:
        run([Layer("tiny", 2, 2, 3, 6)], ["vulkan"], use_torch=False, budget=0.01)
        line = capsys.readouterr().err.splitlines()[-1]
        log = be._gemm_tuner.log
        assert log and all(e["build_s"] >= e["compile_s"] > 0 and e["time_s"] > 0 for e in log)
        assert line.startswith("  tiny: done; vulkan first f+b ") and f"({len(log)} GEMM classes tuned, " in line
        assert f"s compiling on {autotune.COMPILE_THREADS} threads, " in line and "s checking" in line
        assert "s timing, 0 timed once)" in line
    finally:
        be.plans.clear()


# ------------------------------------------------------------------------------------------ chunks of images
# conv2d and max_pool2d's composition go through the batch in chunks whose window columns fit COLUMN_BUDGET; a budget
# of one byte makes every image a chunk of its own, which must change nothing
CHUNK_CASES = [
    dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=1),
]


def _conv_forward_backward(device, dt, x, w, b, g, kw):
    xt, wt, bt = (vk.tensor(a, dtype=dt, device=device, requires_grad=True) for a in (x, w, b))
    y = F.conv2d(xt, wt, bt, **kw)
    y.backward(vk.tensor(g, dtype=dt, device=device))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", CHUNK_CASES, ids=str)
def test_conv2d_in_chunks_of_images_matches_loop_and_one_chunk(device, kw, monkeypatch):
    rng = np.random.default_rng(15)
    x = rng.standard_normal((3, 4, 7, 8))
    w, b = rng.standard_normal((6, 4 // kw["groups"], 3, 2)), rng.standard_normal(6)
    want = conv_ref(x, w, b, **kw)
    g = rng.standard_normal(want.shape)
    dt = vk.float64 if device == "cpu" else vk.float32
    whole = _conv_forward_backward(device, dt, x, w, b, g, kw)
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 1)
    assert len(conv_ops._chunks(3, 4 * 6 * 56 * 8)) == 3
    chunked = _conv_forward_backward(device, dt, x, w, b, g, kw)
    tol = 1e-10 if device == "cpu" else 1e-4
    for got, one, ref in zip(chunked, whole, (want, *conv_grads_ref(x, w, g, **kw)), strict=True):
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(got, one, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", [*CHUNK_CASES, dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=2)], ids=str)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("budget", [None, 1], ids=["one-chunk", "image-chunks"])
def test_conv2d_per_image_products_match_the_loop(device, kw, with_bias, budget, monkeypatch):
    """Images with at least PER_IMAGE_GEMM_PIXELS output pixels: the composition multiplies image by image
    straight into the result (on Vulkan only where the convolution primitive declines: groups > 1)."""
    rng = np.random.default_rng(18)
    x = rng.standard_normal((3, 4, 20, 18))
    w, b = rng.standard_normal((6, 4 // kw["groups"], 3, 2)), rng.standard_normal(6) if with_bias else None
    want = conv_ref(x, w, b, **kw)
    assert want.shape[2] * want.shape[3] >= conv_ops.PER_IMAGE_GEMM_PIXELS
    if budget is not None:
        monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", budget)
    dt = vk.float64 if device == "cpu" else vk.float32
    got = F.conv2d(
        vk.tensor(x, dtype=dt, device=device),
        vk.tensor(w, dtype=dt, device=device),
        None if b is None else vk.tensor(b, dtype=dt, device=device),
        **kw,
    )
    tol = 1e-10 if device == "cpu" else 1e-4
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("kw", [*CONV_CASES, dict(padding="same", dilation=(2, 1))], ids=str)
def test_conv2d_in_chunks_gradcheck(kw, monkeypatch):
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 1)
    rng = np.random.default_rng(16)
    groups = kw.get("groups", 1)
    x = vk.tensor(rng.standard_normal((3, 2, 5, 4)), dtype=vk.float64, device="cpu", requires_grad=True)
    w = vk.tensor(rng.standard_normal((2, 2 // groups, 2, 2)), dtype=vk.float64, device="cpu", requires_grad=True)
    b = vk.tensor(rng.standard_normal(2), dtype=vk.float64, device="cpu", requires_grad=True)
    assert vk.gradcheck(lambda a, ww, bb: F.conv2d(a, ww, bb, **kw), [x, w, b])
    assert vk.gradcheck(lambda a, ww: F.conv2d(a, ww, None, **kw), [x, w])  # no bias, and unbatched
    assert vk.gradcheck(lambda a, ww: F.conv2d(a[0], ww, **kw), [x, w])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (2, 1, 1)])
def test_max_pool2d_in_chunks_of_images_matches_loop(device, k, s, p, monkeypatch):
    x = np.random.default_rng(17).permutation(3 * 2 * 7 * 6).reshape(3, 2, 7, 6) / 10.0  # distinct: unique argmax
    x[1, 0, 0, 0] = np.nan  # the NaN rule, per chunk
    dt = vk.float64 if device == "cpu" else vk.float32
    xt = vk.tensor(x, dtype=dt, device=device, requires_grad=True)
    whole = F.max_pool2d(xt, k, s, p, return_indices=True)[1].numpy()
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 1)
    y, index = F.max_pool2d(xt, k, s, p, return_indices=True)
    np.testing.assert_allclose(y.detach().numpy(), pool_ref(x, k, s, p, "max"), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(index.numpy(), whole)
    with vk.no_grad():  # inference's path (no argmax)
        np.testing.assert_array_equal(F.max_pool2d(xt, k, s, p).numpy(), y.detach().numpy())
    x[1, 0, 0, 0] = -1.0  # the gradient of the NaN-free problem against the loop
    xt = vk.tensor(x, dtype=dt, device=device, requires_grad=True)
    y = F.max_pool2d(xt, k, s, p)
    g = np.random.default_rng(18).standard_normal(y.shape)
    y.backward(vk.tensor(g, dtype=dt, device=device))
    np.testing.assert_allclose(xt.grad.numpy(), pool_grad_ref(x, g, k, s, p, "max"), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ implicit GEMM (Vulkan)
# the Vulkan backend's ``convolution`` primitive: forward, input and weight gradient as one GEMM each, the operands
# read through the convolution's geometry. Shapes chosen so that K (C*kh*kw, O*kh*kw, N*OH*OW) and the pixel grids
# cross tile and K-step edges, with stride, padding and dilation per axis, 1x1 kernels and one image, pixel counts
# with and without a multiple of 4
IMPLICIT_CASES = [
    ((2, 4, 7, 8), (6, 3, 2), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1))),
    ((3, 5, 11, 9), (7, 3, 3), dict(stride=(2, 3), padding=(1, 2), dilation=(1, 1))),
    ((2, 3, 13, 12), (5, 3, 2), dict(stride=(1, 2), padding=(2, 1), dilation=(2, 3))),
    ((1, 9, 6, 6), (33, 1, 1), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1))),
    ((4, 2, 9, 9), (3, 5, 5), dict(stride=(3, 2), padding=(2, 2), dilation=(1, 1))),
    # channels a multiple of the K step (16, 32): one (ky, kx) per K tile of the forward and input products
    ((2, 16, 6, 5), (32, 3, 3), dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1))),
    ((3, 32, 9, 8), (16, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(2, 2))),
    # fewer pixels than channels, and pixel planes smaller than a tile
    ((2, 3, 4, 4), (40, 3, 3), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1))),
    ((2, 20, 3, 3), (5, 2, 2), dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1))),
]


def _conv_primitive_calls(monkeypatch):
    """Records (kind, did it) of every call of the Vulkan backend's convolution primitive."""
    from vkblas.backend.vulkan.backend import VulkanBackend

    calls, original = [], VulkanBackend.convolution

    def spy(self, kind, *args):
        done = original(self, kind, *args)
        calls.append((kind, done))
        return done

    monkeypatch.setattr(VulkanBackend, "convolution", spy)
    return calls


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("xshape,wshape,kw", IMPLICIT_CASES, ids=str)
def test_vulkan_conv2d_implicit_gemm_matches_loop(xshape, wshape, kw, monkeypatch):
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(20)
    o, kh, kwid = wshape
    x, w, b = rng.standard_normal(xshape), rng.standard_normal((o, xshape[1], kh, kwid)), rng.standard_normal(o)
    want = conv_ref(x, w, b, **kw)
    g = rng.standard_normal(want.shape)
    got = _conv_forward_backward("vulkan", vk.float32, x, w, b, g, kw)
    # the input gradient's product needs output channels in multiples of 16 (whole-tile taps), else composition
    assert sorted(calls) == [("forward", True), ("input", o % 16 == 0), ("weight", True)]
    for out, ref in zip(got, (want, *conv_grads_ref(x, w, g, groups=1, **kw)), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
def test_vulkan_conv2d_implicit_gemm_reads_any_strides(monkeypatch):
    """A non-contiguous input (every other channel, H and W swapped) and an expanded output gradient (strides 0,
    from ``sum().backward()``) are read through their strides, not copied."""
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(21)
    x, w = rng.standard_normal((3, 6, 9, 11)), rng.standard_normal((4, 3, 3, 3))
    xt, wt = (vk.tensor(a, dtype=vk.float32, device="vulkan", requires_grad=True) for a in (x, w))
    view = xt[:, ::2].transpose(2, 3)
    assert not view._view.is_contiguous()
    y = F.conv2d(view, wt, None, padding=1)
    y.sum().backward()
    xv = x[:, ::2].transpose(0, 1, 3, 2)
    kw = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    dx, dw, _ = conv_grads_ref(xv, w, np.ones(y.shape), **kw)
    full_dx = np.zeros_like(x)
    full_dx[:, ::2] = dx.transpose(0, 1, 3, 2)
    np.testing.assert_allclose(y.detach().numpy(), conv_ref(xv, w, None, padding=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xt.grad.numpy(), full_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-4)
    assert calls == [("forward", True), ("weight", True), ("input", False)]  # 4 output channels: see above


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("layout", ["contiguous", "swapped", "offset", "channels_last", "taps_flipped"])
@pytest.mark.parametrize("cin", [16, 3])
@pytest.mark.parametrize("copy", [False, True], ids=["gather", "copy"])
def test_vulkan_conv2d_reads_the_weight_through_its_strides(layout, cin, copy, monkeypatch):
    """The forward and input-gradient GEMMs read the weight (O, C, kh, kw) in channels-last tap order through its
    own strides (no copy), or from a channels-last copy of it (from ``WEIGHT_COPY_PIXELS``, set to 0 here): any
    layout of its storage, an offset into it, channels a multiple of the K step (one (ky, kx) per K tile) or not
    (3: per element). The products go through the primitive, none composed."""
    from vkblas.backend.vulkan import conv as vk_conv

    be = vk.tensor([0.0], device="vulkan")._backend
    monkeypatch.setattr(be, "plans", type(be.plans)())
    monkeypatch.setattr(vk_conv, "WEIGHT_COPY_PIXELS", 0 if copy else vk_conv.WEIGHT_COPY_PIXELS)
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(22)
    o, kh, kwid = 16, 3, 2
    x, w, b = rng.standard_normal((2, cin, 7, 6)), rng.standard_normal((o, cin, kh, kwid)), rng.standard_normal(o)
    kw = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    want = conv_ref(x, w, b, **kw)
    g = rng.standard_normal(want.shape)
    stored = {  # (the storage's array, how the (O, C, kh, kw) weight is a view of it)
        "contiguous": (w, lambda t: t),
        "swapped": (np.ascontiguousarray(w.transpose(1, 0, 2, 3)), lambda t: t.transpose(0, 1)),
        "offset": (np.concatenate([w[:1] + 9, w, w[:2] - 9]), lambda t: t[1 : 1 + o]),
        "channels_last": (np.ascontiguousarray(w.transpose(0, 2, 3, 1)), lambda t: t.permute(0, 3, 1, 2)),
        "taps_flipped": (np.ascontiguousarray(w.transpose(0, 1, 3, 2)), lambda t: t.transpose(2, 3)),
    }[layout]
    xt, st, bt = (vk.tensor(a, dtype=vk.float32, device="vulkan", requires_grad=True) for a in (x, stored[0], b))
    wt = stored[1](st)
    np.testing.assert_array_equal(wt.detach().numpy(), w.astype(np.float32))
    y = F.conv2d(xt, wt, bt, **kw)
    y.backward(vk.tensor(g, dtype=vk.float32, device="vulkan"))
    dx, dw, db = conv_grads_ref(x, w, g, groups=1, **kw)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stored[1](st.grad).numpy(), dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bt.grad.numpy(), db, rtol=1e-4, atol=1e-4)
    assert sorted(calls) == [("forward", True), ("input", True), ("weight", True)]


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
def test_vulkan_conv2d_copies_the_weight_from_a_batch_of_pixels(monkeypatch):
    """Below ``WEIGHT_COPY_PIXELS`` output pixels an eager forward+backward reads the weight through its strides;
    from it, the forward and the input gradient each copy it channels-last first: two dispatches more, the same
    values (bits of the same GEMM variant)."""
    from vkblas.backend.vulkan import conv as vk_conv
    from vkblas.backend.vulkan import winograd

    monkeypatch.setattr(winograd, "MODE", "never")  # the implicit GEMM's weight operand
    be = vk.tensor([0.0], device="vulkan")._backend
    rng = np.random.default_rng(27)
    x, w, b = rng.standard_normal((2, 16, 6, 5)), rng.standard_normal((16, 16, 3, 3)), rng.standard_normal(16)
    g = rng.standard_normal((2, 16, 6, 5))
    xt, wt, bt = (vk.tensor(a, dtype=vk.float32, device="vulkan", requires_grad=True) for a in (x, w, b))
    gt = vk.tensor(g, dtype=vk.float32, device="vulkan")
    counts, grads = [], []
    for threshold in (2 * 6 * 5 + 1, 2 * 6 * 5):
        monkeypatch.setattr(be, "plans", type(be.plans)())
        monkeypatch.setattr(vk_conv, "WEIGHT_COPY_PIXELS", threshold)
        for _ in range(2):  # the second time with every plan made
            xt.grad = wt.grad = bt.grad = None
            before = be.rt.dispatches
            y = F.conv2d(xt, wt, bt, padding=1)
            y.backward(gt)
            vk.synchronize("vulkan")
        counts.append(be.rt.dispatches - before)
        grads.append([t.numpy() for t in (y.detach(), xt.grad, wt.grad, bt.grad)])
    assert counts[1] == counts[0] + 2
    want = (conv_ref(x, w, b, padding=1), *conv_grads_ref(x, w, g, (1, 1), (1, 1), (1, 1), 1))
    for gathered, copied, ref in zip(*grads, want, strict=True):
        np.testing.assert_array_equal(copied, gathered)
        np.testing.assert_allclose(copied, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("stride", [1, 2])
def test_vulkan_conv2d_input_gradient_adds_only_real_terms(stride, monkeypatch):
    """An inf and a NaN weight: the input gradient is NaN / inf exactly where a real term carries them (PyTorch's
    col2im), not also at the border pixels whose missing taps a GEMM would otherwise add as ``0 * w``."""
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(24)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((16, 3, 3, 3))
    w[2, 1, 0, 0], w[5, 0, 2, 1] = np.inf, np.nan
    xt, wt = (vk.tensor(a, dtype=vk.float32, device="vulkan", requires_grad=True) for a in (x, w))
    y = F.conv2d(xt, wt, None, stride=stride, padding=1)
    g = np.abs(rng.standard_normal(y.shape)) + 0.5  # positive: inf stays inf where only it is non-finite
    y.backward(vk.tensor(g, dtype=vk.float32, device="vulkan"))
    kw = dict(stride=(stride, stride), padding=(1, 1), dilation=(1, 1), groups=1)
    with np.errstate(invalid="ignore"):
        want = conv_grads_ref(x, w, g, **kw)[0]
    got = xt.grad.numpy()
    assert ("input", True) in calls
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert 0 < finite.sum() < finite.size  # both kinds of pixel are there
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("splits", [1, 3])
def test_vulkan_conv2d_bias_in_the_epilogue(splits, monkeypatch):
    """The forward's bias goes into the GEMM's epilogue (once, in split 0's partials under split-K); a strided
    bias view is added after the GEMM instead."""
    from vkblas.backend.vulkan import gemm

    be = vk.tensor([0.0], device="vulkan")._backend
    monkeypatch.setattr(be, "plans", type(be.plans)())  # plans made here only, not reused from other tests
    if splits > 1:  # force split-K on the forward's (small) problem
        choice = gemm.default_choice
        monkeypatch.setattr(gemm, "default_choice", lambda *a: (choice(*a)[0], splits))
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(25)
    x, w, wide = rng.standard_normal((2, 16, 6, 5)), rng.standard_normal((5, 16, 3, 3)), rng.standard_normal(10)
    xt, wt, bt = (vk.tensor(a, dtype=vk.float32, device="vulkan") for a in (x, w, wide))
    for b, bias in ((wide[:5], bt[:5]), (wide[::2], bt[::2])):
        got = F.conv2d(xt, wt, bias, padding=1)
        np.testing.assert_allclose(got.numpy(), conv_ref(x, w, b, padding=1), rtol=1e-4, atol=1e-4)
    assert calls == [("forward", True), ("forward", True)]


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("splits", [1, 3])
def test_vulkan_conv2d_weight_gradient_gemm_writes_the_bias_gradient(splits, monkeypatch):
    """A first layer's backward (no input gradient) is the weight gradient's GEMM alone (and its splits' sum): the
    bias gradient, the output gradient summed over images and pixels, is that GEMM's row sums, not a reduction of
    its own; an inf or NaN in the gradient reaches its channel's bias gradient. A strided bias-gradient target
    handed to the primitive is reduced after the GEMM instead."""
    from vkblas.backend.vulkan import gemm

    be = vk.tensor([0.0], device="vulkan")._backend
    monkeypatch.setattr(be, "plans", type(be.plans)())
    choice = gemm.default_choice
    monkeypatch.setattr(gemm, "default_choice", lambda *a: (choice(*a)[0], splits))
    rng = np.random.default_rng(26)
    x, w, b = rng.standard_normal((3, 2, 9, 8)), rng.standard_normal((5, 2, 3, 3)), rng.standard_normal(5)
    g = rng.standard_normal((3, 5, 9, 8))
    g[1, 2, 3, 4], g[2, 4, 0, 0] = np.inf, np.nan
    xt = vk.tensor(x, dtype=vk.float32, device="vulkan")
    wt, bt = (vk.tensor(a, dtype=vk.float32, device="vulkan", requires_grad=True) for a in (w, b))
    gt = vk.tensor(g, dtype=vk.float32, device="vulkan")
    for _ in range(2):  # the second time with every plan made
        wt.grad = bt.grad = None
        y = F.conv2d(xt, wt, bt, padding=1)
        before = be.rt.dispatches
        y.backward(gt)
        vk.synchronize("vulkan")
        dispatches = be.rt.dispatches - before
    assert dispatches == (1 if splits == 1 else 2)
    np.testing.assert_allclose(bt.grad.numpy(), g.sum((0, 2, 3)), rtol=1e-5, atol=1e-4)
    finite = np.isfinite(g).all((0, 2, 3))
    gw_ref = conv_grads_ref(x, w, g, (1, 1), (1, 1), (1, 1), 1)[1]
    np.testing.assert_allclose(wt.grad.numpy()[finite], gw_ref[finite], rtol=1e-4, atol=1e-4)
    gw, wide = vk.empty((5, 18), device="vulkan"), vk.full((10,), 7.0, device="vulkan")
    strided = wide[::2]
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1))
    assert be.convolution("weight", gw._view, gt._view, xt._view, *geometry, strided._view)
    np.testing.assert_allclose(strided.numpy(), g.sum((0, 2, 3)), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(wide.numpy()[1::2], 7.0)
    with pytest.raises(ValueError, match=r"bias of shape \(4,\)"):
        be.convolution("weight", gw._view, gt._view, xt._view, *geometry, vk.empty((4,), device="vulkan")._view)


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
def test_vulkan_conv2d_float16_and_special_values_through_the_primitive(monkeypatch):
    calls = _conv_primitive_calls(monkeypatch)
    rng = np.random.default_rng(22)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    got = F.conv2d(vk.tensor(x, dtype=vk.float16, device="vulkan"), vk.tensor(w, dtype=vk.float16, device="vulkan"))
    assert got.dtype is vk.float16
    np.testing.assert_allclose(got.numpy().astype(np.float64), conv_ref(x, w, None), rtol=2e-2, atol=2e-2)
    x[1, 2, 3, 4], x[0, 0, 0, 0] = np.nan, np.inf  # NaN spreads over its windows, inf too (or NaN where 0*inf)
    want = conv_ref(x, w, None, padding=1)
    xt, wt = (vk.tensor(a, dtype=vk.float32, device="vulkan") for a in (x, w))
    got = F.conv2d(xt, wt, padding=1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    assert [done for _, done in calls] == [True, True]


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
def test_vulkan_convolution_primitive_errors_name_the_shapes():
    be = vk.tensor([0.0], device="vulkan")._backend
    x, w = vk.empty((2, 3, 5, 5), device="vulkan"), vk.empty((4, 3, 3, 3), device="vulkan")
    out = vk.empty((2, 4, 4, 4), device="vulkan")  # 3x3 kernel: 3x3 outputs, not 4x4
    with pytest.raises(ValueError, match=r"convolution forward.*\(2, 4, 4, 4\) \(expected \(2, 4, 3, 3\)\)"):
        be.convolution("forward", out._view, x._view, w._view, (3, 3), (1, 1), (0, 0), (1, 1))
    out = vk.empty((2, 4, 3, 3), device="vulkan")
    with pytest.raises(ValueError, match=r"weight \(4, 3, 3, 3\) \(expected \(4, 3, 2, 2\)\)"):
        be.convolution("forward", out._view, x._view, w._view, (2, 2), (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="unknown convolution product 'sideways'"):
        be.convolution("sideways", out._view, x._view, w._view, (3, 3), (1, 1), (0, 0), (1, 1))


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("winograd", ["always", "never"])
def test_vulkan_convolution_checks_its_operands_before_choosing_a_product(winograd, monkeypatch):
    """Shapes Winograd applies to (16 channels, 3x3, stride 1): a mismatched weight, a 2-D weight or a strided
    output is refused naming the shapes, whichever product would compute it (Winograd's took them unchecked: an
    input gradient wrote past its output, a strided output was written as if contiguous)."""
    from vkblas.backend.vulkan import winograd as wg

    monkeypatch.setattr(wg, "MODE", winograd)
    be = vk.tensor([0.0], device="vulkan")._backend
    x, g = vk.empty((2, 16, 6, 6), device="vulkan"), vk.empty((2, 16, 6, 6), device="vulkan")
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1))
    gx = vk.empty((2, 16, 6, 6), device="vulkan")
    w20 = vk.empty((20, 16, 3, 3), device="vulkan")  # 20 output channels against g's 16
    with pytest.raises(
        ValueError, match=r"convolution input: .*output gradient \(2, 16, 6, 6\) \(expected \(2, 20, 6, 6\)\)"
    ):
        be.convolution("input", gx._view, g._view, w20._view, *geometry)
    w2 = vk.empty((16, 144), device="vulkan")
    with pytest.raises(ValueError, match=r"convolution forward: operands of ranks \(4, 4, 2\)"):
        be.convolution("forward", vk.empty((2, 16, 6, 6), device="vulkan")._view, x._view, w2._view, *geometry)
    wide = vk.zeros((2, 16, 6, 12), device="vulkan")
    strided = wide[:, :, :, ::2]  # every other column: not contiguous
    w = vk.empty((16, 16, 3, 3), device="vulkan")
    with pytest.raises(ValueError, match=r"the output must be contiguous, got strides \(1152, 72, 12, 2\)"):
        be.convolution("forward", strided._view, x._view, w._view, *geometry)
    assert not wide.numpy().any()  # nothing was written over the parent


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("kw", CHUNK_CASES[::2], ids=str)
def test_vulkan_conv2d_composition_still_matches_without_the_primitive(kw, monkeypatch):
    """Where the primitive declines (an operand of a large tensor), the chunked composition does the work: on
    Vulkan too, with every image a chunk of its own."""
    from vkblas.backend.vulkan.backend import VulkanBackend

    monkeypatch.setattr(VulkanBackend, "convolution", lambda self, *a: False)
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 1)
    rng = np.random.default_rng(23)
    x, w, b = rng.standard_normal((3, 4, 7, 8)), rng.standard_normal((6, 4, 3, 2)), rng.standard_normal(6)
    want = conv_ref(x, w, b, **kw)
    g = rng.standard_normal(want.shape)
    got = _conv_forward_backward("vulkan", vk.float32, x, w, b, g, kw)
    for out, ref in zip(got, (want, *conv_grads_ref(x, w, g, **kw)), strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_workgroup_memory_counts_every_declaration_of_each_gemm_kernel():
    """``applicable`` must see all the workgroup memory a kernel declares: the input gradient's masked tiles add a
    flag per stage, and counting only the operand tiles let 128x256k16.p0 (exactly 48 KiB of them) run with 8
    bytes past an H100's limit, which hung its first ResNet input gradient (a test that failed before)."""
    import re

    from vkblas.backend.vulkan import gemm

    size = {"vec4<f32>": 16, "vec4<i32>": 16, "vec4<f16>": 8, "atomic<u32>": 4}
    strides = (16 * 36, 36, 6, 1)
    inp = gemm.Gather("transposed", True, 16, (4, 4), (6, 6), 1, strides, (3, 3), channels_last=True)
    wts = gemm.Gather("weights", True, 16, (3, 3), (3, 3), 16, (9, 144, 3, 1), (3, 3), channels_last=True)
    specs = [
        gemm.Spec(vk.float32, 1, "vk", "si", True, False),
        gemm.Spec(vk.float16, 1, "vk", "si", True, False),
        gemm.Spec(vk.float32, 1, "vk", inp.mode, True, True, None, inp),
        gemm.Spec(vk.float32, 1, wts.mode, inp.mode, True, True, wts, inp),
    ]
    for v in gemm.VARIANTS:
        for spec in specs:
            if (v.f16_math and spec.dtype is not vk.float16) or (v.kgroups > 1 and spec.b_gather is not None):
                continue  # (K groups take no gathered operand)
            decls = re.findall(r"var<workgroup> \w+: array<(.+), (\d+)>;", gemm.source(v, spec))
            assert sum(size[t] * int(n) for t, n in decls) == gemm.workgroup_bytes(v, spec), (v.name, spec)
    h100 = {"max-compute-workgroup-storage-size": 48 * 1024, "max-compute-invocations-per-workgroup": 1024}
    tight = gemm.BY_NAME["128x256k16.8x16.db.p0"]
    assert gemm.applicable(tight, specs[0], h100)
    assert not gemm.applicable(tight, specs[2], h100)


@pytest.mark.skipif(not HAS_VULKAN, reason="no Vulkan adapter")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_gemm_variant_compiles_with_each_convolution_gather(dtype):
    """The tuner may pick any variant on a GPU (lavapipe's defaults use few): each one, f16-math ones included,
    must compile with the forward's, the input gradient's (masked tiles) and the weight gradient's gathers."""
    from vkblas.backend.vulkan import gemm

    be = vk.tensor([0.0], device="vulkan")._backend
    dt = getattr(vk, dtype)
    strides = (16 * 36, 36, 6, 1)
    fwd = gemm.Gather("window", True, 16, (6, 6), (4, 4), 1, strides, (3, 3), channels_last=True)
    inp = gemm.Gather("transposed", True, 16, (4, 4), (6, 6), 1, strides, (3, 3), channels_last=True)
    planes = gemm.Gather("planes", False, 16, (4, 4), (4, 4), 2, strides)
    wgt = gemm.Gather("window", False, 16, (6, 6), (4, 4), 2, strides, (3, 3))
    # the weight (16, 16, 3, 3) through its strides, as the forward's rows (O) and the input gradient's (C)
    w_fwd = gemm.Gather("weights", True, 16, (3, 3), (3, 3), 16, (144, 9, 3, 1), (3, 3), channels_last=True)
    w_inp = gemm.Gather("weights", True, 16, (3, 3), (3, 3), 16, (9, 144, 3, 1), (3, 3), channels_last=True)
    specs = [
        gemm.Spec(dt, 1, w_fwd.mode, fwd.mode, True, False, w_fwd, fwd),
        gemm.Spec(dt, 1, w_inp.mode, inp.mode, True, True, w_inp, inp),
        gemm.Spec(dt, 0, planes.mode, wgt.mode, False, True, planes, wgt),
    ]
    compiled = 0
    for v in gemm.VARIANTS:
        for spec in specs:
            if gemm.applicable(v, spec, be.dev.limits):
                be.dev.kernel(gemm.source(v, spec), 3)
                compiled += 1
    assert compiled >= 3 * (4 if dtype == "float32" else 8)
