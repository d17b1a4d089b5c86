"""The device copy bandwidth that benchmarks compare kernels with ("% of device copy bandwidth").

A plain buffer-to-buffer copy command (no kernel, no index math) measures what the device's memory does on its
own. It is a measuring tool, not an op: nothing above the backend needs it, so it lives here and reaches into the
Vulkan runtime directly (``bench/`` may use concrete backends; see tests/test_architecture.py).
"""

from __future__ import annotations

import time

from ..backend.base import Backend, BackendError
from ..backend.vulkan import InvalidArgumentError, VulkanBackend, VulkanStorage
from ..dtypes import int32


def can_copy(backend: Backend) -> bool:
    """Whether ``backend`` has a plain device copy to measure (a Vulkan backend)."""
    return isinstance(backend, VulkanBackend)


def device_copy(backend: VulkanBackend, dst: VulkanStorage, src: VulkanStorage, nbytes: int) -> None:
    """Record a plain buffer-to-buffer copy of ``nbytes`` (from byte 0 of each), in order with the other work."""
    where = f"device_copy on {backend.device_name()}"
    if not isinstance(dst, VulkanStorage) or not isinstance(src, VulkanStorage):
        raise BackendError(f"{where}: both storages must live on this device")
    if nbytes % 4 or nbytes < 0:
        raise InvalidArgumentError(f"{where}: {nbytes} bytes is not a multiple of 4")
    if nbytes > min(dst.buffer.size, src.buffer.size):
        raise InvalidArgumentError(f"{where}: {nbytes} bytes exceed a buffer")
    if dst.buffer is src.buffer:
        raise InvalidArgumentError(f"{where}: source and destination are one buffer")
    if nbytes:
        backend.rt.copy(dst.buffer, 0, src.buffer, 0, nbytes)


def copy_bandwidth(backend: VulkanBackend, nbytes: int = 1 << 28, reps: int = 10) -> float:
    """GB/s (bytes read + written) of ``reps`` plain device copies of ``nbytes``, best of 3 rounds."""
    nbytes &= ~3
    a, b = backend.alloc(nbytes // 4, int32), backend.alloc(nbytes // 4, int32)
    device_copy(backend, b, a, nbytes)  # warm-up
    backend.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            device_copy(backend, b, a, nbytes)
        backend.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes * reps / best / 1e9
