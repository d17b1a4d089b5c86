"""``vkblas.nn.functional``: the stateless operations behind the layers and losses, with PyTorch's signatures.

Everything is composed from differentiable Tensor ops, so it runs and differentiates on every backend. Losses are
numerically stable: cross-entropy goes through ``log_softmax`` (log-sum-exp), BCE-with-logits through
``max(x, 0) - x*t + log(1 + exp(-|x|))``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..autograd import Node, is_grad_enabled, no_grad, record
from ..backend.base import View, numel
from ..backend.elementwise import define
from ..dtypes import bool_, float16, float32, float64, int32
from ..ops._core import cast
from ..ops._core import elementwise as _elementwise
from ..ops.attention import scaled_dot_product_attention
from ..ops.autocast import fp32, lower, refuse
from ..ops.conv import avg_pool2d, conv2d, max_pool2d, unfold
from ..ops.conv_variants import conv1d, conv_transpose2d
from ..ops.dropout import alpha_dropout, dropout, dropout1d, dropout2d, dropout3d, feature_alpha_dropout
from ..ops.indexing import check_index, gather_unchecked, one_hot, take_along
from ..ops.linalg import linear as _linear
from ..ops.norm import normalize_rows
from ..ops.padding import pad
from ..ops.parametric import celu, elu, hardtanh, softplus
from ..ops.pointwise import gelu, leaky_relu, where
from ..ops.reduction import _raw_reduce
from ..ops.reduction import log_softmax as _log_softmax
from ..ops.reduction import softmax as _softmax
from ..ops.resample import interpolate
from ..ops.unary_math import _hardsigmoid, _hardswish, _logsigmoid, _mish, _relu6, _softsign
from ..ops.unary_math import selu as _selu
from ..tensor import Tensor, empty

__all__ = [
    "alpha_dropout",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "celu",
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "cross_entropy",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "elu",
    "embedding",
    "feature_alpha_dropout",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "interpolate",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool2d",
    "mish",
    "mse_loss",
    "nll_loss",
    "normalize",
    "one_hot",
    "pad",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "softsign",
    "tanh",
    "unfold",
]


# ---------------------------------------------------------------- activations
def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return input.relu_() if inplace else input.relu()


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return input.tanh()


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return input.silu()


def softmax(input: Tensor, dim: int, dtype: object = None) -> Tensor:  # noqa: A002
    return _softmax(input, dim, dtype)


# parameter-free activations of ops/unary_math.py (``inplace`` is accepted and computes out of place)
def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _selu(input)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _mish(input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _hardswish(input)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _hardsigmoid(input)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _relu6(input)


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return _logsigmoid(input)


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    return _softsign(input)


def log_softmax(input: Tensor, dim: int, dtype: object = None) -> Tensor:  # noqa: A002
    return _log_softmax(input, dim, dtype)


# ---------------------------------------------------------------- layers
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias`` with input (*, in_features), weight (out_features, in_features); under autocast
    all three in float16."""
    input, weight, bias = lower("linear", input, weight, bias)  # noqa: A001
    if input.ndim == 0 or input.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"linear: input of shape {input.shape} does not match weight of shape {weight.shape} "
            f"(expected input of shape (*, {weight.shape[-1]}))"
        )
    return _linear(input, weight, bias)


def embedding(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` picked by the integer tensor ``input``; ``padding_idx`` rows get no gradient.
    ``max_norm`` renormalises (in place, as PyTorch does) the picked rows whose ``norm_type`` norm exceeds it;
    ``scale_grad_by_freq`` divides each row's gradient by how often the batch picks it."""
    if input.dtype.is_floating or input.dtype is bool_:
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype!r}")
    if sparse:
        raise NotImplementedError("embedding: sparse=True needs sparse gradients, which vkblas does not have")
    flat = input.reshape(-1)
    if max_norm is not None:
        _renorm_rows(weight, flat, float(max_norm), float(norm_type))
    out = weight.index_select(0, flat)
    if scale_grad_by_freq and out.requires_grad:
        counts = weight.new_zeros((weight.shape[0],)).index_add(0, flat, weight.new_ones(flat.shape))
        # the same values, with the gradient of each row divided by its count
        frozen = out.detach()
        out = frozen + (out - frozen) * (1.0 / counts.index_select(0, flat)).unsqueeze(-1)
    out = out.reshape(*input.shape, weight.shape[1])
    if padding_idx is not None and out.requires_grad:
        pad_rows = (input == padding_idx % weight.shape[0]).unsqueeze(-1)
        out = where(pad_rows, out.detach(), out)
    return out


def _renorm_rows(weight: Tensor, indices: Tensor, max_norm: float, norm_type: float) -> None:
    """``weight``'s rows named by ``indices`` scaled down to norm ``max_norm`` where above it (in place)."""
    with no_grad():
        norms = (weight.abs() ** norm_type).sum(-1) ** (1.0 / norm_type)
        picked = weight.new_zeros((weight.shape[0],)).index_fill(0, indices, 1.0)
        # divide by norm / max_norm rather than multiply by its reciprocal: for a row of norm ~1e38 the reciprocal
        # is a denormal, which GPUs flush to zero (the H200 gave a zero row where PyTorch gives norm max_norm)
        divisor = where((norms > max_norm) & (picked > 0), (norms + 1e-7) / max_norm, 1.0)
        weight.div_(divisor.unsqueeze(-1))


def normalize(
    input: Tensor,  # noqa: A002
    p: float = 2.0,
    dim: int = 1,
    eps: float = 1e-12,
    out: Tensor | None = None,
) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim``. The norm is clamped before the root (``max(s, eps^p)^(1/p)``,
    the same value), so a zero vector gets a finite gradient, as in PyTorch."""
    input = fp32(input)  # noqa: A001 - under autocast: float32
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    if p == 2.0:
        total = input.square().sum(dim, keepdim=True)
        denom = total.clamp(min=eps * eps).sqrt()
    else:
        total = (input.abs() ** p).sum(dim, keepdim=True)
        denom = total.clamp(min=eps**p) ** (1.0 / p)
    return input / denom


def _check_trailing(op: str, input: Tensor, normalized_shape: Sequence[int]) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.shape[input.ndim - len(shape) :] != shape or input.ndim < len(shape):
        raise ValueError(f"{op}: expected input with shape (*, {', '.join(map(str, shape))}), got {input.shape}")
    return tuple(range(input.ndim - len(shape), input.ndim))


def layer_norm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,  # noqa: A002
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``normalized_shape`` dims (biased
    variance); one fused node that keeps only the input, weight and per-row mean and rstd (``ops/norm.py``)."""
    dims = _check_trailing("layer_norm", input, normalized_shape)
    input, weight, bias = fp32(input), fp32(weight), fp32(bias)  # noqa: A001 - under autocast: float32
    return normalize_rows("layer_norm", input, dims, weight, bias, eps, center=True)


_EPS = {float16: 0.0009765625, float64: 2.220446049250313e-16}


def rms_norm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,  # noqa: A002
    eps: float | None = None,
) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight``; ``eps=None`` is the dtype's machine epsilon (PyTorch's default). The
    fused node of ``layer_norm`` without centring: it keeps the input, weight and per-row rstd."""
    dims = _check_trailing("rms_norm", input, normalized_shape)
    e = _EPS.get(input.dtype, 1.1920928955078125e-07) if eps is None else eps
    return normalize_rows("rms_norm", input, dims, weight, None, e, center=False)


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,  # noqa: A002
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over every dim but 1 (channels). In training, batch statistics are used and the running ones
    updated in place: ``running = (1 - momentum) * running + momentum * batch`` (unbiased variance)."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected input of shape (N, C, ...), got {input.shape}")
    c = input.shape[1]
    dims = (0, *range(2, input.ndim))
    bshape = (1, c) + (1,) * (input.ndim - 2)
    if training or running_mean is None:
        count = input.numel() // max(c, 1)
        if count <= 1 and training:
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got input of shape {input.shape}"
            )
        mean = input.mean(dims, keepdim=True)
        centered = input - mean
        var = centered.square().mean(dims, keepdim=True)
        if training and running_mean is not None and running_var is not None:
            with no_grad():
                running_mean.lerp_(mean.detach().reshape(c), momentum)
                running_var.lerp_(var.detach().reshape(c) * (count / (count - 1)), momentum)
    else:
        assert running_var is not None
        centered = input - running_mean.reshape(bshape)
        var = running_var.reshape(bshape)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(bshape)
    return out if bias is None else out + bias.reshape(bshape)


# ---------------------------------------------------------------- losses
_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_same_shape(op: str, input: Tensor, target: Tensor) -> None:  # noqa: A002
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: target must be a Tensor, got {type(target).__name__}")
    if input.shape != target.shape:
        raise ValueError(f"{op}: input shape {input.shape} and target shape {target.shape} must be equal")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    _check_reduction("mse_loss", reduction)
    _check_same_shape("mse_loss", input, target)
    input, target = fp32(input), fp32(target)  # noqa: A001 - under autocast: float32
    return _reduce((input - target).square(), reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    _check_reduction("l1_loss", reduction)
    _check_same_shape("l1_loss", input, target)
    input, target = fp32(input), fp32(target)  # noqa: A001 - under autocast: float32
    return _reduce((input - target).abs(), reduction)


def _rows(op: str, x: Tensor) -> Tensor:
    """(N, C, d1, ...) -> (N*d1*..., C): the class dim last, one row per prediction."""
    if x.ndim == 2:
        return x
    rows = x.shape[0] * numel(x.shape[2:])  # not -1: x may have no elements
    return x.permute(0, *range(2, x.ndim), 1).reshape(rows, x.shape[1])


def _nll_rows(
    op: str,
    logp: Tensor,
    input_shape: tuple[int, ...],
    target: Tensor,
    weight: Tensor | None,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
) -> Tensor:
    """Negative log-likelihood of class indices over rows of log-probabilities (M, C), weighted, with ignored
    targets and label smoothing as PyTorch defines them."""
    n_classes = logp.shape[1]
    want = input_shape[:1] + input_shape[2:]
    if target.shape != want:
        raise ValueError(f"{op}: expected target of shape {want} for input of shape {input_shape}, got {target.shape}")
    if target.dtype is bool_:
        raise TypeError(f"{op}: class-index targets must be integers, got {target.dtype!r}")
    flat = target.reshape(-1)
    ignored = flat == ignore_index
    safe = where(ignored, 0, flat)
    check_index(  # of the target itself, ignore_index allowed: the check keeps no tensor of the step alive
        flat,
        0,
        n_classes,
        f"{op}: target class index {{bad}} is out of range for {n_classes} classes "
        f"(input shape {input_shape}; valid targets are 0..{n_classes - 1} or ignore_index={ignore_index})",
        allow=ignore_index if -(2**31) <= ignore_index < 2**31 else None,
    )
    safe = safe.to(int32)
    keep = (~ignored).to(logp.dtype)
    w = keep if weight is None else take_along(weight, 0, safe) * keep
    loss = -gather_unchecked(logp, 1, safe.unsqueeze(1)).squeeze(1) * w
    if label_smoothing > 0:
        per_class = logp if weight is None else logp * weight
        smooth = -per_class.sum(1) * keep
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / n_classes)
    if reduction == "none":
        return loss.reshape(want)
    return loss.sum() if reduction == "sum" else loss.sum() / w.sum()


def _check_weight(op: str, weight: Tensor | None, n_classes: int) -> None:
    if weight is not None and weight.shape != (n_classes,):
        raise ValueError(f"{op}: weight must have shape ({n_classes},) (one per class), got {weight.shape}")


def _classes_first(op: str, input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:  # noqa: A002
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: target must be a Tensor, got {type(target).__name__}")
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have a class dimension, got a 0-d tensor")
    if input.ndim == 1:  # a single unbatched prediction
        return input.unsqueeze(0), target.unsqueeze(0)
    return input, target


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,  # noqa: A002
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits ``input`` (N, C, ...) against class indices (N, ...) or class probabilities of the
    input's shape. Computed from ``log_softmax`` (log-sum-exp), so large logits do not overflow."""
    _check_reduction("cross_entropy", reduction)
    input, target, weight = fp32(input), fp32(target), fp32(weight)  # noqa: A001 - under autocast: float32
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    unbatched = input.ndim == 1
    x, t = _classes_first("cross_entropy", input, target)
    n_classes = x.shape[1]
    _check_weight("cross_entropy", weight, n_classes)
    if t.dtype.is_floating:  # class probabilities
        logp = _rows("cross_entropy", x.log_softmax(1))
        if t.shape != x.shape:
            raise ValueError(
                f"cross_entropy: probability targets must have the input's shape {input.shape}, got {target.shape}"
            )
        probs = _rows("cross_entropy", t)
        if label_smoothing > 0:
            probs = probs * (1 - label_smoothing) + label_smoothing / n_classes
        terms = logp * probs if weight is None else logp * probs * weight
        loss = -terms.sum(1)
        if reduction == "none":
            return (
                loss.reshape(x.shape[:1] + x.shape[2:]).squeeze(0)
                if unbatched
                else loss.reshape(x.shape[:1] + x.shape[2:])
            )
        return loss.sum() if reduction == "sum" else loss.mean()
    out = _fused_cross_entropy(x, t, weight, ignore_index, reduction, label_smoothing)
    return out.squeeze(0) if unbatched and reduction == "none" else out


# fused cross-entropy of class indices, per row i of logits x (M, C): lse_i = log(sum_c exp(x_ic)), k_i = 1 unless
# the target is ignored, wk_i = k_i * weight[t_i]; with a = 1 - label_smoothing, c = label_smoothing / C and W the
# sum of the class weights, loss_i = -(a * wk_i * (x_it - lse_i)) + c * k_i * (W * lse_i - sum_c weight_c * x_ic)
# (the negated log-probability, as PyTorch's nll: a certain prediction's loss is -0)
define("ce_lse", lambda m, mx, s: mx + m.log(s))
define("ce_safe", lambda m, t, ii: m.where(t == ii, 0, t))
define("ce_keep", lambda m, t, ii: m.where(t == ii, 0, 1))
define(
    "ce_row",
    lambda m, lse, pk, wk, keep, sxw, w_sum, a, c: m.where(
        keep > 0, -(a * wk * (pk - lse)) + c * (w_sum * lse - sxw), 0
    ),
)


# d loss_i / d x_ic = k_i * (softmax_ic * (a * wk_i + c * W) - c * weight_c) - a * wk_i * [c == t_i] (the one-hot
# part is a scatter of ce_onehot's column); g / den is the incoming gradient over the mean's denominator. An ignored
# row's gradient is softmax * 0, NaN where its logits are NaN or inf (as PyTorch's log_softmax backward gives it)
def _ce_grad(m: object, x: object, lse: object, gd: object, wk: object, wc: object, w_sum: object, a: float, c: float):
    """``ce_grad`` with ``gd`` = g / den on kept rows, 0 on ignored ones (whose 0 / 0 mean must not reach them)."""
    return m.exp(x - lse) * (gd * (a * wk + c * w_sum)) - gd * c * wc  # type: ignore[attr-defined, operator]


define(
    "ce_grad",
    lambda m, x, lse, g, den, wk, keep, wc, w_sum, a, c: _ce_grad(
        m, x, lse, m.where(keep > 0, g / den, 0), wk, wc, w_sum, a, c
    ),
)
define("ce_onehot", lambda m, g, den, wk, keep, a: m.where(keep > 0, -(g / den) * (a * wk), 0))


def _fused_cross_entropy(
    x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str, label_smoothing: float
) -> Tensor:
    """Cross-entropy of class indices as one node that keeps the per-row log-sum-exp (not the log-probabilities).
    On a backend with the ``cross_entropy`` primitive: forward one dispatch for the rows' losses (plus the target
    check and the reduction), backward one for ``(softmax - onehot) * scale``; elsewhere (or beyond a Vulkan
    binding) the same node from reductions, a gather, elementwise formulas and a scatter of the one-hot term."""
    op = "cross_entropy"
    shape = x.shape
    n_classes = shape[1]
    want = shape[:1] + shape[2:]
    if target.shape != want:
        raise ValueError(f"{op}: expected target of shape {want} for input of shape {shape}, got {target.shape}")
    if target.dtype is bool_:
        raise TypeError(f"{op}: class-index targets must be integers, got {target.dtype!r}")
    if weight is not None and weight.requires_grad and is_grad_enabled():
        raise RuntimeError(
            f"{op}: not differentiable with respect to the class weight (PyTorch's rule); pass weight.detach()"
        )
    rows = _rows(op, x)  # differentiable: the node's input
    xr = rows.detach()
    backend = xr._backend
    m = xr.shape[0]
    flat = target.reshape(-1)
    a, c = 1.0 - label_smoothing, label_smoothing / max(n_classes, 1)
    sdt = float64 if xr.dtype is float64 else float32
    with no_grad():
        small_ii = -(2**31) <= ignore_index < 2**31
        # with ignore_index -1 (nanoGPT's) the valid targets are one interval; otherwise ignore_index is allowed
        # besides it (the check keeps the target itself, no masked copy: see device_checks.Check)
        adjacent = ignore_index == -1
        check_index(
            flat,
            -1 if adjacent else 0,
            n_classes,
            f"{op}: target class index {{bad}} is out of range for {n_classes} classes "
            f"(input shape {shape}; valid targets are 0..{n_classes - 1} or ignore_index={ignore_index})",
            allow=ignore_index if small_ii and not adjacent else None,
        )
        tgt = flat if flat.dtype is int32 else flat.to(int32)
        wd = None if weight is None else weight.detach().to(xr.dtype)
        wv = None if wd is None else wd._view
        # each row's loss and weight side by side (when of one dtype): one reduction sums both for the mean
        paired = xr.dtype is sdt
        pair = empty((m, 2), sdt, backend) if paired else None
        if pair is not None:  # its columns (pair[:, 0], pair[:, 1]) as views, without the indexing machinery
            row = Tensor._make(View(pair._view.storage, (m,), (2,), 0), backend)
            wk = Tensor._make(View(pair._view.storage, (m,), (2,), 1), backend)
        else:
            row, wk = empty((m,), xr.dtype, backend), empty((m,), sdt, backend)
        lse = empty((m,), sdt, backend)
        fused = small_ii and xr.numel() > 0
        # the mean and its denominator in the same pass where the backend can (a small batch): (mean, den)
        total = empty((2,), sdt, backend) if fused and pair is not None and reduction == "mean" else None
        args = (row._view, lse._view, wk._view, xr._view, tgt._view, wv, ignore_index, label_smoothing)
        if total is not None and not backend.cross_entropy(*args, total._view):
            total = None
        fused = fused and (total is not None or backend.cross_entropy(*args))
        composed: list[Tensor] = []  # (index, keep) of the composition, made when it runs

        def composition_rows() -> list[Tensor]:
            if not composed:
                masked = _elementwise("ce_safe", flat, ignore_index) if small_ii else flat
                index = masked.to(int32).unsqueeze(1)
                keep = _elementwise("ce_keep", flat, ignore_index, out_dtype=xr.dtype).unsqueeze(1)
                composed.extend((index, keep))
            return composed

        if not fused:
            index, keep = composition_rows()
            wkc = keep if wd is None else take_along(wd, 0, index.squeeze(1)).unsqueeze(1) * keep
            if xr.numel():
                mx = xr.amax(1, keepdim=True)
                lse = _elementwise("ce_lse", mx, _elementwise("exp_sub", xr, mx).sum(1, keepdim=True))
                picked = gather_unchecked(xr, 1, index)
            else:  # no rows (or no classes: PyTorch refuses those in the index check above)
                lse = picked = xr.new_zeros((m, 1))
            if label_smoothing > 0:
                sxw = (xr if wd is None else xr * wd).sum(1, keepdim=True)
                w_sum: Tensor | float = float(n_classes) if wd is None else wd.sum()
                row = _elementwise("ce_row", lse, picked, wkc, keep, sxw, w_sum, a, c)
            else:
                row = _elementwise("ce_row", lse, picked, wkc, keep, 0.0, 0.0, a, 0.0)
            row, lse, wk = row.reshape(m), lse.reshape(m), wkc.reshape(m)
        if reduction == "none":
            out, den = row.reshape(want), None
        elif reduction == "sum":
            out, den = row.sum(), None
        elif total is not None:
            out = Tensor._make(View(total._view.storage, (), (), 0), backend)
            den = Tensor._make(View(total._view.storage, (), (), 1), backend)
        elif fused and pair is not None:
            sums = _raw_reduce("sum", pair, (0,), False)._view  # (loss sum, weight sum): their 0-d views
            den = Tensor._make(View(sums.storage, (), (), 1), backend)
            out = _elementwise("div", Tensor._make(View(sums.storage, (), (), 0), backend), den)
        else:
            den = cast(wk.sum(), xr.dtype)
            out = row.sum() / den

    def rule(node: Node, g: Tensor) -> tuple[Tensor]:
        grad = empty((m, n_classes), xr.dtype, backend)
        if not grad.numel():
            return (grad,)

        def shared(t: Tensor) -> View:  # one value for every row: a stride-0 view
            return View(t._view.storage, (m,), (0,), t._view.offset) if not t.ndim else t._view

        # the mean's division in the kernel, where the backend does it (one dispatch fewer)
        if (
            small_ii
            and den is not None
            and g.dtype is den.dtype
            and backend.cross_entropy_backward(
                grad._view, shared(g), xr._view, tgt._view, lse._view, wv, ignore_index, label_smoothing, den._view
            )
        ):
            return (grad,)
        scale = g.reshape(m) if reduction == "none" else g if den is None else g / den
        if small_ii and backend.cross_entropy_backward(
            grad._view, shared(scale), xr._view, tgt._view, lse._view, wv, ignore_index, label_smoothing
        ):
            return (grad,)
        index, keep = composition_rows()
        gs = scale.reshape(m, 1) if scale.ndim else scale
        wkc = wk.reshape(m, 1)
        wc: Tensor | float = 1.0 if wd is None else wd
        w_sum = float(n_classes) if wd is None else wd.sum()
        grad = _elementwise("ce_grad", xr, lse.reshape(m, 1), gs, 1.0, wkc, keep, wc, w_sum, a, c)
        onehot = _elementwise("ce_onehot", gs, 1.0, wkc, keep, a)
        backend.scatter("sum", grad._view, 1, index._view, onehot._view)
        return (grad,)

    return record(out, "NllLossBackward0", (rows,), rule, (rows,))


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,  # noqa: A002
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of log-probabilities ``input`` (N, C, ...) at class indices ``target`` (N, ...)."""
    _check_reduction("nll_loss", reduction)
    input, weight = fp32(input), fp32(weight)  # noqa: A001 - under autocast: float32
    unbatched = input.ndim == 1
    x, t = _classes_first("nll_loss", input, target)
    _check_weight("nll_loss", weight, x.shape[1])
    if t.dtype.is_floating:
        raise TypeError(f"nll_loss: target must hold integer class indices, got {t.dtype!r}")
    out = _nll_rows("nll_loss", _rows("nll_loss", x), x.shape, t, weight, ignore_index, reduction, 0.0)
    return out.squeeze(0) if unbatched and reduction == "none" else out


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,  # noqa: A002
    reduction: str = "mean",
) -> Tensor:
    """``-(t log x + (1 - t) log(1 - x))`` of probabilities ``input``; the logs are clamped at -100 and the
    gradient's denominator ``x (1 - x)`` at 1e-12, as in PyTorch. Inputs or targets outside [0, 1] (NaN included)
    raise RuntimeError as in PyTorch: at once on the cpu, at the next sync point on a Vulkan device (a device-side
    check, as CUDA's assert; no host round trip per step)."""
    _check_reduction("binary_cross_entropy", reduction)
    refuse("binary_cross_entropy", input, target)
    _check_same_shape("binary_cross_entropy", input, target)
    for name, t in (("input", input), ("target", target)):
        if t.numel():
            t._backend.check_values(
                t._view,
                0.0,
                1.0,
                f"binary_cross_entropy: all elements of {name} should be between 0 and 1 (found {{bad}})",
                RuntimeError,
            )
    with no_grad():
        log_x, log_1mx = input.log().clamp(min=-100), (1 - input).log().clamp(min=-100)
        loss = -(target * log_x + (1 - target) * log_1mx)

    def rule(n: Node, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, t, lx, l1 = n.saved
        gx = g * (x - t) / ((1 - x) * x).clamp(min=1e-12) if n.needs[0] else None
        return gx, (g * (l1 - lx) if n.needs[1] else None)

    loss = record(loss, "BinaryCrossEntropyBackward", (input, target), rule, (input, target, log_x, log_1mx))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,  # noqa: A002
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """BCE of ``sigmoid(input)`` computed stably: ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)`` with
    ``softplus(-x) = log(1 + exp(-|x|)) + max(-x, 0)``."""
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    input, target, weight, pos_weight = (fp32(t) for t in (input, target, weight, pos_weight))  # noqa: A001
    _check_same_shape("binary_cross_entropy_with_logits", input, target)
    softplus_neg = (1 + (-input.abs()).exp()).log() + (-input).relu()
    scale = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input + softplus_neg * scale
    return _reduce(loss if weight is None else loss * weight, reduction)
