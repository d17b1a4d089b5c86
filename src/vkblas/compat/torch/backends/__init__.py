"""``torch.backends`` under ``vkblas run``: the switches programs set (TF32, cuDNN autotuning, determinism) are
recorded and change nothing: vkblas computes float32 matmuls in full float32 (which every setting allows), has no
cuDNN, and its kernels are deterministic. ``cuda.is_built()``, ``cudnn.is_available()`` and ``mps.is_available()``
are False."""

from __future__ import annotations

from ...missing import missing
from . import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps"]
__getattr__ = missing("torch.backends")
