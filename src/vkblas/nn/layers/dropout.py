"""Channel-wise and alpha dropout layers (``Dropout`` itself is in ``linear.py``): each applies its functional op
in training mode and is the identity in eval mode."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F
from .linear import Dropout


class _DropoutNd(Dropout):
    """Dropout's settings and checks, with another functional op."""

    fn: Any = None

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input, self.p, self.training)


class Dropout1d(_DropoutNd):
    """Zeroes whole channels of (N, C, L) or (C, L)."""

    fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Zeroes whole channels of (N, C, H, W) (a 3-D input is taken as (N, C, L), as in PyTorch)."""

    fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W)."""

    fn = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    """Self-normalising dropout for SELU networks (keeps mean 0 and variance 1)."""

    fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels."""

    fn = staticmethod(F.feature_alpha_dropout)
