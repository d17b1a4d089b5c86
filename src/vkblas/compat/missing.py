"""Names the PyTorch shim does not have fail loudly, naming the name: a module-level ``__getattr__`` raises
:class:`NotImplementedInVkblasError`, an ``AttributeError`` (so ``hasattr(F, "scaled_dot_product_attention")``, the way
nanoGPT probes, is False), and ``import torch.<missing module>`` raises ``ModuleNotFoundError`` the same way."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

HINT = "see 'vkblas run' in vkblas's README for what is mapped"


class NotImplementedInVkblasError(AttributeError):
    """A PyTorch name that vkblas does not have (yet)."""


def not_implemented(name: str) -> str:
    return f"{name} is not implemented in vkblas yet ({HINT})"


def missing(module_name: str) -> Callable[[str], NoReturn]:
    """A module ``__getattr__`` for the shim module that stands for ``module_name`` (``"torch.nn.functional"``)."""

    def __getattr__(name: str) -> NoReturn:  # noqa: N807 - it becomes the module's __getattr__
        if name.startswith("__") and name.endswith("__"):  # dunder probes (copy, pickle, inspect): plain misses
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        raise NotImplementedInVkblasError(not_implemented(f"{module_name}.{name}"))

    return __getattr__


def public(module: ModuleType) -> dict[str, Any]:
    """The public names of a vkblas module, for a shim module to re-export: its ``__all__``, or else what it
    defines itself (not what it imports); sub-modules are left to the shim's own."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if getattr(v, "__module__", None) == module.__name__]
    return {
        n: getattr(module, n) for n in names if not n.startswith("_") and not isinstance(getattr(module, n), ModuleType)
    }
