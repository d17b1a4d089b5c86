"""``torch.nn.utils`` under ``vkblas run``: gradient clipping from :mod:`vkblas.nn.utils`."""

from __future__ import annotations

from ....nn.utils import clip_grad_norm_, clip_grad_value_
from ...missing import missing

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
__getattr__ = missing("torch.nn.utils")
