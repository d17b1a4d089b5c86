"""The Tensor API: creation, dtypes, metadata, host transfers, devices, repr, in-place ops on views, randomness."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, requires_vulkan
from references import pcg_normal, pcg_uniform


# ---------------------------------------------------------------- creation
def test_tensor_from_nested_lists_infers_dtype(device: str) -> None:
    assert vb.tensor([1.5, 2.0], device=device).dtype is vb.float32
    assert vb.tensor([1, 2], device=device).dtype is vb.int32
    assert vb.tensor([True, False], device=device).dtype is vb.bool
    assert vb.tensor(3.5, device=device).shape == ()
    x = vb.tensor([[1, 2, 3], [4, 5, 6]], dtype=vb.float32, device=device)
    assert x.shape == (2, 3) and x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_filled_constructors(device: str) -> None:
    assert vb.zeros(2, 3, device=device).tolist() == [[0.0] * 3] * 2
    assert vb.ones((2,), device=device).tolist() == [1.0, 1.0]
    f = vb.full((2, 2), 7, device=device)
    assert f.dtype is vb.int32 and f.tolist() == [[7, 7], [7, 7]]
    assert vb.full((1,), 2.5, device=device).dtype is vb.float32
    assert vb.full((1,), True, device=device).dtype is vb.bool
    e = vb.empty(3, 0, device=device)
    assert e.shape == (3, 0) and e.numel() == 0 and e.numpy().shape == (3, 0)
    np.testing.assert_array_equal(vb.eye(3, device=device).numpy(), np.eye(3))
    np.testing.assert_array_equal(vb.eye(2, 3, device=device).numpy(), np.eye(2, 3))


def test_ranges(device: str) -> None:
    a = vb.arange(5, device=device)
    assert a.dtype is vb.int32 and a.tolist() == [0, 1, 2, 3, 4]
    assert vb.arange(1, 10, 3, device=device).tolist() == [1, 4, 7]
    np.testing.assert_allclose(vb.arange(0, 1, 0.25, device=device).numpy(), [0, 0.25, 0.5, 0.75])
    assert vb.arange(3, 3, device=device).shape == (0,)
    np.testing.assert_allclose(vb.linspace(-1, 1, 5, device=device).numpy(), [-1, -0.5, 0, 0.5, 1])
    assert vb.linspace(0, 1, 0, device=device).shape == (0,)


def test_like_constructors_keep_shape_dtype_device(device: str) -> None:
    x = vb.tensor([[1.0, 2.0]], dtype=float_dtype(device), device=device)
    for y in (
        vb.zeros_like(x),
        vb.ones_like(x),
        vb.full_like(x, 3.0),
        vb.empty_like(x),
        vb.rand_like(x),
        vb.randn_like(x),
    ):
        assert y.shape == x.shape and y.dtype is x.dtype and y.device == x.device
    assert vb.ones_like(x).tolist() == [[1.0, 1.0]]
    assert vb.zeros_like(x, dtype=vb.int32).dtype is vb.int32


def test_new_tensors_take_sizes_as_pytorch_does(device: str) -> None:
    x = vb.ones(2, 3, device=device)
    for made in (x.new_zeros(2), x.new_zeros((2,)), x.new_zeros([2])):
        assert made.shape == (2,) and made.device == x.device and made.tolist() == [0.0, 0.0]
    assert x.new_ones(2, 3).shape == (2, 3) and x.new_empty(4).shape == (4,) and x.new_zeros(()).shape == ()
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0] and x.new_zeros(2, dtype=vb.int32).dtype is vb.int32


def test_double(device: str) -> None:
    x = vb.tensor([1.5, 2.0], device=device)
    if device == "cpu":
        assert x.double().dtype is vb.float64 and x.double().tolist() == [1.5, 2.0]
    else:
        with pytest.raises(vb.UnsupportedError, match="float64"):
            x.double()


def test_from_numpy_copies(device: str) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = vb.from_numpy(a, device=device)
    a[0, 0] = 100
    assert t.dtype is vb.float32 and t.numpy()[0, 0] == 0.0
    with pytest.raises(TypeError, match="ndarray"):
        vb.from_numpy([1, 2])


def test_int64_input_is_stored_as_int32_with_overflow_check(device: str) -> None:
    t = vb.tensor(np.array([1, -5, 2**31 - 1], dtype=np.int64), device=device)
    assert t.dtype is vb.int32 and t.tolist() == [1, -5, 2**31 - 1]
    assert vb.int64 is vb.int32
    with pytest.raises(OverflowError, match="2147483648"):
        vb.tensor([2**31], device=device)
    with pytest.raises(OverflowError, match="int32"):
        vb.tensor(np.array([-(2**40)]), device=device)
    assert vb.tensor([1], device=device).tolist() == [1]  # still usable


def test_float16_where_supported(device: str) -> None:
    x = vb.tensor([1.0, 2.5, -3.0], device="cpu")
    try:
        h = x.to(device).half()
    except vb.UnsupportedError as e:
        assert "float16" in str(e)
        pytest.skip(f"no shader-f16 on this adapter: {e}")
    assert h.dtype is vb.float16
    np.testing.assert_allclose((h * 2 + 1).float().numpy(), [3.0, 6.0, -5.0])
    assert h.numpy().dtype == np.float16


def test_dtype_conversions_and_promotion(device: str) -> None:
    i = vb.tensor([1, 2, 3], device=device)
    f = vb.tensor([0.5, 0.5, 0.5], device=device)
    assert (i + f).dtype is vb.float32
    assert (i * 2).dtype is vb.int32
    assert (i * 0.5).dtype is vb.float32
    assert (i / 2).dtype is vb.float32 and (i / 2).tolist() == [0.5, 1.0, 1.5]
    assert f.int().tolist() == [0, 0, 0] and f.int().dtype is vb.int32
    assert i.bool().tolist() == [True, True, True]
    assert (i > 1).dtype is vb.bool and (i > 1).tolist() == [False, True, True]
    assert i.to(vb.float32).dtype is vb.float32 and i.float().tolist() == [1.0, 2.0, 3.0]
    assert i.sum().dtype is vb.int32 and i.sum().item() == 6
    assert (i > 1).sum().item() == 2


# ---------------------------------------------------------------- metadata and host transfers
def test_metadata(device: str) -> None:
    x = vb.zeros(2, 3, 4, device=device)
    assert x.shape == (2, 3, 4) and x.size() == (2, 3, 4) and x.size(-1) == 4
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24 and len(x) == 2
    assert x.dtype is vb.float32 and x.device == vb.device(device) and x.device.type == device
    assert x.is_contiguous() and x.stride() == (12, 4, 1)
    assert x.T.shape == (4, 3, 2) and not x.T.is_contiguous()
    with pytest.raises(TypeError, match="0-d"):
        len(vb.tensor(1.0, device=device))


def test_item_tolist_numpy(device: str) -> None:
    x = vb.tensor([[1.5, 2.0]], device=device)
    assert x.tolist() == [[1.5, 2.0]]
    assert x[0, 1].item() == 2.0 and isinstance(x[0, 1].item(), float)
    assert isinstance(vb.tensor([3], device=device).item(), int)
    assert vb.tensor(True, device=device).item() is True
    assert float(vb.tensor(2.5, device=device)) == 2.5
    with pytest.raises(RuntimeError, match="2 elements"):
        x.item()
    arr = x.numpy()
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32
    arr[0, 0] = 9  # a copy: the tensor is untouched
    assert x.tolist() == [[1.5, 2.0]]
    with pytest.raises(RuntimeError, match="requires grad"):
        vb.tensor([1.0], requires_grad=True, device=device).numpy()


def test_to_device_round_trip(device: str) -> None:
    x = vb.tensor([[1.0, 2.0], [3.0, 4.0]], device="cpu")
    y = x.to(device)
    assert y.device == vb.device(device) and y.tolist() == x.tolist()
    z = y.T.to("cpu")  # a non-contiguous view moves with its values
    assert z.device == vb.device("cpu") and z.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert x.to(device, vb.int32).dtype is vb.int32
    assert x.to(dtype=vb.float16 if device == "cpu" else vb.int32).device == x.device


def test_repr_shows_values(device: str) -> None:
    r = repr(vb.tensor([1.0, 2.5], device=device))
    assert re.match(r"tensor\(\[1\.0*, 2\.50*\]", r), r
    assert ("vulkan" in r) == (device != "cpu")
    assert repr(vb.tensor([1, 2], device=device)).startswith("tensor([1, 2]")
    assert "requires_grad=True" in repr(vb.tensor([1.0], requires_grad=True, device=device))
    assert "grad_fn=<" in repr(vb.tensor([1.0], requires_grad=True, device=device) * 2)
    assert "float64" in repr(vb.tensor([1.0], dtype=vb.float64))
    assert repr(vb.zeros(0, 2, device=device)).startswith("tensor(")


def test_bool_and_iteration(device: str) -> None:
    x = vb.tensor([1.0, 2.0, 3.0], device=device)
    assert [v.item() for v in x] == [1.0, 2.0, 3.0]
    assert bool(vb.tensor([1], device=device)) is True
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x > 0)


# ---------------------------------------------------------------- views and in-place writes through them
def test_views_share_storage(device: str) -> None:
    x = vb.zeros(3, 4, device=device)
    x[1].fill_(1.0)
    x[:, 2] = 5.0
    x.T[0].add_(2.0)  # the first column, through a transposed view
    assert x.tolist() == [[2.0, 0.0, 5.0, 0.0], [3.0, 1.0, 5.0, 1.0], [2.0, 0.0, 5.0, 0.0]]
    v = x.view(12)
    v.zero_()
    assert x.sum().item() == 0.0


def test_inplace_ops_on_non_contiguous_targets(device: str) -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = vb.tensor(base, device=device)
    xt = x.T[::2]  # shape (2, 3), strided
    xt.mul_(vb.tensor([10.0, 20.0, 30.0], device=device))
    xt.sub_(1.0)
    expected = base.copy()
    expected.T[::2] = expected.T[::2] * np.array([10.0, 20.0, 30.0]) - 1.0
    np.testing.assert_allclose(x.numpy(), expected)
    y = vb.ones(2, 2, device=device)
    y.copy_(vb.tensor([[1.0, 2.0], [3.0, 4.0]], device=device).T)
    assert y.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    y.copy_(vb.tensor([7.0, 8.0], device=device))  # broadcast source
    assert y.tolist() == [[7.0, 8.0], [7.0, 8.0]]


def test_inplace_add_with_alias_of_itself(device: str) -> None:
    x = vb.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    x[1:].add_(x[:-1])  # overlapping source and target: reads see the values before the op
    assert x.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_contiguous_clone_and_reshape_copies(device: str) -> None:
    x = vb.tensor(np.arange(6.0).reshape(2, 3), dtype=vb.float32, device=device)
    t = x.T
    c = t.contiguous()
    assert c.is_contiguous() and c.tolist() == t.tolist()
    assert x.contiguous() is x
    r = t.reshape(6)
    assert r.tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    cl = x.clone()
    cl.add_(1.0)
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


# ---------------------------------------------------------------- randomness
def test_manual_seed_reproducible(device: str) -> None:
    vb.manual_seed(123)
    a, b = vb.rand(5, device=device).numpy(), vb.randn(2, 3, device=device).numpy()
    vb.manual_seed(123)
    np.testing.assert_array_equal(vb.rand(5, device=device).numpy(), a)
    np.testing.assert_array_equal(vb.randn(2, 3, device=device).numpy(), b)
    assert not np.array_equal(vb.rand(5, device=device).numpy(), a)  # the stream moves on


def test_random_distributions_look_right(device: str) -> None:
    vb.manual_seed(0)
    u = vb.rand(4000, device=device).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.03
    n = vb.randn(4000, device=device).numpy()
    assert abs(n.mean()) < 0.08 and abs(n.std() - 1.0) < 0.08
    r = vb.randint(3, 7, (2000,), device=device)
    assert r.dtype is vb.int32 and set(np.unique(r.numpy())) == {3, 4, 5, 6}
    assert vb.randint(5, size=(3, 2), device=device).shape == (3, 2)


def test_generator_argument_is_independent(device: str) -> None:
    g1, g2 = vb.Generator(7), vb.Generator(7)
    np.testing.assert_array_equal(
        vb.rand(4, generator=g1, device=device).numpy(), vb.rand(4, generator=g2, device=device).numpy()
    )


@requires_vulkan
def test_same_random_numbers_on_cpu_and_vulkan() -> None:
    """Both devices give the numbers of the documented generator (references.py, float64)."""
    for make, ref in (
        (lambda d: vb.rand(3, 5, device=d), pcg_uniform((3, 5), 2024)),
        (lambda d: vb.randn(17, device=d), pcg_normal((17,), 2024)),
        (lambda d: vb.randint(0, 100, (9,), device=d), np.minimum(np.floor(pcg_uniform((9,), 2024) * 100), 99)),
    ):
        vb.manual_seed(2024)
        on_cpu = make("cpu").numpy()
        vb.manual_seed(2024)
        on_vulkan = make("vulkan").numpy()
        np.testing.assert_allclose(on_vulkan, on_cpu, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(on_cpu, ref, rtol=1e-5, atol=1e-5)


@requires_vulkan
def test_cross_device_results_agree() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    on = {
        d: ((vb.tensor(a, device=d) @ vb.tensor(b, device=d)).softmax(-1) * 3).sum(0).numpy() for d in ("cpu", "vulkan")
    }
    np.testing.assert_allclose(on["vulkan"], on["cpu"], rtol=1e-5, atol=1e-6)
    z = a.astype(np.float64) @ b.astype(np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(on["cpu"], (e / e.sum(-1, keepdims=True) * 3).sum(0), rtol=1e-5, atol=1e-6)


@requires_vulkan
def test_vulkan_with_and_without_index_is_one_device() -> None:
    # regression: "vulkan:0" then "vulkan" once made two devices for one adapter, so mixing tensors made with the
    # two names raised a same-device error. A fresh process, so that the order of first use is this one.
    code = (
        "import vkblas as vb; b = vb.ones(3, device='vulkan:0'); a = vb.ones(3, device='vulkan'); "
        "assert a._backend is b._backend; print((a + b).tolist())"
    )
    src = str(Path(vb.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2.0, 2.0, 2.0]"
