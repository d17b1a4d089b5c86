"""``torch.utils.data`` under ``vkblas run``: :mod:`vkblas.data` (datasets, samplers, collation, ``DataLoader``
with worker processes), without vkblas's own datasets and file helpers (torchvision's names stand for those)."""

from __future__ import annotations

from .... import data as _data
from ...missing import missing, public

_VKBLAS_ONLY = {"DataError", "FASHION_MNIST_SOURCE", "FashionMNIST", "IDXImageDataset", "MNIST", "MNIST_SOURCE"}
_VKBLAS_ONLY |= {"cache_dir", "parse_idx", "read_idx", "verify_sha256"}
globals().update({k: v for k, v in public(_data).items() if k not in _VKBLAS_ONLY})
__getattr__ = missing("torch.utils.data")
