"""Methods that PyTorch programs call on tensors and modules and that only mean something under ``vkblas run``:
added to ``vkblas.Tensor`` and ``vkblas.nn.Module`` for the run of one program, and removed afterwards.

- ``Tensor.cuda()`` / ``Module.cuda()``: to the device ``"cuda"`` stands for (:mod:`.cuda_map`).
- ``Tensor.pin_memory()``: the tensor itself (vkblas has no page-locked host memory; uploads are one buffer write),
  ``Tensor.is_pinned()``: False; ``Tensor.is_cuda``: whether it lives on a Vulkan device.
- ``format(t, ".4f")`` of a 0-d tensor formats its value, as PyTorch's ``Tensor.__format__`` does.
- A Tensor method vkblas lacks fails naming it (``torch.Tensor.topk is not implemented in vkblas yet``).
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..device import unalias
from ..nn import Module
from ..tensor import Tensor
from .missing import NotImplementedInVkblasError, not_implemented


def _cuda(device: Any = None) -> str:
    if device is None:
        return unalias("cuda")
    if isinstance(device, int):
        return unalias(f"cuda:{device}")
    return str(device)


def tensor_cuda(self: Tensor, device: Any = None, non_blocking: bool = False) -> Tensor:
    return self.to(_cuda(device))


def module_cuda(self: Module, device: Any = None) -> Module:
    return self.to(_cuda(device))


def pin_memory(self: Tensor, device: Any = None) -> Tensor:
    return self


def is_pinned(self: Tensor, device: Any = None) -> bool:
    return False


def is_cuda(self: Tensor) -> bool:
    return self.device.type == "vulkan"


def tensor_format(self: Tensor, spec: str) -> str:
    if self.ndim == 0:
        return format(self.item(), spec)
    return object.__format__(self, spec)


def tensor_getattr(self: Tensor, name: str) -> NoReturn:
    if name.startswith("_"):
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")
    raise NotImplementedInVkblasError(not_implemented(f"torch.Tensor.{name}"))


PATCHES: dict[type, dict[str, Any]] = {
    Tensor: {
        "cuda": tensor_cuda,
        "pin_memory": pin_memory,
        "is_pinned": is_pinned,
        "is_cuda": property(is_cuda),
        "__format__": tensor_format,
        "__getattr__": tensor_getattr,
    },
    Module: {"cuda": module_cuda},
}
_saved: dict[tuple[type, str], Any] = {}
_MISSING = object()


def apply() -> None:
    for cls, methods in PATCHES.items():
        for name, fn in methods.items():
            _saved[(cls, name)] = cls.__dict__.get(name, _MISSING)
            setattr(cls, name, fn)


def remove() -> None:
    for (cls, name), old in _saved.items():
        if old is _MISSING:
            delattr(cls, name)
        else:
            setattr(cls, name, old)
    _saved.clear()
