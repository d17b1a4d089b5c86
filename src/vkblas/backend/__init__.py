"""Finding backends by name, and the device policy (DESIGN.md §3).

``"cpu"`` is the numpy backend. ``"vulkan"`` (or ``"vulkan:N"``) is the wgpu backend on Vulkan adapter N; without an
index it is the best adapter that exists, lavapipe included. The *default* device is the best hardware Vulkan
adapter, else ``cpu`` (a CPU Vulkan adapter such as lavapipe is slower than numpy); ``VKBLAS_DEVICE`` overrides.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from .base import Backend, NoAdapterError
from .cpu import CpuBackend

_cpu = CpuBackend()
_instances: dict[str, Backend] = {"cpu": _cpu}


def parse(name: str) -> tuple[str, int | None]:
    kind, _, idx = str(name).partition(":")
    kind = kind.strip().lower()
    if kind == "gpu":  # convenience alias
        kind = "vulkan"
    if kind not in ("cpu", "vulkan"):
        raise ValueError(f"unknown device {name!r}: expected 'cpu', 'vulkan' or 'vulkan:N'")
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in {name!r}: expected a non-negative integer")
    if kind == "cpu" and idx not in ("", "0"):
        raise ValueError(f"there is one cpu device; got {name!r}")
    return kind, (int(idx) if idx else None)


def get(name: str) -> Backend:
    """The backend for a device string, created on first use. ``"vulkan"`` and ``"vulkan:N"`` of the same adapter
    are one device (one queue, one pool): tensors made with either name work together."""
    kind, idx = parse(name)
    if kind == "cpu":
        return _cpu
    if idx is None:
        key = _default_vulkan_key()
    else:
        key = f"vulkan:{idx}"
    backend = _instances.get(key)
    if backend is None:
        from .vulkan import VulkanBackend

        backend = _instances[key] = VulkanBackend(adapter_index=int(key.split(":")[1]))
    return backend


@cache
def _default_vulkan_key() -> str:
    from .vulkan.device import select_adapter

    return f"vulkan:{select_adapter(None)[0]}"


@cache
def vulkan_adapters() -> tuple[dict[str, Any], ...]:
    try:
        from .vulkan import list_adapters
    except ImportError:  # wgpu missing: no Vulkan here
        return ()
    try:
        return tuple(list_adapters())
    except NoAdapterError:
        return ()


def default_device_name() -> tuple[str, str]:
    """(device, why): the device new tensors get when none is named."""
    env = os.environ.get("VKBLAS_DEVICE")
    if env:
        parse(env)
        return env, "set by VKBLAS_DEVICE"
    for i, info in enumerate(vulkan_adapters()):
        if str(info.get("adapter_type", "")).upper() not in ("CPU", "UNKNOWN") and info.get("backend_type") in (
            "Vulkan",
            "Metal",
        ):
            return f"vulkan:{i}", f"hardware adapter {info.get('device') or info.get('name')}"
    return "cpu", "no hardware Vulkan adapter (a CPU Vulkan adapter such as lavapipe is slower than numpy)"


def loaded() -> list[Backend]:
    return list({id(b): b for b in _instances.values()}.values())
