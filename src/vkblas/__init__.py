"""vkblas: a PyTorch-like machine-learning framework that trains on any GPU through Vulkan (wgpu).

>>> import vkblas
>>> x = vkblas.tensor([1.0, 2.0, 3.0], requires_grad=True, device="cpu")
>>> y = x * 2 + 3
>>> y.backward()
>>> x.grad
tensor([2., 2., 2.])
"""

from __future__ import annotations

from typing import Any

from . import backend as _backends
from . import ops as _ops
from .autograd import enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from .backend.base import BackendError, DeviceOutOfMemoryError, NoAdapterError, UnsupportedError
from .creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from .device import device
from .dtypes import DType, bool_, double, float16, float32, float64, half, int32
from .gradcheck import gradcheck
from .random import Generator, initial_seed, manual_seed
from .tensor import Tensor

bool = bool_  # noqa: A001 - PyTorch's name: vkblas.bool
int64 = long = int32  # accepted for PyTorch code; stored as int32 (see dtypes.py)
int = int32  # noqa: A001
float = float32  # noqa: A001

__version__ = "0.1.0"

# the functional ops: vkblas.exp(x), vkblas.matmul(a, b), vkblas.cat([...]), ...
_EXPORTED_OPS = [n for n in _ops.__all__ if not n.endswith("_") and n not in ("empty", "full", "norm_dim")]
globals().update({n: getattr(_ops, n) for n in _EXPORTED_OPS})


def devices() -> list[str]:
    """Every device name usable here: ``cpu`` and one ``vulkan:N`` per Vulkan adapter."""
    return ["cpu"] + [f"vulkan:{i}" for i in range(len(_backends.vulkan_adapters()))]


def info() -> dict[str, Any]:
    """Adapters, backends, features and limits, and the default device with the reason it was chosen."""
    name, why = _backends.default_device_name()
    return {"default_device": name, "why": why, "adapters": list(_backends.vulkan_adapters()), "cpu": "numpy"}


def synchronize(device: Any = None) -> None:  # noqa: F811 - PyTorch's argument name
    """Wait for all work recorded on ``device`` (or on every device in use) to finish."""
    targets = [_backends.get(str(device))] if device is not None else _backends.loaded()
    for b in targets:
        b.synchronize()


def is_tensor(obj: object) -> bool:
    return isinstance(obj, Tensor)


from . import accelerator, data, graphs, nn, optim  # noqa: E402  (the training stack sits on everything above)
from .io import load, save  # noqa: E402
