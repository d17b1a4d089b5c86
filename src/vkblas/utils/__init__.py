"""``vkblas.utils``: helpers with PyTorch's ``torch.utils`` names (``checkpoint``: activation checkpointing)."""

from __future__ import annotations

from . import checkpoint

__all__ = ["checkpoint"]
