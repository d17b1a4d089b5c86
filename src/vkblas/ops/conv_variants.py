"""``conv1d`` (``conv2d`` over a height of 1) and ``conv_transpose2d`` (the adjoint of ``conv2d``).

``conv_transpose2d`` is ``conv2d``'s backward with respect to its input: per group, ``cols = W^T @ x`` (one matmul
over the whole batch) then ``fold`` (col2im: each output pixel gathers the entries that land on it; deterministic,
no atomics). Both steps are differentiable ops, so the gradients need no rule of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tensor import Tensor
from .autocast import lower
from .conv import IntOr2, _fold, _pair, conv2d
from .conv import pad as _constant_pad


def _single(v: int | Sequence[int], name: str, op: str, minimum: int = 0) -> int:
    t = (v,) if isinstance(v, int) else tuple(v)
    if len(t) != 1 or not isinstance(t[0], int) or t[0] < minimum:
        raise ValueError(f"{op}: {name} must be an int >= {minimum} (or a 1-tuple of one), got {v!r}")
    return t[0]


def conv1d(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """1-D cross-correlation, ``torch.nn.functional.conv1d``: input (N, C, L) or (C, L), weight (O, C/groups, k)."""
    if input.ndim not in (2, 3):
        raise ValueError(f"conv1d: expected a 2-D (C, L) or 3-D (N, C, L) input, got shape {input.shape}")
    if weight.ndim != 3:
        raise ValueError(f"conv1d: weight must be 3-D (out_channels, in_channels/groups, k), got {weight.shape}")
    s = _single(stride, "stride", "conv1d", 1)
    d = _single(dilation, "dilation", "conv1d", 1)
    p: IntOr2 | str = padding if isinstance(padding, str) else (0, _single(padding, "padding", "conv1d"))
    out = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, (1, s), p, (1, d), groups)
    return out.squeeze(-2)


def conv_transpose2d(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOr2 = 1,
    padding: IntOr2 = 0,
    output_padding: IntOr2 = 0,
    groups: int = 1,
    dilation: IntOr2 = 1,
) -> Tensor:
    """Transposed 2-D convolution, ``torch.nn.functional.conv_transpose2d``: input (N, C_in, H, W) or
    (C_in, H, W), weight (C_in, C_out/groups, kh, kw); output size ``(H - 1) * stride - 2 * padding +
    dilation * (kh - 1) + output_padding + 1`` (likewise W)."""
    op = "conv_transpose2d"
    input, weight, bias = lower(op, input, weight, bias)  # noqa: A001 - under autocast: float16
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape {input.shape}")
    if weight.ndim != 4:
        raise ValueError(f"{op}: weight must be 4-D (in_channels, out_channels/groups, kh, kw), got {weight.shape}")
    n, c, h, w = x.shape
    cin, cg, kh, kw = weight.shape
    if groups < 1 or c != cin or c % groups:
        raise ValueError(
            f"{op}: input of shape {input.shape} needs {cin} channels (weight {weight.shape}) divisible by "
            f"groups={groups}"
        )
    s, p = _pair(stride, "stride", op, 1), _pair(padding, "padding", op)
    d, op_ = _pair(dilation, "dilation", op, 1), _pair(output_padding, "output_padding", op)
    if any(o >= max(si, di) for o, si, di in zip(op_, s, d, strict=True)):
        raise ValueError(f"{op}: output_padding {op_} must be smaller than either stride {s} or dilation {d}")
    oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op_[0] + 1
    ow = (w - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op_[1] + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"{op}: the output would be {oh} x {ow} for input {input.shape} and weight {weight.shape}")
    cout = cg * groups
    # per group: cols (N, C_out/g * kh * kw, H*W) = W_g^T (C_out/g * kh * kw, C_in/g) @ x_g (N, C_in/g, H*W)
    wg = weight.reshape(groups, cin // groups, cg * kh * kw).transpose(1, 2)
    xg = x.reshape(n, groups, cin // groups, h * w).permute(1, 0, 2, 3)  # (g, N, C_in/g, H*W)
    cols = wg.unsqueeze(1).matmul(xg)  # (g, N, C_out/g * kh * kw, H*W)
    cols = cols.permute(1, 0, 2, 3).reshape(n, cout * kh * kw, h * w)
    # fold onto the output padded by `padding` (plus output_padding at the bottom/right), then crop the padding
    full_hw = (oh + 2 * p[0], ow + 2 * p[1])
    grown = (full_hw[0] - op_[0], full_hw[1] - op_[1])  # fold's own windows cover all but the output_padding
    out = _fold(cols, grown, (kh, kw), s, (0, 0), d, op)
    if op_ != (0, 0):
        out = _constant_pad(out, (0, op_[1], 0, op_[0]))
    out = out[..., p[0] : p[0] + oh, p[1] : p[1] + ow]
    out = out + bias.reshape(1, cout, 1, 1) if bias is not None else out.contiguous()
    return out.squeeze(0) if unbatched else out
