"""The Vulkan backend on wgpu (Metal on Apple): ``VulkanBackend`` and adapter discovery.

Layout: ``device.py`` (adapters, device, unchecked shader compilation, pipeline cache), ``memory.py`` (storage and
buffer pool), ``queue.py`` (batched asynchronous execution, params ring, graph recordings), ``kernels/`` (WGSL
generators), ``gemm.py`` (the GEMM kernel family), ``autotune.py`` (its tuner and self-checks), ``matmul.py``
(recording a matmul with the tuner's plan), ``device_checks.py`` (device-side value checks), ``backend.py`` (the
contract of ``backend/base.py``).
"""

from .backend import InvalidArgumentError, VulkanBackend
from .device import list_adapters
from .memory import VulkanStorage

__all__ = ["InvalidArgumentError", "VulkanBackend", "VulkanStorage", "list_adapters"]
