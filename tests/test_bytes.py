"""uint8 and int8 storage (image data) on every device: creation and range checks, casts, arithmetic that wraps as
PyTorch's does, promotion, indexing, reductions, sorting, the packed-word kernels' two store paths (whole words,
and bytes of shared words written concurrently), and safetensors files that PyTorch reads."""

from __future__ import annotations

import numpy as np
import pytest

import vkblas as vb
from conftest import require_torch

U8 = np.arange(0, 256, 3, dtype=np.uint8)  # 86 values: not a multiple of 4 (the per-byte store path)
I8 = np.arange(-128, 128, 5, dtype=np.int8)


def test_creation_and_range_checks(device: str) -> None:
    x = vb.tensor(U8, device=device)
    assert x.dtype is vb.uint8 and x.tolist() == U8.tolist()
    assert vb.tensor(I8, device=device).dtype is vb.int8
    assert vb.zeros(3, dtype=vb.uint8, device=device).tolist() == [0, 0, 0]
    assert vb.full((2,), 7, dtype=vb.int8, device=device).tolist() == [7, 7]
    assert vb.arange(5, dtype=vb.uint8, device=device).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(OverflowError, match="uint8"):
        vb.tensor([300], dtype=vb.uint8, device=device)
    with pytest.raises(OverflowError, match="int8"):
        vb.tensor([-129], dtype=vb.int8, device=device)
    assert "dtype=vkblas.uint8" in repr(x[:2])
    assert x.byte() is x and x.char().dtype is vb.int8 and x.to("uint8") is x


@pytest.mark.parametrize(
    "expr",
    [
        lambda m, a, b: a + b,
        lambda m, a, b: a * b - b,
        lambda m, a, b: a + 200,
        lambda m, a, b: (a > b) | (a == 3),
        lambda m, a, b: m.maximum(a, b),
        lambda m, a, b: a.float() / 255.0,
        lambda m, a, b: a * 0.5,
        lambda m, a, b: a.to(m.int32) - b.to(m.int32),
        lambda m, a, b: m.where(a > 100, a, b),
    ],
)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_arithmetic_matches_torch(device: str, expr, dtype: str) -> None:
    torch = require_torch()
    a = (U8 if dtype == "uint8" else I8)[:40]
    b = a[::-1].copy()
    want = expr(torch, torch.tensor(a), torch.tensor(b))
    got = expr(vb, vb.tensor(a, device=device), vb.tensor(b, device=device))
    assert got.dtype.name == str(want.dtype).replace("torch.", "")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_promotion() -> None:
    u, i = vb.tensor(U8[:4]), vb.tensor(I8[:4])
    assert (u + i).dtype is vb.int32  # PyTorch: int16, which vkblas has not
    assert (u + vb.tensor([1, 2, 3, 4])).dtype is vb.int32
    assert (u + 1).dtype is vb.uint8 and (u + 1.5).dtype is vb.float32 and (u > 1).dtype is vb.bool


def test_casts_wrap_like_torch(device: str) -> None:
    torch = require_torch()
    f = np.array([0.0, 1.7, 254.9, 255.0, 256.0, 300.0, 3.2], np.float32)
    np.testing.assert_array_equal(
        vb.tensor(f, device=device).to(vb.uint8).numpy(), torch.tensor(f).to(torch.uint8).numpy()
    )
    ints = np.array([-129, -128, 127, 128, 255, 256, 1000], np.int32)
    for dt, tdt in ((vb.uint8, torch.uint8), (vb.int8, torch.int8)):
        np.testing.assert_array_equal(vb.tensor(ints, device=device).to(dt).numpy(), torch.tensor(ints).to(tdt).numpy())
    assert vb.tensor(I8, device=device).float().tolist() == I8.astype(np.float32).tolist()


def test_in_place_and_views(device: str) -> None:
    x = vb.tensor(U8[:12].reshape(3, 4), device=device)
    x += 250  # wraps
    np.testing.assert_array_equal(x.numpy(), (U8[:12].reshape(3, 4) + np.uint8(250)).astype(np.uint8))
    t = x.T.contiguous()  # a strided read into packed words
    np.testing.assert_array_equal(t.numpy(), x.numpy().T)
    x[1] = 7
    assert x[1].tolist() == [7, 7, 7, 7]


def test_indexing_and_batches(device: str) -> None:
    images = np.random.default_rng(0).integers(0, 256, (10, 3, 5, 5), dtype=np.uint8)
    x = vb.tensor(images, device=device)
    idx = [7, 2, 2, 9]
    np.testing.assert_array_equal(x[idx].numpy(), images[idx])
    np.testing.assert_array_equal(x[x > 200].numpy(), images[images > 200])
    np.testing.assert_array_equal(x.index_select(2, vb.tensor([4, 0], device=device)).numpy(), images[:, :, [4, 0]])
    batch = (x[idx].float() / 255.0 - 0.5) / 0.25  # the usual image normalisation
    np.testing.assert_allclose(batch.numpy(), (images[idx] / 255.0 - 0.5) / 0.25, rtol=1e-6, atol=1e-6)


def test_concurrent_byte_writes_are_not_lost(device: str) -> None:
    """A gather whose neighbouring output bytes (one word) are written by different invocations at once."""
    n = 10_001
    src = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    perm = np.random.default_rng(2).permutation(n)
    got = vb.tensor(src, device=device)[perm]
    np.testing.assert_array_equal(got.numpy(), src[perm])
    strided = vb.tensor(src, device=device)[::3].contiguous()  # the per-byte store path of the copy kernel
    np.testing.assert_array_equal(strided.numpy(), src[::3])


def test_reductions_and_sorting(device: str) -> None:
    torch = require_torch()
    a = np.random.default_rng(3).integers(0, 256, (4, 9), dtype=np.uint8)
    x, t = vb.tensor(a, device=device), torch.tensor(a)
    assert x.sum().item() == t.sum().item() and x.sum().dtype is vb.int32
    assert x.max().item() == t.max().item() and x.max().dtype is vb.uint8
    np.testing.assert_array_equal(x.max(1).values.numpy(), t.max(1).values.numpy())
    np.testing.assert_array_equal(x.argmax(1).numpy(), t.argmax(1).numpy())
    np.testing.assert_array_equal(x.cumsum(1).numpy(), t.cumsum(1).numpy())
    got, want = x.sort(dim=1, stable=True), t.sort(dim=1, stable=True)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(
        vb.tensor(I8, device=device).topk(3).values.numpy(), torch.tensor(I8).topk(3).values.numpy()
    )


def test_safetensors_round_trip_with_torch(tmp_path, device: str) -> None:
    torch = require_torch()
    from safetensors.torch import load_file, save_file

    path = str(tmp_path / "images.safetensors")
    vb.save({"u": vb.tensor(U8, device=device), "i": vb.tensor(I8, device=device)}, path)
    loaded = load_file(path)
    assert loaded["u"].dtype == torch.uint8 and loaded["i"].dtype == torch.int8
    assert loaded["u"].tolist() == U8.tolist()
    save_file({"x": torch.arange(10, dtype=torch.uint8)}, path)
    back = vb.load(path, device=device)["x"]
    assert back.dtype is vb.uint8 and back.tolist() == list(range(10))
