"""What ``vkblas.amp.autocast`` does to an op's inputs; the switch itself is ``autograd.autocast_mode`` (the engine
turns it off for the backward pass) and the public face is ``vkblas/amp.py``.

Two policies, PyTorch's (its CUDA lists, for the ops vkblas has):

* :func:`lower`: ops that gain from float16 and keep its error small (matmul / mm / bmm / ``@``, linear, conv1d,
  conv2d, conv_transpose2d, scaled_dot_product_attention) take their float32 tensor inputs cast to the autocast
  dtype, so they compute on float16 storage and return float16.
* :func:`fp32`: ops whose float16 result would lose too much (softmax, log_softmax, layer_norm, normalize, the
  losses, sum / prod / cumsum / cumprod, and the elementwise ops in :data:`FLOAT32_OPS`) take their float16 inputs
  cast to float32, compute in float32 and return float32.

Every other op runs in the dtypes it is given (an add of float16 and float32 promotes to float32, as always). The
casts are ordinary recorded ops (``ToCopyBackward``, whose backward casts the gradient back), so a float32 leaf gets
a float32 gradient. A float32 leaf that requires grad (a parameter) is cast once per autocast region while its
storage is unchanged (PyTorch's ``cache_enabled``). Outside autocast every check is one attribute read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..autograd import autocast_mode, is_grad_enabled
from ..backend.base import UnsupportedError
from ..dtypes import DType, float16, float32
from ..tensor import Tensor
from .shape import to

#: elementwise records computed in float32 under autocast (PyTorch's float32 list: acos asin cosh erfinv exp log pow
#: reciprocal rsqrt sinh tan; log1p, expm1 ... are not vkblas records)
FLOAT32_OPS = frozenset({"acos", "asin", "cosh", "erfinv", "exp", "log", "pow", "reciprocal", "rsqrt", "sinh", "tan"})


_NO_F16 = {"vulkan": " (no shader-f16 feature)"}


def device_type(t: Tensor) -> str:
    """The autocast device type of a tensor: ``"cpu"`` or ``"vulkan"``."""
    return "cpu" if t._backend.name == "cpu" else "vulkan"


def where(backend: Any) -> str:
    """A device as an error names it: ``vulkan (llvmpipe ...)`` or ``cpu``."""
    return backend.device_name() if hasattr(backend, "device_name") else str(backend.name)


def lower(op: str, *tensors: Any) -> tuple[Any, ...]:
    """``tensors`` with each float32 tensor on a device type autocast is on for cast to its dtype (others as they
    are); an error naming ``op`` where that device cannot store the dtype."""
    dtypes = autocast_mode.dtypes
    if not dtypes:
        return tensors
    return tuple(_lower(op, t, dtypes) for t in tensors)


def _lower(op: str, t: Any, dtypes: dict[str, DType]) -> Any:
    if not isinstance(t, Tensor) or t.dtype is not float32:
        return t
    dt = dtypes.get(device_type(t))
    if dt is None:
        return t
    if not t._backend.supports(dt):
        raise UnsupportedError(
            f"autocast({dt.name}): {op} of a float32{list(t.shape)} tensor on {where(t._backend)} would compute in "
            f"{dt.name}, which this device cannot store{_NO_F16.get(device_type(t), '')}; run without autocast here"
        )
    if not (autocast_mode.cache_enabled and t.requires_grad and t.grad_fn is None and is_grad_enabled()):
        return to(t, dtype=dt)
    hit = autocast_mode.cache.get(id(t))
    if hit is not None and hit[0] is t and hit[1] == t._version and hit[2].dtype is dt:
        return hit[2]
    out = to(t, dtype=dt)
    autocast_mode.cache[id(t)] = (t, t._version, out)
    return out


def fp32(t: Any) -> Any:
    """``t`` cast to float32 when it is a float16 tensor on a device type autocast is on for, else ``t``."""
    dtypes = autocast_mode.dtypes
    if not dtypes or not isinstance(t, Tensor) or t.dtype is not float16 or device_type(t) not in dtypes:
        return t
    return to(t, dtype=float32)


def refuse(op: str, *tensors: Any) -> None:
    """PyTorch's error for an op that is unsafe to autocast (binary_cross_entropy), when autocast is on for one of
    ``tensors``' device types."""
    dtypes = autocast_mode.dtypes
    if dtypes and any(isinstance(t, Tensor) and device_type(t) in dtypes for t in tensors):
        raise RuntimeError(
            f"{op} is unsafe to autocast: a sigmoid in float16 right before it saturates. Use "
            "binary_cross_entropy_with_logits (nn.BCEWithLogitsLoss), which is safe, or disable autocast around "
            "this op (vkblas.amp.autocast(..., enabled=False)) with float32 inputs"
        )


def state() -> tuple[dict[str, DType], bool]:
    """The autocast settings in force (which device types, in which dtype; whether casts are cached)."""
    return dict(autocast_mode.dtypes), autocast_mode.cache_enabled


@contextmanager
def restored(settings: tuple[dict[str, DType], bool]) -> Iterator[None]:
    """Run with ``settings`` of :func:`state` and a cache of its own (activation checkpointing's recomputation runs
    the forward again as it first ran, and must not reuse casts the first pass made)."""
    saved = autocast_mode.dtypes, autocast_mode.cache_enabled, autocast_mode.cache
    autocast_mode.dtypes, autocast_mode.cache_enabled = dict(settings[0]), settings[1]
    autocast_mode.cache = {}
    try:
        yield
    finally:
        autocast_mode.dtypes, autocast_mode.cache_enabled, autocast_mode.cache = saved
