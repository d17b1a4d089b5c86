"""``torchvision.transforms`` under ``vkblas run``: ``Compose``, ``ToTensor`` and ``Normalize`` of
:mod:`vkblas.data.transforms` (vectorised numpy; images are arrays, not PIL images)."""

from __future__ import annotations

from ...data.transforms import Compose, Normalize, ToTensor
from ..missing import missing

__all__ = ["Compose", "Normalize", "ToTensor"]
__getattr__ = missing("torchvision.transforms")
