"""How much memory a GPU has: the device-local heaps Vulkan reports for the physical device behind a wgpu adapter.

wgpu exposes no heap sizes, and a driver asked for more than its device memory may satisfy buffers from host memory
instead (NVIDIA's did: a tensor of 2**42 floats, cut into 4 GiB segments, filled the H200 host's 128 GB before the
kernel killed the process). The pool refuses at once what exceeds the sum of these heaps (``memory.py``).

Read with ``ctypes`` from the Vulkan loader wgpu itself uses: one instance, created and destroyed here, with no
layers and no extensions. Any failure gives None (the pool then asks the driver, as before).
"""

from __future__ import annotations

import ctypes
import ctypes.util

_DEVICE_LOCAL = 1  # VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
_MAX_TYPES, _MAX_HEAPS = 32, 16


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_int),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.c_void_p),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class _Heap(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint32)]


class _MemoryProperties(ctypes.Structure):
    _fields_ = [
        ("memoryTypeCount", ctypes.c_uint32),
        ("memoryTypes", ctypes.c_uint32 * (2 * _MAX_TYPES)),
        ("memoryHeapCount", ctypes.c_uint32),
        ("memoryHeaps", _Heap * _MAX_HEAPS),
    ]


class _PropertiesHead(ctypes.Structure):
    """The leading fields of VkPhysicalDeviceProperties (read into a buffer big enough for the whole struct)."""

    _fields_ = [
        ("apiVersion", ctypes.c_uint32),
        ("driverVersion", ctypes.c_uint32),
        ("vendorID", ctypes.c_uint32),
        ("deviceID", ctypes.c_uint32),
        ("deviceType", ctypes.c_int),
        ("deviceName", ctypes.c_char * 256),
    ]


def device_local_bytes(vendor_id: int, device_id: int, name: str) -> int | None:
    """Bytes of device-local memory of the physical device with these ids (and this name, where several match);
    None when Vulkan cannot be asked or no device matches."""
    try:
        vk = ctypes.CDLL(ctypes.util.find_library("vulkan") or "libvulkan.so.1")
    except OSError:
        return None
    info = _InstanceCreateInfo(sType=1)  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
    instance = ctypes.c_void_p()
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return None
    try:
        count = ctypes.c_uint32()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        devices = (ctypes.c_void_p * count.value)()
        if vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), devices) not in (0, 5):  # VK_INCOMPLETE
            return None
        found: list[tuple[bool, int]] = []
        for pd in devices[: count.value]:
            raw = ctypes.create_string_buffer(4096)  # VkPhysicalDeviceProperties is about 830 bytes
            vk.vkGetPhysicalDeviceProperties(ctypes.c_void_p(pd), raw)
            head = _PropertiesHead.from_buffer(raw)
            if (head.vendorID, head.deviceID) != (vendor_id, device_id):
                continue
            mem = _MemoryProperties()
            vk.vkGetPhysicalDeviceMemoryProperties(ctypes.c_void_p(pd), ctypes.byref(mem))
            heaps = mem.memoryHeaps[: min(mem.memoryHeapCount, _MAX_HEAPS)]
            total = sum(h.size for h in heaps if h.flags & _DEVICE_LOCAL)
            found.append((head.deviceName.decode(errors="replace") == name, total))
        named = [total for same, total in found if same]
        return (named or [total for _, total in found] or [None])[0]
    finally:
        vk.vkDestroyInstance(instance, None)
