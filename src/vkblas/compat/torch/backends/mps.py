"""``torch.backends.mps`` under ``vkblas run``: Apple GPUs are reached through vkblas's Vulkan (Metal) device,
which is ``cuda`` here; ``mps`` itself is not available."""

from __future__ import annotations

from ...missing import missing

__getattr__ = missing("torch.backends.mps")


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
