"""``torch.nn`` under ``vkblas run``: :mod:`vkblas.nn`."""

from __future__ import annotations

from .... import nn as _nn
from ...missing import missing, public

globals().update(public(_nn))

from . import functional, init, parallel, utils  # noqa: E402

__getattr__ = missing("torch.nn")
