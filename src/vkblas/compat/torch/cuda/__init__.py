"""``torch.cuda`` under ``vkblas run``: the CUDA device is vkblas's Vulkan accelerator (:mod:`..cuda_map`).

``manual_seed`` / ``manual_seed_all`` seed vkblas's one generator (its numbers are the same on every device).
``is_bf16_supported()`` is False (no bfloat16 storage). Memory statistics, streams and events are not mapped.
"""

from __future__ import annotations

from typing import Any

from .... import accelerator as _acc
from ....device import device as Device
from ....random import manual_seed as _manual_seed
from ...cuda_map import adapter_name, available
from ...missing import missing
from . import amp

__getattr__ = missing("torch.cuda")


def is_available() -> bool:
    return available()


def device_count() -> int:
    return _acc.device_count() if available() else 0


def current_device() -> int:
    return _acc.current_device_index()


def _vulkan_index(device: Any) -> int:
    """The Vulkan adapter index of a CUDA device given as an index, ``"cuda:N"`` or a device."""
    dev = Device(f"cuda:{device}" if isinstance(device, int) else device)
    return dev.index if dev.index is not None else current_device()


def set_device(device: Any) -> None:
    _acc.set_device_index(_vulkan_index(device))


def synchronize(device: Any = None) -> None:
    _acc.synchronize(None if device is None else _vulkan_index(device))


def get_device_name(device: Any = None) -> str:
    return adapter_name(current_device() if device is None else _vulkan_index(device))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def manual_seed(seed: int) -> None:
    _manual_seed(int(seed))


manual_seed_all = manual_seed

__all__ = [
    "amp",
    "current_device",
    "device_count",
    "get_device_name",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "synchronize",
]
