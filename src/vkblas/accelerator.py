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
