"""``torch.nn.functional`` under ``vkblas run``: :mod:`vkblas.nn.functional`."""

from __future__ import annotations

from ....nn import functional as _functional
from ...missing import missing, public

globals().update(public(_functional))
__getattr__ = missing("torch.nn.functional")
