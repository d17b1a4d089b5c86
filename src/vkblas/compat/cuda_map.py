"""PyTorch's CUDA device under ``vkblas run``: ``"cuda"`` is vkblas's accelerator (the default device when that is a
Vulkan device; see :mod:`vkblas.accelerator`), and ``"cuda:N"`` the N-th Vulkan adapter counted from it."""

from __future__ import annotations

from .. import accelerator
from .. import backend as _backends
from .notice import say_once


def adapter_name(index: int) -> str:
    info = _backends.vulkan_adapters()[index]
    return str(info.get("device") or info.get("name") or f"adapter {index}")


def available() -> bool:
    """Whether ``"cuda"`` has a device to stand for; says once on stderr what it maps to."""
    if accelerator.is_available():
        index = accelerator.current_device_index()
        say_once("cuda", f"'cuda' is vkblas's Vulkan device vulkan:{index} ({adapter_name(index)})")
        return True
    say_once(
        "cuda",
        f"torch.cuda.is_available() is False: vkblas's default device is {_backends.default_device_name()[0]} "
        "(VKBLAS_DEVICE=vulkan, or 'vkblas run --device vulkan', picks a Vulkan device, lavapipe included)",
    )
    return False


def cuda_device(index: int | None) -> str:
    """The vkblas device that ``cuda`` / ``cuda:index`` names (the device alias of the run)."""
    if not available():
        raise RuntimeError(
            f"device 'cuda' stands for vkblas's Vulkan accelerator under vkblas run, but there is none: the default "
            f"device is {_backends.default_device_name()[0]}. Use 'cpu', or VKBLAS_DEVICE=vulkan to pick any Vulkan "
            "adapter (lavapipe included)"
        )
    count = len(_backends.vulkan_adapters())
    if index is not None and not 0 <= index < count:
        raise RuntimeError(f"device 'cuda:{index}' does not exist: there are {count} Vulkan adapter(s)")
    return f"vulkan:{(accelerator.current_device_index() + (index or 0)) % count}"
