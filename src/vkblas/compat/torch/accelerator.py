"""``torch.accelerator`` under ``vkblas run``: :mod:`vkblas.accelerator` (the Vulkan accelerator), saying once on
stderr which device it is."""

from __future__ import annotations

from typing import Any

from ... import accelerator as _acc
from ..cuda_map import available
from ..missing import missing

__getattr__ = missing("torch.accelerator")

current_device_index = current_device_idx = _acc.current_device_index
set_device_index = set_device_idx = _acc.set_device_index
device_count = _acc.device_count
synchronize = _acc.synchronize
device_index = _acc.device_index


def is_available() -> bool:
    return available()


def current_accelerator(check_available: bool = False) -> Any:
    return _acc.current_accelerator() if available() else None
