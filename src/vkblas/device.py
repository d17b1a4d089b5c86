"""``vkblas.device``: a small value naming where a tensor lives, like ``torch.device``.

A layer above may register a device *alias*: ``register_alias("cuda", fn)`` makes ``"cuda"`` and ``"cuda:N"`` stand
for the device ``fn(N)`` names, wherever a device is named (``vkblas run`` maps PyTorch's ``"cuda"`` to the default
Vulkan device this way, for the run of one program only). Without an alias such names are unknown devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import backend as _backends

_ALIASES: dict[str, Callable[[int | None], str]] = {}


def register_alias(kind: str, target: Callable[[int | None], str] | None) -> None:
    """Let device names of type ``kind`` mean the device ``target(index)`` returns; ``None`` removes the alias."""
    if target is None:
        _ALIASES.pop(kind, None)
    else:
        _ALIASES[kind] = target


def unalias(spec: str) -> str:
    """``spec`` with a registered alias resolved (``"cuda:0"`` -> ``"vulkan:0"`` under ``vkblas run``)."""
    if not _ALIASES:
        return spec
    kind, _, idx = str(spec).partition(":")
    target = _ALIASES.get(kind.strip().lower())
    if target is None:
        return spec
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in {spec!r}: expected a non-negative integer")
    return target(int(idx) if idx else None)


class device:  # noqa: N801 - PyTorch's name
    __slots__ = ("type", "index")

    def __init__(self, spec: str | device, index: int | None = None) -> None:
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if index is not None and ":" not in str(spec):
            spec, index = f"{spec}:{index}", None  # before unaliasing: device("cuda", 1) is "cuda:1"
        kind, idx = _backends.parse(unalias(spec))
        self.type = kind
        self.index = index if index is not None else idx

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and (self.index == other.index or None in (self.index, other.index))

    def __hash__(self) -> int:
        return hash(self.type)


DeviceLike = str | device | None


def resolve(dev: DeviceLike) -> _backends.Backend:
    """The backend a device argument means; ``None`` is the default device."""
    if dev is None:
        return _backends.get(_backends.default_device_name()[0])
    return _backends.get(unalias(str(dev)))


def of_backend(b: _backends.Backend) -> device:
    if b.name == "cpu":
        return device("cpu")
    return device("vulkan", getattr(b, "adapter_index", 0))


def devices() -> list[str]:
    """Every device name usable here: ``cpu`` and one ``vulkan:N`` per Vulkan adapter."""
    return ["cpu"] + [f"vulkan:{i}" for i in range(len(_backends.vulkan_adapters()))]


def info() -> dict[str, Any]:
    """Adapters, backends, features and limits, and the default device with the reason it was chosen."""
    name, why = _backends.default_device_name()
    return {"default_device": name, "why": why, "adapters": list(_backends.vulkan_adapters()), "cpu": "numpy"}


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work recorded on ``device`` (or on every device in use) to finish."""
    targets = [resolve(device)] if device is not None else _backends.loaded()
    for b in targets:
        b.synchronize()
