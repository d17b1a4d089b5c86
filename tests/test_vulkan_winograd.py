"""Winograd F(2x2, 3x3) convolution products on Vulkan (``backend/vulkan/winograd.py``): against float64 loops, with
the implicit GEMM's non-finite semantics, only where it applies, chosen by timing, and inside captured graphs."""

from __future__ import annotations

import os

import numpy as np
import pytest

import vkblas as vk
from conftest import requires_vulkan
from references import conv_ref
from test_conv import conv_grads_ref
from vkblas.nn import functional as F

pytestmark = requires_vulkan
DEV = "vulkan"


@pytest.fixture
def winograd(monkeypatch, tmp_path):
    """The module, with fresh plans, an empty tuner's table whose cache file is under ``tmp_path``, and a list of
    the kinds of product it recorded (``.recorded``)."""
    from vkblas.backend.vulkan import winograd as wg
    from vkblas.backend.vulkan.autotune import tuner

    be = vk.tensor([0.0], device=DEV)._backend
    monkeypatch.setattr(be, "plans", type(be.plans)())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(tuner(be), "table", {})
    recorded, original = [], wg.record

    def spy(backend, r, *views):
        recorded.append("forward" if r.problem.terms == "padded" else "input")
        original(backend, r, *views)

    monkeypatch.setattr(wg, "record", spy)
    monkeypatch.setattr(wg, "MODE", "always")
    monkeypatch.setattr(wg, "recorded", recorded, raising=False)
    return wg


def _leaf(a: np.ndarray) -> vk.Tensor:
    return vk.tensor(a, dtype=vk.float32, device=DEV, requires_grad=True)


def _fwd_bwd(x, w, b, g, padding):
    """(y, dx, dw, db) of conv2d on Vulkan; x and w may be views of leaves (``(leaf, view)`` pairs)."""
    (xl, xv), (wl, wv) = x, w
    bl = None if b is None else _leaf(b)
    y = F.conv2d(xv, wv, bl, padding=padding)
    y.backward(vk.tensor(g, dtype=vk.float32, device=DEV))
    return y.detach().numpy(), xl.grad.numpy(), wl.grad.numpy(), None if bl is None else bl.grad.numpy()


# (batch, in channels, out channels, height, width, padding): odd sizes (edge tiles), every padding, one image,
# channel counts that are not multiples of 4
CASES = [(2, 16, 16, 7, 5, 1), (1, 17, 20, 6, 6, 0), (3, 16, 24, 5, 8, 2), (2, 32, 16, 9, 9, 1), (1, 16, 16, 3, 3, 0)]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "views"])
@pytest.mark.parametrize("bias", [True, False])
def test_winograd_forward_and_input_gradient_match_the_loops(winograd, case, layout, bias):
    n, c, o, h, w, p = case
    rng = np.random.default_rng(sum(case))
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, 3, 3)), rng.standard_normal(o)
    g = rng.standard_normal((n, o, h + 2 * p - 2, w + 2 * p - 2))
    if layout == "contiguous":
        xs, ws = (_leaf(x),) * 2, (_leaf(wt),) * 2
    else:  # channels-last input, the weight stored (C, O, kw, kh): both read through their strides
        xl, wl = _leaf(x.transpose(0, 2, 3, 1)), _leaf(wt.transpose(1, 0, 3, 2))
        xs, ws = (xl, xl.permute(0, 3, 1, 2)), (wl, wl.permute(1, 0, 3, 2))
    y, dx, dw, db = _fwd_bwd(xs, ws, b if bias else None, g, p)
    assert winograd.recorded == ["forward", "input"]
    want_dx, want_dw, want_db = conv_grads_ref(x, wt, g, (1, 1), (p, p), (1, 1), 1)
    if layout == "views":
        dx, dw = dx.transpose(0, 3, 1, 2), dw.transpose(1, 0, 3, 2)
    np.testing.assert_allclose(y, conv_ref(x, wt, b if bias else None, padding=p), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-4)
    if bias:
        np.testing.assert_allclose(db, want_db, rtol=1e-4, atol=1e-4)


def _finite_and_not(got: np.ndarray, want: np.ndarray) -> None:
    """The same NaNs and the same signed infs; the finite values close."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0))
    finite = np.isfinite(want)
    assert 0 < finite.sum() < finite.size
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("where", ["input", "weight"])
def test_winograd_keeps_the_direct_sums_infs_and_nans(winograd, monkeypatch, where):
    """An inf and a NaN in the input or the weight: the transforms alone would turn the inf into NaN across its
    tile (inf - inf); the output transform sees the non-finite values and takes the direct sum there, so the
    result has the implicit GEMM's NaNs and infs exactly (the forward's padding taps add ``0 * w``, the input
    gradient's missing taps nothing)."""
    rng = np.random.default_rng(31)
    x, w = rng.standard_normal((2, 16, 6, 7)), np.abs(rng.standard_normal((16, 16, 3, 3)))
    g = np.abs(rng.standard_normal((2, 16, 6, 7))) + 0.5  # positive: an inf stays inf where it is alone
    if where == "input":
        x = np.abs(x)
        x[0, 3, 2, 2], x[1, 5, 0, 6] = np.inf, np.nan
    else:
        w[2, 1, 0, 0], w[5, 0, 2, 1] = np.inf, np.nan
    results = {}
    for mode in ("always", "never"):
        monkeypatch.setattr(winograd, "MODE", mode)
        vk.tensor([0.0], device=DEV)._backend.plans.clear()
        results[mode] = _fwd_bwd((_leaf(x),) * 2, (_leaf(w),) * 2, None, g, 1)
    assert winograd.recorded == ["forward", "input"]  # the "always" pass only
    carried = 2 if where == "weight" else 1  # the output, and the input gradient where the weight has them
    for got, want in zip(results["always"][:carried], results["never"][:carried], strict=True):
        _finite_and_not(got, want)


@pytest.mark.parametrize(
    "kw, shapes",
    [
        (dict(stride=2, padding=1), ((2, 16, 8, 8), (16, 16, 3, 3))),
        (dict(dilation=2, padding=2), ((2, 16, 8, 8), (16, 16, 3, 3))),
        (dict(padding=3), ((2, 16, 8, 8), (16, 16, 3, 3))),
        (dict(padding=2), ((2, 16, 8, 8), (16, 16, 5, 5))),
        (dict(padding=1), ((2, 8, 8, 8), (16, 8, 3, 3))),  # 8 channels: too few for the forward and dX
        (dict(padding=1), ((2, 16, 8, 8), (8, 16, 3, 3))),
    ],
    ids=["stride", "dilation", "padding 3", "5x5", "8 in", "8 out"],
)
def test_winograd_only_where_it_applies(winograd, kw, shapes):
    rng = np.random.default_rng(32)
    x, w = (rng.standard_normal(s) for s in shapes)
    y = F.conv2d(_leaf(x), _leaf(w), None, **kw)
    np.testing.assert_allclose(y.detach().numpy(), conv_ref(x, w, None, **kw), rtol=1e-4, atol=1e-4)
    y.backward(vk.ones_like(y))
    assert winograd.recorded == []


def test_winograd_stays_within_its_workspace(winograd, monkeypatch):
    """Past ``WORKSPACE_BYTES`` of temporaries the product is the implicit GEMM's; at the limit, Winograd's."""
    n, c, h = 2, 16, 8
    x, w = np.ones((n, c, h, h)), np.ones((c, c, 3, 3))
    tiles = n * (h // 2) ** 2
    need = 4 * 16 * (c * c + 2 * c * tiles)  # U, V and M of the forward (and of the input gradient: the same)
    for cap, want in ((need - 1, []), (need, ["forward"])):
        monkeypatch.setattr(winograd, "WORKSPACE_BYTES", cap)
        vk.tensor([0.0], device=DEV)._backend.plans.clear()
        winograd.recorded.clear()
        F.conv2d(vk.tensor(x, dtype=vk.float32, device=DEV), vk.tensor(w, dtype=vk.float32, device=DEV), padding=1)
        assert winograd.recorded == want


@pytest.mark.parametrize("faster", ["winograd", "implicit", "winograd, bound by its host"])
def test_winograd_when_it_times_faster(winograd, monkeypatch, faster):
    """``MODE = "auto"``: a layout's first call times both products (twice each) and keeps the faster, charging
    each eager dispatch at least ``DISPATCH_HOST_S`` of host time; here the timer is told which is faster (Winograd's
    dispatches are its three transforms and the GEMM's). A Winograd faster on the GPU by less than its three more
    dispatches' host time is taken only in captured graphs, whose replays issue no dispatch from Python ("graphs").
    The choice goes into the tuner's cache file: a later process (fresh plans, the table read back) times nothing,
    and where Winograd won does not tune the implicit GEMM either; a capture finds the choice made too."""
    from vkblas import graphs
    from vkblas.backend.vulkan import conv
    from vkblas.backend.vulkan.autotune import Tuner, cache_path, tuner

    timed, implicit_tuned, plan = [], [], Tuner.plan
    scale = conv.DISPATCH_HOST_S / 10 if faster.endswith("host") else 1.0
    verdict = {"winograd": "winograd", "implicit": "implicit"}.get(faster, "graphs")

    def fake(self, make):
        wino = len(make()) >= 4
        timed.append(wino)
        return scale * (1.0 if wino == faster.startswith("winograd") else 2.0)

    def spy(self, out, a, b, gathers=None, *rest, **kw):
        implicit_tuned.append(gathers is not None)  # the implicit GEMM's gathers its input; Winograd's GEMM, none
        return plan(self, out, a, b, *(() if gathers is None else (gathers,)), *rest, **kw)

    monkeypatch.setattr(winograd, "MODE", "auto")
    monkeypatch.setattr(Tuner, "time_launches", fake)
    monkeypatch.setattr(Tuner, "plan", spy)
    rng = np.random.default_rng(33)
    x, w = rng.standard_normal((2, 16, 6, 6)), rng.standard_normal((16, 16, 3, 3))
    xt, wt = vk.tensor(x, dtype=vk.float32, device=DEV), vk.tensor(w, dtype=vk.float32, device=DEV)

    def forward():
        y = F.conv2d(xt, wt, padding=1)
        np.testing.assert_allclose(y.numpy(), conv_ref(x, w, None, padding=1), rtol=1e-4, atol=1e-4)

    def captured():
        graph = graphs.Graph()
        with graphs.capture(graph, device=DEV):
            y = F.conv2d(xt, wt, padding=1)
        graph.replay()
        np.testing.assert_allclose(y.numpy(), conv_ref(x, w, None, padding=1), rtol=1e-4, atol=1e-4)

    for _ in range(2):  # the second call finds the choice made
        forward()
    assert sorted(timed) == [False, False, True, True]
    assert winograd.recorded == (["forward"] * 2 if verdict == "winograd" else [])
    t = tuner(vk.tensor([0.0], device=DEV)._backend)
    stored = {k: v for k, v in t._load()[t.key].items() if k.startswith("winograd/")}
    assert list(stored.values()) == [verdict] and stored.items() <= t.table.items()
    assert cache_path().is_relative_to(os.environ["XDG_CACHE_HOME"])
    winograd.recorded.clear()
    captured()  # the capture's own recipe: the choice made, nothing timed again
    assert len(timed) == 4 and winograd.recorded == (["forward"] if verdict != "implicit" else [])

    t.backend.plans.clear()  # a later process: no plans, the table as the file has it
    t.table = t._load()[t.key]
    for seen in (timed, implicit_tuned, winograd.recorded):
        seen.clear()
    forward()
    assert timed == [] and winograd.recorded == (["forward"] if verdict == "winograd" else [])
    assert implicit_tuned == [verdict != "winograd"]  # the one product's GEMM: Winograd's batched one, or the implicit

    # a channels-last input of the same shapes is another layout: timed on its own
    t.backend.plans.clear()
    xt = vk.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), dtype=vk.float32, device=DEV).permute(0, 3, 1, 2)
    forward()
    assert sorted(timed) == [False, False, True, True]


def test_winograd_is_not_timed_when_tuning_is_off(winograd, monkeypatch):
    """``VKBLAS_AUTOTUNE=0`` (the tuner's ``off``): nothing is timed and nothing remembered; the implicit GEMM
    computes the product (untuned, its default), where one exists."""
    from vkblas.backend.vulkan.autotune import Tuner, tuner

    t = tuner(vk.tensor([0.0], device=DEV)._backend)
    timed = []
    monkeypatch.setattr(winograd, "MODE", "auto")
    monkeypatch.setattr(t, "off", True)
    monkeypatch.setattr(Tuner, "time_launches", lambda self, make: timed.append(make) or 1.0)
    rng = np.random.default_rng(37)
    x, w = rng.standard_normal((2, 16, 6, 6)), rng.standard_normal((16, 16, 3, 3))
    y = F.conv2d(vk.tensor(x, dtype=vk.float32, device=DEV), vk.tensor(w, dtype=vk.float32, device=DEV), padding=1)
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, None, padding=1), rtol=1e-4, atol=1e-4)
    assert timed == [] and winograd.recorded == [] and not any(k.startswith("winograd/") for k in t.table)


@pytest.mark.parametrize("value", ["off", "0", "Never", " auto"])
def test_a_winograd_mode_not_known_is_refused_naming_the_modes(value):
    """``VKBLAS_WINOGRAD=off`` used to act as ``auto``, silently; every value but the three is an error."""
    from vkblas.backend.vulkan import winograd as wg

    with pytest.raises(ValueError, match=f"VKBLAS_WINOGRAD={value!r}: expected one of auto, always, never"):
        wg._mode(value)
    assert [wg._mode(m) for m in wg.MODES] == list(wg.MODES)


def test_winograd_replays_in_a_captured_graph(winograd):
    """Its temporaries are the graph's: each replay of a captured forward+backward computes the new input's."""
    from vkblas import graphs

    rng = np.random.default_rng(34)
    x0, w, g = (rng.standard_normal(s) for s in ((2, 16, 6, 5), (16, 16, 3, 3), (2, 16, 6, 5)))
    sx, wt = vk.tensor(x0, dtype=vk.float32, device=DEV, requires_grad=True), _leaf(w)
    sg = vk.tensor(g, dtype=vk.float32, device=DEV)

    def step():
        sx.grad = wt.grad = None
        y = F.conv2d(sx, wt, None, padding=1)
        y.backward(sg)
        return y

    step()  # plans made eagerly
    graph = graphs.Graph()
    with graphs.capture(graph, device=DEV):
        y = step()
    for seed in (35, 36):
        x = np.random.default_rng(seed).standard_normal(x0.shape)
        with vk.no_grad():
            sx.copy_(vk.tensor(x, dtype=vk.float32, device=DEV))
        graph.replay()
        np.testing.assert_allclose(y.detach().numpy(), conv_ref(x, w, None, padding=1), rtol=1e-4, atol=1e-4)
        dx, dw, _ = conv_grads_ref(x, w, g, (1, 1), (1, 1), (1, 1), 1)
        np.testing.assert_allclose(sx.grad.numpy(), dx, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-4, atol=1e-4)
    assert "forward" in winograd.recorded and "input" in winograd.recorded
