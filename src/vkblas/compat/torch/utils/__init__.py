"""``torch.utils`` under ``vkblas run``: ``torch.utils.data``."""

from __future__ import annotations

from ...missing import missing
from . import data

__all__ = ["data"]
__getattr__ = missing("torch.utils")
