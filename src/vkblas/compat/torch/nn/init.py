"""``torch.nn.init`` under ``vkblas run``: :mod:`vkblas.nn.init`."""

from __future__ import annotations

from ....nn import init as _init
from ...missing import missing, public

globals().update(public(_init))
__getattr__ = missing("torch.nn.init")
