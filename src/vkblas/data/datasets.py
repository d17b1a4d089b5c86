"""MNIST and Fashion-MNIST from their four canonical ``.gz`` IDX files.

The files are looked for, in order, in ``root``, in ``$VKBLAS_DATA`` and in the user cache directory
(``$XDG_CACHE_HOME/vkblas``, default ``~/.cache/vkblas``) — each directory itself, its ``<dataset>/`` subfolder
(``mnist``, ``fashion`` …) and torchvision's ``<Name>/raw``. With ``download=True`` missing files are fetched from
the canonical mirrors into ``root`` (or the cache directory) and their sha256 checked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dataset import Dataset
from .idx import DataError, read_idx, verify_sha256
from .transforms import ToTensor, Transform


@dataclass(frozen=True)
class Source:
    """Where a dataset's files come from and what they must hash to."""

    name: str
    dirnames: tuple[str, ...]
    mirrors: tuple[str, ...]
    sha256: dict[str, str]
    classes: tuple[str, ...]
    mean: float
    std: float


def _files(prefix: str) -> tuple[str, str]:
    return f"{prefix}-images-idx3-ubyte.gz", f"{prefix}-labels-idx1-ubyte.gz"


MNIST_SOURCE = Source(
    name="MNIST",
    dirnames=("mnist", "MNIST", "MNIST/raw"),
    mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/", "https://yann.lecun.com/exdb/mnist/"),
    sha256={
        "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    },
    classes=tuple(str(i) for i in range(10)),
    mean=0.1307,
    std=0.3081,
)

FASHION_MNIST_SOURCE = Source(
    name="FashionMNIST",
    dirnames=("fashion", "fashion-mnist", "fashion_mnist", "FashionMNIST", "FashionMNIST/raw"),
    mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    sha256={
        "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    },
    classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
    mean=0.2860,
    std=0.3530,
)


def cache_dir() -> Path:
    """The user cache directory of vkblas: ``$XDG_CACHE_HOME/vkblas`` or ``~/.cache/vkblas``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vkblas"


def search_roots(root: str | os.PathLike[str] | None) -> list[Path]:
    """The base directories searched, in order: ``root``, ``$VKBLAS_DATA``, the cache directory."""
    roots = [Path(root).expanduser()] if root is not None else []
    if os.environ.get("VKBLAS_DATA"):
        roots.append(Path(os.environ["VKBLAS_DATA"]).expanduser())
    roots.append(cache_dir())
    return roots


def find(source: Source, root: str | os.PathLike[str] | None = None) -> Path | None:
    """The first directory that holds all four files of ``source``, or None."""
    for base in search_roots(root):
        for d in (base, *(base / n for n in source.dirnames)):
            if all((d / f).is_file() for f in source.sha256):
                return d
    return None


#: how a Python caller fetches missing files (the CLI says ``--download`` instead: ``training.load_dataset``)
DOWNLOAD_HINT = "or pass download=True with network access"


def not_found(
    source: Source, root: str | os.PathLike[str] | None, why: str = "", download_hint: str = DOWNLOAD_HINT
) -> DataError:
    """The error for files of ``source`` that are in none of the searched folders; names every folder."""
    places = [str(root)] if root is not None else []
    places.append(os.environ.get("VKBLAS_DATA") or "$VKBLAS_DATA (unset)")
    places.append(str(cache_dir() / source.dirnames[0]))
    return DataError(
        f"{source.name} not found{why}: put {', '.join(source.sha256)} in one of: {'; '.join(places)} "
        f"(or a '{source.dirnames[0]}/' folder inside), {download_hint}"
    )


def download_source(source: Source, dest: str | os.PathLike[str], timeout: float = 30.0) -> Path:
    """Fetch the missing files of ``source`` into ``dest`` from the first mirror that answers; check sha256."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for fname, digest in source.sha256.items():
        target = dest / fname
        if target.is_file():
            continue
        errors = []
        for mirror in source.mirrors:
            try:
                _fetch(mirror + fname, target, digest, timeout)
                break
            except (OSError, urllib.error.URLError, DataError) as e:
                errors.append(f"{mirror}{fname}: {e}")
        else:
            raise not_found(source, dest, f" and download failed ({'; '.join(errors)})")
    return dest


def _fetch(url: str, target: Path, digest: str, timeout: float) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            shutil.copyfileobj(response, out)
        verify_sha256(tmp, digest)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_loaded: dict[tuple[str, str], np.ndarray] = {}
_lock = threading.Lock()


def load_split(source: Source, directory: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, 28, 28], labels int64 [N]) of one split; checked, parsed once per process."""
    images, labels = _files("train" if train else "t10k")
    out = []
    for fname in (images, labels):
        key = (str(directory), fname)
        with _lock:
            if key not in _loaded:
                array = read_idx(directory / fname, sha256=source.sha256[fname])
                array.setflags(write=False)
                _loaded[key] = array
            out.append(_loaded[key])
    x, y = out
    if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
        raise DataError(f"{directory}: {images} {x.shape} and {labels} {y.shape} do not match")
    return x, y.astype(np.int64)


class IDXImageDataset(Dataset):
    """Images and labels read from the IDX files of a :class:`Source`. Items are ``(image, label)``."""

    source: Source

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        train: bool = True,
        download: bool = False,
        transform: Transform | None = None,
        target_transform: Transform | None = None,
    ) -> None:
        self.root, self.train = root, train
        self.transform = transform if transform is not None else ToTensor()
        self.target_transform = target_transform
        directory = find(self.source, root)
        if directory is None:
            if not download:
                raise not_found(self.source, root)
            dest = Path(root) if root is not None else cache_dir() / self.source.dirnames[0]
            directory = download_source(self.source, dest)
        self.directory = directory
        self.data, self.targets = load_split(self.source, directory, train)
        self._transformed: np.ndarray | None = None
        self._transform_lock = threading.Lock()

    @property
    def classes(self) -> tuple[str, ...]:
        return self.source.classes

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, label = self.transform(self.data[index]), self.targets[index]
        return image, (self.target_transform(label) if self.target_transform else int(label))

    def __getstate__(self) -> dict[str, Any]:
        # what a loader worker process needs: it reads the (per-process cached) files again instead of receiving
        # the arrays, and builds its own transformed copy
        skip = ("data", "targets", "_transformed", "_transform_lock")
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.data, self.targets = load_split(self.source, self.directory, self.train)
        self._transformed = None
        self._transform_lock = threading.Lock()

    def get_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        if getattr(self.transform, "deterministic", False):
            # transform the whole split once (MNIST's training split: 188 MB of float32) and slice batches out of
            # it: per batch that is one gather instead of four passes of arithmetic, which the H200's host
            # measured as the bottleneck of a replayed training step
            with self._transform_lock:
                if self._transformed is None:
                    self._transformed = self.transform(self.data)
            images = self._transformed[indices]
        else:
            images = self.transform(self.data[indices])
        labels = self.targets[indices]
        return [images, self.target_transform(labels) if self.target_transform else labels]

    def __repr__(self) -> str:
        split = "train" if self.train else "test"
        return f"{type(self).__name__}(split={split}, size={len(self)}, directory={str(self.directory)!r})"


class MNIST(IDXImageDataset):
    """The MNIST handwritten digits: 60 000 training and 10 000 test images, 28x28 grey, 10 classes."""

    source = MNIST_SOURCE


class FashionMNIST(IDXImageDataset):
    """Zalando's Fashion-MNIST: same shapes and splits as MNIST, 10 clothing classes."""

    source = FASHION_MNIST_SOURCE
