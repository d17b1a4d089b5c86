"""``Parameter``: a leaf tensor that a :class:`~vkblas.nn.Module` registers when it is assigned as an attribute."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor


class Parameter(Tensor):
    """A tensor that is a module parameter: ``requires_grad=True`` by default, found by ``Module.parameters()``.

    ``Parameter(t)`` shares ``t``'s storage (no copy), like PyTorch.

    >>> import vkblas
    >>> p = vkblas.nn.Parameter(vkblas.zeros(2, device="cpu"))
    >>> p.requires_grad, p.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        if data is None:
            from ..creation import empty

            data = empty(0, device="cpu")
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter expects a vkblas Tensor, got {type(data).__name__}")
        p = cls._make(data._view, data._backend)
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # everything happens in __new__
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self) -> Any:
        raise TypeError("pickling vkblas tensors is not supported; use vkblas.save (safetensors)")
