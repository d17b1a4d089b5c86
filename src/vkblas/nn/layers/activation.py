"""Activation layers: each is its functional op with the layer's settings."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F
from ..module import Module


class _Elementwise(Module):
    """A parameter-free layer applying ``fn`` to its input; subclasses only name ``fn``."""

    fn: Any = None

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input)


class Identity(_Elementwise):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    fn = staticmethod(lambda x: x)


class ReLU(_Elementwise):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    fn = staticmethod(F.relu)


class Sigmoid(_Elementwise):
    fn = staticmethod(F.sigmoid)


class Tanh(_Elementwise):
    fn = staticmethod(F.tanh)


class SiLU(_Elementwise):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    fn = staticmethod(F.silu)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate='{self.approximate}'"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class Softmax(Module):
    fn: Any = staticmethod(F.softmax)

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        if dim is None:
            raise ValueError(f"{type(self).__name__}: pass dim explicitly (PyTorch's implicit dim is deprecated)")
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    fn = staticmethod(F.log_softmax)


class _Parametrised(Module):
    """An activation with settings: ``fn(input, **settings)``; subclasses name ``fn`` and pass the settings."""

    fn: Any = None

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        self._settings = tuple(settings)
        for k, v in settings.items():
            setattr(self, k, v)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input, **{k: getattr(self, k) for k in self._settings})

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k in self._settings)


class _InplaceFlag(_Elementwise):
    """A parameter-free activation whose PyTorch constructor takes ``inplace`` (accepted; computed out of place)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace


class SELU(_InplaceFlag):
    fn = staticmethod(F.selu)


class Mish(_InplaceFlag):
    fn = staticmethod(F.mish)


class Hardswish(_InplaceFlag):
    fn = staticmethod(F.hardswish)


class Hardsigmoid(_InplaceFlag):
    fn = staticmethod(F.hardsigmoid)


class ReLU6(_InplaceFlag):
    fn = staticmethod(F.relu6)


class LogSigmoid(_Elementwise):
    fn = staticmethod(F.logsigmoid)


class Softsign(_Elementwise):
    fn = staticmethod(F.softsign)


class ELU(_Parametrised):
    fn = staticmethod(F.elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__(alpha=alpha)


class CELU(_Parametrised):
    fn = staticmethod(F.celu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__(alpha=alpha)


class Softplus(_Parametrised):
    fn = staticmethod(F.softplus)

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__(beta=beta, threshold=threshold)


class Hardtanh(_Parametrised):
    fn = staticmethod(F.hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
        super().__init__(min_val=min_val, max_val=max_val)
