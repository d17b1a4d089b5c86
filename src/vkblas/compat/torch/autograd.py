"""``torch.autograd`` under ``vkblas run``: ``grad`` and the grad-mode switches of :mod:`vkblas.autograd`."""

from __future__ import annotations

from ...autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from ..missing import missing

__all__ = ["enable_grad", "grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]
__getattr__ = missing("torch.autograd")
