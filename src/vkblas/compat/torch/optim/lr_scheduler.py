"""``torch.optim.lr_scheduler`` under ``vkblas run``: :mod:`vkblas.optim.lr_scheduler`."""

from __future__ import annotations

from ....optim import lr_scheduler as _lr_scheduler
from ...missing import missing, public

globals().update(public(_lr_scheduler))
_LRScheduler = LRScheduler  # noqa: F821 - PyTorch's old name, still used by programs
__getattr__ = missing("torch.optim.lr_scheduler")
