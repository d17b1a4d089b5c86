"""``vkblas.accelerator``: PyTorch's device-agnostic accelerator API (``torch.accelerator``, PyTorch >= 2.6).

The accelerator is the Vulkan device vkblas uses by default: the best hardware adapter, or the one
``VKBLAS_DEVICE=vulkan[:N]`` names (lavapipe included). Where the default device is ``cpu`` there is no accelerator:
``is_available()`` is False, as ``torch.accelerator.is_available()`` is on a machine without a GPU.

>>> import vkblas
>>> vkblas.accelerator.is_available() == (vkblas.accelerator.current_accelerator() is not None)
True
"""

from __future__ import annotations

from . import backend as _backends
from .device import device

_current: int | None = None  # set by set_device_index; None: the default device's adapter


def _default_index() -> int | None:
    name, _ = _backends.default_device_name()
    kind, idx = _backends.parse(name)
    if kind != "vulkan":
        return None
    # "vulkan" without an index (VKBLAS_DEVICE=vulkan): the adapter that backend picks
    return idx if idx is not None else int(_backends.get(name).adapter_index)


def is_available() -> bool:
    """Whether vkblas's default device is a Vulkan device."""
    return _default_index() is not None


def device_count() -> int:
    """How many Vulkan adapters there are when an accelerator is available, else 0."""
    return len(_backends.vulkan_adapters()) if is_available() else 0


def current_device_index() -> int:
    """The index ``N`` of the current accelerator ``vulkan:N``."""
    default = _default_index()
    if default is None:
        raise RuntimeError(f"no accelerator: vkblas's default device is {_backends.default_device_name()[0]}")
    return default if _current is None else _current


current_device_idx = current_device_index  # PyTorch 2.6's name, still accepted there


def current_accelerator(check_available: bool = False) -> device | None:
    """The current accelerator, ``device('vulkan:N')``, or None where there is none."""
    return device("vulkan", current_device_index()) if is_available() else None


def set_device_index(device_index: int | str | device) -> None:
    """Make ``vulkan:N`` the current accelerator (what ``current_accelerator()`` and ``"cuda"`` under ``vkblas run``
    mean). New tensors without a ``device=`` still go to the default device, as in PyTorch."""
    global _current
    index = _as_index(device_index)
    count = len(_backends.vulkan_adapters())
    if not 0 <= index < count:
        raise ValueError(f"accelerator index {index} is out of range: there are {count} Vulkan adapter(s)")
    _current = index


set_device_idx = set_device_index


def _as_index(d: int | str | device) -> int:
    if isinstance(d, int):
        return d
    dev = d if isinstance(d, device) else device(d)
    if dev.type != "vulkan":
        raise ValueError(f"expected a Vulkan device or an index, got {d!r}")
    return dev.index if dev.index is not None else current_device_index()


def synchronize(device_index: int | str | device | None = None) -> None:
    """Wait until all work recorded on the accelerator (default: the current one) has finished."""
    index = current_device_index() if device_index is None else _as_index(device_index)
    _backends.get(f"vulkan:{index}").synchronize()


class device_index:  # noqa: N801 - PyTorch's name
    """``with vkblas.accelerator.device_index(1):`` makes ``vulkan:1`` current inside the block (None: no change)."""

    def __init__(self, index: int | None) -> None:
        self.index = index
        self.previous: int | None = None

    def __enter__(self) -> None:
        global _current
        self.previous = _current
        if self.index is not None:
            set_device_index(self.index)

    def __exit__(self, *exc: object) -> None:
        global _current
        _current = self.previous


# ---------------------------------------------------------------- memory (PyTorch >= 2.8's torch.accelerator names)
# The numbers are the Vulkan backend's buffer pool: a tensor holds a pooled buffer of its bucket's size (a power of
# two up to 1 MiB, then sixteenths of one), as PyTorch's caching allocator counts its rounded blocks.


def _pool_backend(device_index: int | str | device | None) -> _backends.Backend:
    """The Vulkan backend of ``vulkan:N`` (an index or a device), of the current accelerator for None; ``"vulkan"``
    without an index is the adapter that name means everywhere else (also where the default device is cpu)."""
    if device_index is None:
        return _backends.get(f"vulkan:{current_device_index()}")
    if isinstance(device_index, int):
        return _backends.get(f"vulkan:{device_index}")
    dev = device_index if isinstance(device_index, device) else device(device_index)
    if dev.type != "vulkan":
        raise ValueError(
            f"expected a Vulkan device or an index, got {device_index!r}: memory statistics are kept "
            "for the Vulkan backend's pool only"
        )
    return _backends.get(str(dev))


def memory_stats(device_index: int | str | device | None = None) -> dict[str, int]:
    """The accelerator's memory statistics under PyTorch's keys: ``allocated_bytes.all.current`` / ``.peak``
    (held by tensors) and ``reserved_bytes.all.current`` (held by the pool, cached free buffers included)."""
    s = _pool_backend(device_index).memory_stats()
    return {
        "allocated_bytes.all.current": s["allocated"],
        "allocated_bytes.all.peak": s["peak_allocated"],
        "reserved_bytes.all.current": s["reserved"],
    }


def memory_allocated(device_index: int | str | device | None = None) -> int:
    """Bytes of the accelerator's memory that tensors hold now."""
    return _pool_backend(device_index).memory_stats()["allocated"]


def max_memory_allocated(device_index: int | str | device | None = None) -> int:
    """The most bytes tensors held at once since the program started or ``reset_peak_memory_stats()``."""
    return _pool_backend(device_index).memory_stats()["peak_allocated"]


def memory_reserved(device_index: int | str | device | None = None) -> int:
    """Bytes the accelerator's pool holds: tensors' buffers and the cached free ones (``empty_cache`` frees those)."""
    return _pool_backend(device_index).memory_stats()["reserved"]


def reset_peak_memory_stats(device_index: int | str | device | None = None) -> None:
    """Make ``max_memory_allocated()`` measure from now (from what tensors hold now)."""
    _pool_backend(device_index).reset_peak_memory_stats()


def empty_cache(device_index: int | str | device | None = None) -> None:
    """Give the accelerator's cached free buffers back to the driver (``memory_reserved`` drops)."""
    backend = _pool_backend(device_index)
    backend.synchronize()
    backend.empty_cache()
