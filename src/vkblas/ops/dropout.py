"""The dropout family of ``torch.nn.functional``, on the counter-based generator (``vkblas.random``): ``dropout``,
channel-wise ``dropout1d`` / ``dropout2d`` / ``dropout3d`` (one draw per (sample, channel), broadcast over the
spatial dims), and the self-normalising ``alpha_dropout`` / ``feature_alpha_dropout`` (for SELU networks: a
dropped unit becomes SELU's negative saturation, then an affine map restores mean 0 and variance 1).

Every function is differentiable through ordinary ops (the mask is a constant); ``inplace`` is accepted and
computes out of place. Inside a graph capture, each replay draws a fresh mask.
"""

from __future__ import annotations

import math
import warnings

from ..random import Generator
from ..tensor import Tensor
from ._core import elementwise
from .random import random_tensor

#: SELU's negative saturation, -scale * alpha (Klambauer et al., 2017)
_ALPHA_PRIME = -1.7580993408473766


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(x: Tensor, shape: tuple[int, ...], p: float, generator: Generator | None) -> Tensor:
    """1.0 where a unit is kept (probability 1 - p), 0.0 where dropped, of ``shape`` (broadcastable to x)."""
    u = random_tensor(shape, "uniform", x.dtype, x._backend, generator)
    return elementwise("copy", elementwise("ge", u, float(p)), out_dtype=x.dtype)


def _scaled(x: Tensor, shape: tuple[int, ...], p: float, generator: Generator | None) -> Tensor:
    if p == 1.0:
        return x * 0.0
    return x * (_keep_mask(x, shape, p, generator) * (1.0 / (1.0 - p)))


def dropout(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p) (only when ``training``)."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _scaled(input, input.shape, p, generator)


def _channel_shape(x: Tensor, spatial: int) -> tuple[int, ...]:
    """The mask shape of channel dropout: (N, C, 1, ...) or (C, 1, ...) for an unbatched input."""
    return x.shape[: x.ndim - spatial] + (1,) * spatial


def _feature(input: Tensor, spatial: int, p: float, training: bool, generator: Generator | None) -> Tensor:
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _scaled(input, _channel_shape(input, spatial), p, generator)


def dropout1d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Zero whole channels of (N, C, L) or (C, L) with probability ``p``, scaling the rest by 1 / (1 - p)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input")
    return _feature(input, 1, p, training, generator)


def dropout2d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Zero whole channels of (N, C, H, W) with probability ``p``. A 3-D input is taken as (N, C, L), as PyTorch
    does (with its warning)."""
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is "
            "desired - input is interpreted as shape (N, C, L), where C is the channel dim (as in PyTorch)",
            stacklevel=2,
        )
        return _feature(input, 1, p, training, generator)
    if input.ndim != 4:
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which expects 3D or 4D", stacklevel=2)
    return _feature(input, max(input.ndim - 2, 0), p, training, generator)


def dropout3d(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) with probability ``p``."""
    if input.ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {input.ndim}-D input to dropout3d, which expects 4D or 5D", stacklevel=2)
    return _feature(input, 3 if input.ndim >= 4 else max(input.ndim - 1, 0), p, training, generator)


def _alpha(input: Tensor, shape: tuple[int, ...], p: float, training: bool, generator: Generator | None) -> Tensor:
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    q = 1.0 - p
    a = 1.0 / math.sqrt(q + _ALPHA_PRIME**2 * q * p)
    b = -a * _ALPHA_PRIME * p
    keep = _keep_mask(input, shape, p, generator)
    # a * (x * keep + alpha' * (1 - keep)) + b
    return input * (keep * a) + (keep * (-a * _ALPHA_PRIME) + (a * _ALPHA_PRIME + b))


def alpha_dropout(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = False,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Alpha dropout (for SELU): each dropped element becomes SELU's saturation, then ``a x + b`` keeps the mean
    and variance. Note PyTorch's default ``training=False`` here."""
    return _alpha(input, input.shape, p, training, generator)


def feature_alpha_dropout(
    input: Tensor,  # noqa: A002
    p: float = 0.5,
    training: bool = False,
    inplace: bool = False,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Alpha dropout of whole channels (N, C, ...): one draw per (sample, channel)."""
    return _alpha(input, _channel_shape(input, max(input.ndim - 2, 0)), p, training, generator)
