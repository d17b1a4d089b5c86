"""Hypothesis property tests: broadcasting and reductions over random shapes (size-0 and size-1 dims included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vkblas as vb
from conftest import float_dtype, requires_vulkan

DEVICES = ["cpu", pytest.param("vulkan", marks=requires_vulkan)]
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
seeds = st.integers(0, 2**31 - 1)


def values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape)


def tol(device: str) -> dict[str, float]:
    return {"atol": 1e-12, "rtol": 1e-10} if device == "cpu" else {"atol": 1e-5, "rtol": 1e-4}


def leaf(a: np.ndarray, device: str) -> vb.Tensor:
    return vb.tensor(a, dtype=float_dtype(device), device=device, requires_grad=True)


def as_device(a: np.ndarray, device: str) -> np.ndarray:
    """``a`` rounded as the device stores it, back in float64 for the reference."""
    return a.astype(float_dtype(device).np).astype(np.float64)


def sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The reference 'undo broadcasting': sum over leading dims and over dims that were 1."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True).reshape(shape)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3),
    seed=seeds,
    op=st.sampled_from(["add", "sub", "mul", "maximum"]),
)
def test_binary_broadcasting_values_and_gradients(device: str, shapes, seed: int, op: str) -> None:
    (sa, sb), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = as_device(values(sa, seed), device), as_device(values(sb, seed + 1), device)
    ta, tb = leaf(a, device), leaf(b, device)
    out = getattr(vb, op)(ta, tb)
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}[op](a, b)
    assert tuple(out.shape) == out_shape == ref.shape
    np.testing.assert_allclose(out.detach().numpy(), ref, **tol(device))

    w = np.random.default_rng(seed + 2).standard_normal(out_shape)
    out.backward(vb.tensor(w, dtype=out.dtype, device=device))
    ga, gb = {
        "add": (w, w),
        "sub": (w, -w),
        "mul": (w * b, w * a),
        "maximum": (w * (a > b) + 0.5 * w * (a == b), w * (b > a) + 0.5 * w * (a == b)),
    }[op]
    for t, g, shape in ((ta, ga, sa), (tb, gb, sb)):
        assert t.grad is not None and tuple(t.grad.shape) == shape  # summed back to each input's shape
        np.testing.assert_allclose(t.grad.numpy(), sum_to(np.broadcast_to(g, out_shape), shape), **tol(device))


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(shape=shapes, seed=seeds, keepdim=st.booleans(), data=st.data())
def test_reductions_match_numpy(device: str, shape: tuple[int, ...], seed: int, keepdim: bool, data) -> None:
    x = as_device(values(shape, seed), device)
    dims = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1), label="dims")) if shape else None
    t = leaf(x, device)
    s = t.sum(dim=dims, keepdim=keepdim)
    np.testing.assert_allclose(s.detach().numpy(), np.sum(x, axis=dims, keepdims=keepdim), **tol(device))
    s.backward(vb.ones_like(s))
    np.testing.assert_array_equal(t.grad.numpy(), np.ones(shape))  # d sum / dx = 1, in x's shape

    reduced = int(np.prod([shape[d] for d in dims])) if dims else x.size
    if reduced == 0:
        with pytest.raises((RuntimeError, IndexError)):
            vb.amax(t.detach(), dim=dims, keepdim=keepdim)
        return
    for name, ref in (("mean", np.mean), ("amax", np.max), ("amin", np.min)):
        got = getattr(vb, name)(t.detach(), dim=dims, keepdim=keepdim)
        np.testing.assert_allclose(got.numpy(), ref(x, axis=dims, keepdims=keepdim), **tol(device), err_msg=name)
    if reduced > 1:
        v = vb.var(t.detach(), dim=dims, keepdim=keepdim)
        np.testing.assert_allclose(v.numpy(), np.var(x, axis=dims, ddof=1, keepdims=keepdim), **tol(device))


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), seed=seeds, data=st.data())
def test_reduction_identities(device: str, shape: tuple[int, ...], seed: int, data) -> None:
    x = as_device(values(shape, seed), device)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    t = vb.tensor(x, dtype=float_dtype(device), device=device)
    # softmax sums to one; log_softmax is its log; logsumexp bounds the max
    sm = t.softmax(dim)
    np.testing.assert_allclose(sm.sum(dim).numpy(), np.ones(np.delete(shape, dim % len(shape))), **tol(device))
    np.testing.assert_allclose(t.log_softmax(dim).numpy(), np.log(sm.numpy()), atol=1e-5 if device != "cpu" else 1e-12)
    lse = vb.logsumexp(t, dim).numpy()
    mx = t.max(dim).values.numpy()
    assert np.all(lse >= mx - 1e-6) and np.all(lse <= mx + np.log(shape[dim]) + 1e-6)
    # argmax picks an element equal to the max; max(dim).indices agrees with argmax
    idx = t.argmax(dim, keepdim=True)
    np.testing.assert_array_equal(np.take_along_axis(x, idx.numpy(), dim % len(shape)).squeeze(dim), mx)
    np.testing.assert_array_equal(t.max(dim).indices.numpy(), idx.squeeze(dim).numpy())
    # sum over all dims equals nested sums, one dim at a time
    nested = t
    for _ in shape:
        nested = nested.sum(0)
    np.testing.assert_allclose(nested.item(), t.sum().item(), **tol(device))


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3), seed=seeds, data=st.data())
def test_expand_then_sum_back_round_trip(device: str, shape: tuple[int, ...], seed: int, data) -> None:
    """expand is broadcasting by strides: its gradient is the broadcast-undoing sum."""
    grown = hnp.broadcastable_shapes(shape, min_dims=len(shape), max_dims=len(shape) + 2, min_side=0, max_side=3)
    target = data.draw(grown.map(lambda s: np.broadcast_shapes(s, shape)), label="target")
    x = as_device(values(shape, seed), device)
    t = leaf(x, device)
    e = t.expand(*target)
    np.testing.assert_array_equal(e.detach().numpy(), np.broadcast_to(x, target))
    w = np.random.default_rng(seed).standard_normal(target)
    e.backward(vb.tensor(w, dtype=e.dtype, device=device))
    np.testing.assert_allclose(t.grad.numpy(), sum_to(w, shape), **tol(device))
