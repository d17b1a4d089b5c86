"""``torchvision.datasets`` under ``vkblas run``: ``MNIST`` and ``FashionMNIST`` from their local IDX ``.gz`` files.

The files are looked for in ``root`` (also ``root/MNIST/raw``, torchvision's layout), then in ``$VKBLAS_DATA`` and
vkblas's cache (see :mod:`vkblas.data.datasets`). ``download=True`` does not download under ``vkblas run``: where
the files are missing the error says where to put them. Without a transform an image is its uint8 array (there is no
PIL); an image that went through ``ToTensor`` is a tensor on the cpu device, as torchvision gives CPU tensors. A
``DataLoader`` builds whole batches from the arrays instead (the fast path).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...creation import tensor
from ...data import datasets as _vk
from ...data.idx import DataError
from ..missing import missing

__all__ = ["FashionMNIST", "MNIST"]
__getattr__ = missing("torchvision.datasets")


def _raw(x: np.ndarray) -> np.ndarray:
    return x


_raw.deterministic = True  # type: ignore[attr-defined]


class _Local:
    """The torchvision signature over a vkblas IDX dataset, reading local files only."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        train: bool = True,
        transform: Any = None,
        target_transform: Any = None,
        download: bool = False,
    ) -> None:
        source = self.source  # type: ignore[attr-defined]
        if _vk.find(source, root) is None:
            where = os.path.join(os.fspath(root), source.name, "raw")
            raise DataError(
                f"{source.name} files not found{' (vkblas run does not download)' if download else ''}: put "
                f"{', '.join(source.sha256)} in {where} or in $VKBLAS_DATA/{source.dirnames[0]}; "
                f"vkblas.data.{source.name}(root, download=True) can fetch them"
            )
        super().__init__(root, train=train, transform=transform or _raw, target_transform=target_transform)  # type: ignore[call-arg]

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, label = super().__getitem__(index)  # type: ignore[misc]
        return (tensor(image, device="cpu") if image.dtype.kind == "f" else image), label


class MNIST(_Local, _vk.MNIST):
    pass


class FashionMNIST(_Local, _vk.FashionMNIST):
    pass
