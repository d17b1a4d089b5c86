"""vkblas.data: IDX parsing, finding and downloading datasets, transforms, DataLoader order and determinism."""

from __future__ import annotations

import dataclasses
import gzip
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import vkblas
from vkblas.data import (
    MNIST,
    BatchSampler,
    DataError,
    DataLoader,
    FashionMNIST,
    RandomSampler,
    Subset,
    TensorDataset,
    parse_idx,
    read_idx,
    transforms,
)
from vkblas.data import datasets as ds_mod

DATA = Path(os.environ.get("VKBLAS_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
needs_data = pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"no MNIST files in {DATA}")


def idx_bytes(array: np.ndarray) -> bytes:
    code = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}
    header = bytes([0, 0, code[array.dtype.type], array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_gz(path: Path, raw: bytes) -> Path:
    with gzip.open(path, "wb") as f:
        f.write(raw)
    return path


# ------------------------------------------------------------------------------------------------ IDX
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_roundtrip_every_type(tmp_path: Path, dtype: type) -> None:
    a = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    if dtype is np.uint8:
        a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    out = read_idx(write_gz(tmp_path / "a.gz", idx_bytes(a)))
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, a)


def test_idx_uncompressed_and_scalar_shapes(tmp_path: Path) -> None:
    a = np.array([1, 2, 3], dtype=np.uint8)
    (tmp_path / "a.idx").write_bytes(idx_bytes(a))
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), a)
    assert parse_idx(idx_bytes(np.zeros((0, 28), np.uint8))).shape == (0, 28)


def test_idx_truncated(tmp_path: Path) -> None:
    raw = idx_bytes(np.arange(100, dtype=np.uint8).reshape(10, 10))
    path = write_gz(tmp_path / "short.gz", raw[:-7])
    with pytest.raises(DataError, match=r"short\.gz: IDX file truncated: 105 bytes, expected 112"):
        read_idx(path)
    with pytest.raises(DataError, match="truncated IDX header"):
        parse_idx(raw[:9])
    with pytest.raises(DataError, match="trailing bytes"):
        parse_idx(raw + b"\0")


@pytest.mark.parametrize("magic", [b"\x00\x01\x08\x01", b"\x00\x00\x07\x01", b"PK\x03\x04", b""])
def test_idx_wrong_magic(magic: bytes) -> None:
    with pytest.raises(DataError, match="not an IDX file"):
        parse_idx(magic + b"\0" * 8, name="x.idx")


def test_corrupt_gzip_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00 this is not gzip data")
    with pytest.raises(DataError, match=r"bad\.gz: cannot read"):
        read_idx(path)


def test_sha256_mismatch_names_file_and_digests(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "a.gz", idx_bytes(np.zeros(3, np.uint8)))
    with pytest.raises(DataError) as err:
        read_idx(path, sha256="ab" * 32)
    msg = str(err.value)
    assert str(path) in msg and "ab" * 32 in msg and "sha256 mismatch" in msg
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() in msg


def test_sums_in_code_match_shared_sha256sums() -> None:
    for source, folder in ((ds_mod.MNIST_SOURCE, "mnist"), (ds_mod.FASHION_MNIST_SOURCE, "fashion")):
        sums = DATA / folder / "SHA256SUMS"
        if not sums.is_file():
            pytest.skip(f"no {sums}")
        listed = {Path(name).name: digest for digest, name in (line.split() for line in sums.read_text().splitlines())}
        assert listed == source.sha256


# ------------------------------------------------------------------------------------------------ datasets
@needs_data
@pytest.mark.parametrize(("cls", "folder"), [(MNIST, "mnist"), (FashionMNIST, "fashion")])
def test_real_datasets(cls: type, folder: str) -> None:
    train, test = cls(DATA / folder, train=True), cls(DATA, train=False)  # the folder itself, or its parent
    assert (len(train), len(test)) == (60000, 10000)
    assert train.data.shape == (60000, 28, 28) and train.data.dtype == np.uint8
    assert set(np.unique(test.targets)) == set(range(10)) and len(train.classes) == 10
    image, label = test[0]
    assert image.shape == (1, 28, 28) and image.dtype == np.float32 and 0 <= image.min() <= image.max() <= 1
    assert isinstance(label, int)
    x, y = test.get_batch(np.array([0, 5, 7]))
    assert x.shape == (3, 1, 28, 28) and y.tolist() == [test[i][1] for i in (0, 5, 7)]


@needs_data
def test_search_order_root_then_env_then_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("root", "env", "cache/vkblas"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "cache/vkblas/mnist").symlink_to(DATA / "mnist")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("VKBLAS_DATA", str(tmp_path / "env"))
    assert MNIST(tmp_path / "root").directory == tmp_path / "cache/vkblas/mnist"
    (tmp_path / "env/MNIST").mkdir()
    (tmp_path / "env/MNIST/raw").symlink_to(DATA / "mnist")  # torchvision's layout
    assert MNIST(tmp_path / "root").directory == tmp_path / "env/MNIST/raw"
    for f in ds_mod.MNIST_SOURCE.sha256:
        (tmp_path / "root" / f).symlink_to(DATA / "mnist" / f)
    assert MNIST(tmp_path / "root").directory == tmp_path / "root"


def test_missing_offline_says_where_to_put_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VKBLAS_DATA", raising=False)
    with pytest.raises(DataError) as err:
        FashionMNIST(tmp_path / "nowhere")
    msg = str(err.value)
    for part in (
        "FashionMNIST not found",
        "train-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
        str(tmp_path / "nowhere"),
        "$VKBLAS_DATA (unset)",
        str(tmp_path / "cache/vkblas/fashion"),
        "download=True",
    ):
        assert part in msg


def test_download_from_mirror_checks_sha256(tmp_path: Path) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    labels = np.array([3, 4], dtype=np.uint8)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    sums = {}
    for split in ("train", "t10k"):
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            path = write_gz(mirror / f"{split}-{kind}-ubyte.gz", idx_bytes(arr))
            import hashlib

            sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    good = dataclasses.replace(ds_mod.MNIST_SOURCE, mirrors=("file:///nonexistent/", f"file://{mirror}/"), sha256=sums)
    dest = ds_mod.download_source(good, tmp_path / "dest")
    x, y = ds_mod.load_split(good, dest, train=False)
    np.testing.assert_array_equal(x, images)
    assert y.tolist() == [3, 4]

    bad = dataclasses.replace(good, sha256={**sums, "t10k-labels-idx1-ubyte.gz": "0" * 64})
    with pytest.raises(DataError, match="download failed.*sha256 mismatch"):
        ds_mod.download_source(bad, tmp_path / "dest2")
    assert not (tmp_path / "dest2/t10k-labels-idx1-ubyte.gz").exists()  # a bad download leaves nothing behind
    assert not list((tmp_path / "dest2").glob("*.part"))


# ------------------------------------------------------------------------------------------------ transforms, datasets
def test_transforms_item_and_batch_agree() -> None:
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    batch = np.random.default_rng(0).integers(0, 256, (4, 28, 28), dtype=np.uint8)
    out = t(batch)
    assert out.shape == (4, 1, 28, 28) and out.dtype == np.float32
    np.testing.assert_allclose(out[2], t(batch[2]), rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 0, 0], (batch[0, 0, 0] / 255 - 0.1307) / 0.3081, rtol=1e-5)
    with pytest.raises(ValueError, match="standard deviations must be positive"):
        transforms.Normalize((0.5,), (0.0,))


@needs_data
def test_deterministic_transforms_are_cached_and_random_ones_are_not() -> None:
    norm = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    test = MNIST(DATA, train=False, transform=norm)
    idx = np.array([3, 9999, 0, 3])
    x, _ = test.get_batch(idx)
    np.testing.assert_array_equal(x, norm(test.data[idx]))
    assert test._transformed is not None  # the whole split was transformed once

    calls = []

    def noisy(batch: np.ndarray) -> np.ndarray:  # not marked deterministic: applied per batch, never cached
        calls.append(len(batch))
        return batch.astype(np.float32)

    raw = MNIST(DATA, train=False, transform=noisy)
    raw.get_batch(idx)
    raw.get_batch(idx)
    assert calls == [4, 4] and raw._transformed is None


def test_tensor_dataset_and_subset() -> None:
    ds = TensorDataset(vkblas.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device="cpu"), np.array([7, 8, 9]))
    assert len(ds) == 3 and ds[1][1] == 8
    sub = Subset(ds, [2, 0])
    x, y = sub.get_batch(np.array([0, 1]))
    assert x.tolist() == [[5.0, 6.0], [1.0, 2.0]] and y.tolist() == [9, 7]
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(np.zeros(3), np.zeros(4))


# ------------------------------------------------------------------------------------------------ DataLoader
def _labels(loader: DataLoader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


def _ds(n: int = 10) -> TensorDataset:
    return TensorDataset(np.arange(n, dtype=np.float64).reshape(n, 1) / 2, np.arange(n))


def test_loader_order_and_dtypes() -> None:
    loader = DataLoader(_ds(), batch_size=4, device="cpu")
    assert len(loader) == 3 and _labels(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    x, y = next(iter(loader))
    assert x.dtype == vkblas.float32 and y.dtype == vkblas.int32 and x.device == vkblas.device("cpu")
    dropped = DataLoader(_ds(), batch_size=4, drop_last=True, device="cpu")
    assert len(dropped) == 2 and _labels(dropped) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_loader_shuffle_is_seeded_and_reproducible() -> None:
    a = DataLoader(_ds(50), batch_size=8, shuffle=True, seed=3, device="cpu")
    b = DataLoader(_ds(50), batch_size=8, shuffle=True, seed=3, device="cpu", prefetch=0)
    first, second = _labels(a), _labels(a)
    assert first == _labels(b) and second == _labels(b)  # same seed: same order, epoch after epoch
    assert first != second  # a new permutation each epoch
    assert sorted(sum(first, [])) == list(range(50))
    assert _labels(DataLoader(_ds(50), batch_size=8, shuffle=True, seed=4, device="cpu")) != first
    order = BatchSampler(RandomSampler(range(50), seed=3), 8, drop_last=False)  # the same order, loader-free
    assert list(order) == first


def test_loader_default_seed_follows_manual_seed() -> None:
    vkblas.manual_seed(11)
    a = _labels(DataLoader(_ds(30), batch_size=30, shuffle=True, device="cpu"))
    vkblas.manual_seed(11)
    assert _labels(DataLoader(_ds(30), batch_size=30, shuffle=True, device="cpu")) == a


class _Failing(TensorDataset):
    def get_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        if 7 in indices:
            raise KeyError("broken item 7")
        return super().get_batch(indices)


def test_loader_thread_errors_reach_the_caller_and_stop() -> None:
    before = threading.active_count()
    with pytest.raises(KeyError, match="broken item 7"):
        _labels(DataLoader(_Failing(*_ds().tensors), batch_size=2, device="cpu"))
    for _ in DataLoader(_ds(100), batch_size=2, device="cpu"):
        break  # leaving early stops the worker thread
    assert threading.active_count() == before
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got batch_size=0"):
        DataLoader(_ds(), batch_size=0)


def test_loader_on_vulkan_matches_cpu() -> None:
    if len(vkblas.devices()) < 2:
        pytest.skip("vkblas.devices() lists no Vulkan adapter")
    cpu = [(x.numpy(), y.numpy()) for x, y in DataLoader(_ds(20), batch_size=6, shuffle=True, seed=1, device="cpu")]
    gpu = DataLoader(_ds(20), batch_size=6, shuffle=True, seed=1, device="vulkan")
    for (xc, yc), (xg, yg) in zip(cpu, gpu, strict=True):
        assert xg.device.type == "vulkan"
        np.testing.assert_array_equal(xg.numpy(), xc)
        np.testing.assert_array_equal(yg.numpy(), yc)
