"""Normalisation layers: LayerNorm, RMSNorm, BatchNorm1d/2d (with running statistics as buffers)."""

from __future__ import annotations

from typing import Any

from ... import creation
from ...autograd import no_grad
from ...dtypes import int32
from ...tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from .linear import _param


def _shape(normalized_shape: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class _TrailingNorm(Module):
    """Shared by LayerNorm and RMSNorm: normalises over the trailing ``normalized_shape`` dims."""

    def __init__(
        self, normalized_shape: Any, eps: float | None, elementwise_affine: bool, bias: bool, device: Any, dtype: Any
    ) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        if elementwise_affine:
            self.weight = _param(*self.normalized_shape, device=device, dtype=dtype)
            init.ones_(self.weight)
            if bias:
                self.bias = _param(*self.normalized_shape, device=device, dtype=dtype)
                init.zeros_(self.bias)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def _check(self, input: Tensor) -> None:  # noqa: A002
        k = len(self.normalized_shape)
        if input.ndim < k or input.shape[input.ndim - k :] != self.normalized_shape:
            raise self._bad_input(f"(*, {', '.join(map(str, self.normalized_shape))})", input)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(_TrailingNorm):
    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check(input)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)  # type: ignore[arg-type]


class RMSNorm(_TrailingNorm):
    def __init__(
        self,
        normalized_shape: Any,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, False, device, dtype)
        del self.bias  # RMSNorm has no bias (PyTorch's state_dict has only "weight")

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check(input)
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)


class _BatchNorm(Module):
    """Batch normalisation over every dim but channels; running statistics are updated with ``momentum``
    (``None``: a cumulative average) in training mode and used in eval mode."""

    _ranks: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = _param(num_features, device=device, dtype=dtype)
            self.bias = _param(num_features, device=device, dtype=dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", creation.zeros((), device=device, dtype=int32))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in self._ranks or input.shape[1] != self.num_features:
            shapes = {
                2: f"(N, {self.num_features})",
                3: f"(N, {self.num_features}, L)",
                4: f"(N, {self.num_features}, H, W)",
            }
            raise self._bad_input(" or ".join(shapes[r] for r in self._ranks), input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average needs the count on the host
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or not self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if not use_batch or self.training else None,
            self.running_var if not use_batch or self.training else None,
            self.weight,
            self.bias,
            use_batch,
            momentum,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)
