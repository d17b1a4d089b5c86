"""``torch.optim`` under ``vkblas run``: :mod:`vkblas.optim`."""

from __future__ import annotations

from .... import optim as _optim
from ...missing import missing, public

globals().update(public(_optim))

from . import lr_scheduler  # noqa: E402

__getattr__ = missing("torch.optim")
