"""Conv1d, Conv2d, ConvTranspose2d, Upsample and the 2-D pools (the ops are in ``vkblas.ops.conv``,
``conv_variants`` and ``resample``)."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from .linear import _param


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]


def _single(v: Any) -> tuple[int]:
    return (v,) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]


class _ConvNd(Module):
    """What Conv1d and Conv2d share: the checks, settings, parameters and PyTorch's default initialisation;
    subclasses name their functional op, the tuple type of their settings and the input they expect."""

    fn: Any = None
    _tuple: Any = None
    _dims = ""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}"
            )
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        tup = type(self)._tuple
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = tup(kernel_size), tup(stride), tup(dilation)
        self.padding = padding if isinstance(padding, str) else tup(padding)
        self.padding_mode = padding_mode
        self.weight = _param(out_channels, in_channels // groups, *self.kernel_size, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_channels, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_init_(self.weight, self.bias)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        rank = len(self.kernel_size) + 1  # channels and the spatial dims, unbatched
        if input.ndim not in (rank, rank + 1) or input.shape[-rank] != self.in_channels:
            dims = type(self)._dims
            raise self._bad_input(f"(N, {self.in_channels}, {dims}) or ({self.in_channels}, {dims})", input)
        return type(self).fn(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        zero = (0,) * len(self.kernel_size)
        if self.padding not in (zero, "valid"):
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * len(self.kernel_size):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L) or (C_in, L). Initialised like Linear (PyTorch's default)."""

    fn = staticmethod(F.conv1d)
    _tuple = staticmethod(_single)
    _dims = "L"


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W) or (C_in, H, W). Initialised like Linear (PyTorch's default)."""

    fn = staticmethod(F.conv2d)
    _tuple = staticmethod(_pair)
    _dims = "H, W"


class ConvTranspose2d(Module):
    """Transposed 2-D convolution over (N, C_in, H, W) or (C_in, H, W); weight (C_in, C_out/groups, kh, kw),
    initialised as PyTorch does (its fan-in is C_out/groups * kh * kw)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: Any = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"ConvTranspose2d: groups={groups} must divide in_channels={in_channels} and "
                f"out_channels={out_channels}"
            )
        if padding_mode != "zeros":
            raise ValueError(f"ConvTranspose2d: only padding_mode='zeros' is supported, got {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.padding = _pair(kernel_size), _pair(stride), _pair(padding)
        self.output_padding, self.dilation = _pair(output_padding), _pair(dilation)
        self.padding_mode = padding_mode
        self.weight = _param(in_channels, out_channels // groups, *self.kernel_size, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_channels, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_init_(self.weight, self.bias)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        if input.ndim not in (3, 4) or input.shape[-3] != self.in_channels:
            raise self._bad_input(f"(N, {self.in_channels}, H, W) or ({self.in_channels}, H, W)", input)
        output_padding = self.output_padding
        if output_size is not None:  # PyTorch: the output_padding that reaches the asked-for size
            want = tuple(output_size)[-2:]
            geometry = zip(input.shape[-2:], self.stride, self.padding, self.dilation, self.kernel_size, strict=True)
            made = [(n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in geometry]
            output_padding = tuple(w - m for w, m in zip(want, made, strict=True))
        return F.conv_transpose2d(
            input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups, self.dilation
        )

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Upsample(Module):
    """Resize the spatial dims with ``F.interpolate`` (``size`` or ``scale_factor``, ``mode``)."""

    def __init__(
        self,
        size: Any = None,
        scale_factor: Any = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.interpolate(
            input, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor
        )

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode='{self.mode}'"


class _Pool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode

    def _check(self, input: Tensor) -> None:  # noqa: A002
        if input.ndim not in (3, 4):
            raise self._bad_input("(N, C, H, W) or (C, H, W)", input)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool2d):
    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.dilation, self.return_indices = dilation, return_indices

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check(input)
        return F.max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + f", dilation={self.dilation}, ceil_mode={self.ceil_mode}"


class AvgPool2d(_Pool2d):
    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check(input)
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )
