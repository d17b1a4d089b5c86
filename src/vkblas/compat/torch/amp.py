"""``torch.amp`` under ``vkblas run``: vkblas's own mixed precision (:mod:`vkblas.amp`) under PyTorch's names.

``autocast("cuda", dtype=torch.float16)`` is ``vkblas.amp.autocast("vulkan", dtype=float16)`` (matrix products in
float16, softmax / norms / losses / sums in float32: the docstring of ``vkblas/amp.py`` says exactly what is
computed in which precision), ``"cpu"`` the cpu. Where vkblas cannot do what was asked it says so once on stderr
and the region runs in float32, as PyTorch warns and disables autocast for a device or dtype it lacks: for
``dtype=torch.bfloat16`` (vkblas has no bfloat16; PyTorch's default on ``"cpu"``, which here is float16 instead),
and for ``"cuda"`` when no Vulkan device stands for it. A Vulkan device without the ``shader-f16`` feature raises
(``vkblas.amp`` never runs a float16 request in float32 unannounced).

``GradScaler`` is ``vkblas.amp.GradScaler`` (PyTorch's dynamic loss scaling, its rules and its errors); enabled for
``"cuda"`` without a device to stand for it, it disables itself, as PyTorch's does without CUDA (said once).
"""

from __future__ import annotations

from typing import Any

from ... import amp as _amp
from ..cuda_map import available
from ..missing import missing
from ..notice import say_once

__getattr__ = missing("torch.amp")


def _vkblas_type(device_type: str) -> str | None:
    """vkblas's device type for PyTorch's (None: "cuda" with no Vulkan device to stand for it)."""
    kind = str(device_type).split(":")[0]
    if kind == "cuda":
        return "vulkan" if available() else None
    return kind


def is_autocast_available(device_type: str) -> bool:
    kind = _vkblas_type(device_type)
    return kind is not None and _amp.is_autocast_available(kind)


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    kind = _vkblas_type(device_type)
    return kind is not None and _amp.is_autocast_enabled(kind)


def get_autocast_dtype(device_type: str) -> Any:
    return _amp.get_autocast_dtype(_vkblas_type(device_type) or "vulkan")


class autocast(_amp.autocast):  # noqa: N801 - PyTorch's name
    def __init__(
        self, device_type: str = "cuda", dtype: Any = None, enabled: bool = True, cache_enabled: bool | None = None
    ) -> None:
        kind = _vkblas_type(device_type)
        if getattr(dtype, "name", None) == "bfloat16":  # checked first: also with enabled=False it is not a dtype
            if enabled:
                say_once(
                    "autocast-bf16",
                    "torch.autocast(dtype=torch.bfloat16): vkblas has no bfloat16: the block runs in float32",
                )
            enabled, dtype = False, None
        if enabled and kind is None:
            say_once(
                "autocast-cuda", "torch.autocast('cuda'): no Vulkan device stands for CUDA: the block runs in float32"
            )
            enabled = False
        if enabled and dtype is None and kind == "cpu":
            say_once("autocast-cpu", "torch.autocast('cpu'): float16 (vkblas has no bfloat16, PyTorch's cpu default)")
        super().__init__(kind or "vulkan", dtype, enabled, cache_enabled)


class GradScaler(_amp.GradScaler):
    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if enabled and _vkblas_type(device) is None:
            say_once("gradscaler", "torch.amp.GradScaler is enabled, but CUDA is not available: disabling it")
            enabled = False
        super().__init__(_vkblas_type(device) or "vulkan", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)  # fmt: skip
