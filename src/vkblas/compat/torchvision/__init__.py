"""``torchvision`` under ``vkblas run``: the names common examples use — ``datasets.MNIST``,
``datasets.FashionMNIST``, ``transforms.Compose``, ``ToTensor``, ``Normalize`` — mapped to :mod:`vkblas.data`."""

from __future__ import annotations

from ..missing import missing
from . import datasets, transforms

__version__ = "0.21.0+vkblas"  # the torchvision API level these names follow
__all__ = ["datasets", "transforms"]
__getattr__ = missing("torchvision")
