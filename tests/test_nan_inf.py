"""NaN and Inf as in PyTorch, the cases issue 9 lists: clamp / maximum / minimum propagate NaN, relu(nan) = nan,
``x ** 0.3`` at -inf, var past its degrees of freedom, BCE on inputs outside [0, 1], gradients of ``x ** y`` at
``x = 0``, and sin / cos of large arguments against float64 numpy (a driver without range reduction fails here:
run it on every GPU). The full sweep of every op over special values is ``test_special_values.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from conftest import float_dtype, require_torch

NAN, INF = math.nan, math.inf


def t(data, device: str, requires_grad: bool = False) -> vb.Tensor:
    return vb.tensor(data, dtype=float_dtype(device), device=device, requires_grad=requires_grad)


def test_clamp_maximum_minimum_propagate_nan(device: str) -> None:
    x = t([NAN, 0.5, -2.0], device)
    assert np.isnan(x.clamp(0, 1).tolist()[0]) and x.clamp(0, 1).tolist()[1:] == [0.5, 0.0]
    assert np.isnan(x.clamp(min=0).tolist()[0]) and np.isnan(x.clamp(max=1).tolist()[0])
    for op in (vb.maximum, vb.minimum):
        out = op(x, t([0.0, NAN, 1.0], device)).tolist()
        assert np.isnan(out[0]) and np.isnan(out[1]), op.__name__
    assert np.isnan(vb.max(x).item()) and np.isnan(vb.amin(x, 0).item())


def test_relu_of_nan_is_nan_and_keeps_its_gradient(device: str) -> None:
    x = t([NAN, -0.0, 0.0, 2.0], device, requires_grad=True)
    y = x.relu()
    y.sum().backward()
    values = y.detach().numpy()
    assert np.isnan(values[0]) and np.signbit(values[1]) and values[3] == 2.0
    assert x.grad.tolist() == [1.0, 0.0, 0.0, 1.0]  # PyTorch: the gradient passes where not x <= 0


def test_pow_at_infinities_and_zeros_as_c99(device: str) -> None:
    x = t([-INF, -INF, -INF, INF, -0.0, 0.0, -1.0, 1.0], device)
    y = t([0.3, -0.3, 3.0, -2.0, -1.0, -1.0, INF, NAN], device)
    np.testing.assert_array_equal((x**y).numpy(), [INF, 0.0, -INF, 0.0, -INF, INF, 1.0, 1.0])
    assert (t([-INF], device) ** 0.3).item() == INF


def test_var_std_past_the_degrees_of_freedom_are_inf(device: str) -> None:
    x = t([1.0, 2.0, 3.0], device)
    assert x.var(correction=5).item() == INF and x.std(correction=4).item() == INF
    assert np.isnan(t([1.0], device).var().item())  # 0 / 0, as PyTorch
    assert np.isnan(t([1.0, 1.0], device).var(correction=3).item())


@pytest.mark.parametrize(
    ("inp", "target", "what"),
    [([1.5], [1.0], "input"), ([NAN], [0.0], "input"), ([-0.1], [0.0], "input"), ([0.5], [1.5], "target")],
)
def test_bce_refuses_values_outside_0_1(device: str, inp: list[float], target: list[float], what: str) -> None:
    with pytest.raises(RuntimeError, match=f"all elements of {what} should be between 0 and 1"):
        # at once on the cpu; at the next sync point on a Vulkan device (a device-side check, as CUDA's assert)
        F.binary_cross_entropy(t(inp, device), t(target, device)).item()
    assert F.binary_cross_entropy(t([0.25], device), t([1.0], device)).item() == pytest.approx(-math.log(0.25))


def test_bce_checks_without_a_host_round_trip() -> None:
    pytest.importorskip("wgpu")
    from conftest import vulkan_available

    if not vulkan_available():
        pytest.skip("no Vulkan adapter")
    x, y = t([0.2, 0.9], "vulkan"), t([0.0, 1.0], "vulkan")
    backend = x._backend
    before = backend.rt.reads
    loss = F.binary_cross_entropy(x, y)
    assert backend.rt.reads == before
    assert loss.item() == pytest.approx(-(math.log(0.8) + math.log(0.9)) / 2, rel=1e-6)


def test_bce_gradient_at_0_and_1_as_pytorch(device: str) -> None:
    torch = require_torch()
    xs, ys = [0.0, 1.0, 0.5, 1.0], [1.0, 0.0, 0.5, 1.0]
    tx = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.binary_cross_entropy(tx, torch.tensor(ys, dtype=torch.float64)).backward()
    x = t(xs, device, requires_grad=True)
    F.binary_cross_entropy(x, t(ys, device)).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize(("base", "exponent"), [(0.0, 0.0), (0.0, 0.3), (0.0, 2.0), (0.0, -1.0), (-0.0, 0.3)])
def test_pow_gradients_at_zero_as_pytorch(device: str, base: float, exponent: float) -> None:
    torch = require_torch()
    tx = torch.tensor([base], dtype=torch.float64, requires_grad=True)
    ty = torch.tensor([exponent], dtype=torch.float64, requires_grad=True)
    (tx**ty).sum().backward()
    x, y = t([base], device, requires_grad=True), t([exponent], device, requires_grad=True)
    (x**y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())
    x = t([base], device, requires_grad=True)
    (x**exponent).sum().backward()  # a Python exponent: the same rule
    tx.grad = None
    (tx**exponent).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def _large_arguments() -> np.ndarray:
    rng = np.random.default_rng(9)
    near = (rng.integers(1, 10**6, 2000) * (np.pi / 2)).astype(np.float32)  # worst cases: near multiples of pi/2
    wide = (10 ** rng.uniform(0, 38.5, 4000)).astype(np.float32) * rng.choice([-1, 1], 4000).astype(np.float32)
    fixed = np.array([1e5, 1e6, -1e6, 12345.678, 8191.0, 8193.0, 1e10, 3e38, -3.4e38, 7e7, 355.0], np.float32)
    x = np.concatenate([fixed, near, wide])
    return x[np.isfinite(x)]


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_sin_cos_of_large_arguments_match_float64(device: str, fn: str) -> None:
    """|error| <= 2e-7 from 1e5 to 3.4e38 (the H200's native sin was off by 0.12 from 1e5 on)."""
    x = _large_arguments()
    got = getattr(vb, fn)(vb.tensor(x, dtype=vb.float32, device=device)).numpy().astype(np.float64)
    want = getattr(np, fn)(x.astype(np.float64))
    err = np.abs(got - want)
    assert err.max() < 2e-7, f"{fn}({x[err.argmax()]}) = {got[err.argmax()]}, float64 says {want[err.argmax()]}"
    for special in (INF, -INF, NAN):
        assert np.isnan(getattr(vb, fn)(t([special], device)).item())
    assert np.signbit(vb.sin(t([-0.0], device)).item())


def test_the_payne_hanek_table_is_2_over_pi() -> None:
    from vkblas.backend import mathlib

    # fdlibm's table of 2/pi (e_rem_pio2.c, 24-bit words) regrouped into 32-bit words
    assert mathlib.two_over_pi_words(4) == [0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0]
