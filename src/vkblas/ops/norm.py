"""Layer and RMS normalisation as one autograd node over the backend's ``layer_norm`` primitive (backend/base.py).

The node keeps what PyTorch keeps: the input, the weight and the per-row mean and rstd (float32; float64 for
float64 inputs), not the centred or normalised input. Forward is one dispatch and the input gradient one more on a
backend with the primitive; the weight's and bias's gradients are column sums (``reduce``). A backend without the
primitive, or a Vulkan tensor larger than one binding, gets the same node composed from ``elementwise`` and
``reduce`` (a few more dispatches, the same saved tensors).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..autograd import Node, record
from ..backend.base import numel
from ..backend.elementwise import define
from ..dtypes import DType, float32, float64
from ..tensor import Tensor, empty
from ._core import cast, elementwise, same_backend
from .reduction import _raw_reduce

# the composition (rows of x reduced by the caller; mu is 0.0 for RMS normalisation, w 1.0 and b 0.0 when absent)
define("ln_sqdev", lambda m, x, mu: (x - mu) * (x - mu))
define("ln_rstd", lambda m, s, n, eps: 1.0 / m.sqrt(s / n + eps))
define("ln_out", lambda m, x, mu, r, w, b: (x - mu) * r * w + b)
define("ln_h_xhat", lambda m, g, w, x, mu, r: g * w * ((x - mu) * r))
define("ln_dx", lambda m, g, w, x, mu, r, mh, mhx, n: r * (g * w - mh / n - (x - mu) * r * (mhx / n)))
define("ln_dweight", lambda m, g, x, mu, r: g * ((x - mu) * r))


def stats_dtype(x: Tensor) -> DType:
    """The statistics' dtype: float32 (float16 inputs too), float64 for float64."""
    return float64 if x.dtype is float64 else float32


def _compose_forward(
    x: Tensor, w: Tensor | None, b: Tensor | None, eps: float, center: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """(out, mean or None, rstd (R, 1)) of the (R, N) ``x`` from ``reduce`` and ``elementwise``."""
    n = x.shape[1]
    xs = cast(x, stats_dtype(x))
    mu = elementwise("div", _raw_reduce("sum", xs, (1,), True), float(n)) if center else None
    sq = elementwise("ln_sqdev", xs, 0.0 if mu is None else mu)
    rstd = elementwise("ln_rstd", _raw_reduce("sum", sq, (1,), True), float(n), float(eps))
    out = elementwise("ln_out", xs, 0.0 if mu is None else mu, rstd, 1.0 if w is None else w, 0.0 if b is None else b)
    return cast(out, x.dtype), mu, rstd


def _compose_dx(g: Tensor, x: Tensor, w: Tensor | None, mu: Tensor | None, rstd: Tensor) -> Tensor:
    n = x.shape[1]
    m0, wv = 0.0 if mu is None else mu, 1.0 if w is None else w
    mhx = _raw_reduce("sum", elementwise("ln_h_xhat", g, wv, x, m0, rstd, dtype=rstd.dtype), (1,), True)
    if mu is None:
        mh: Tensor | float = 0.0
    else:
        h = g if w is None else elementwise("mul", g, w, dtype=rstd.dtype)
        mh = _raw_reduce("sum", cast(h, rstd.dtype), (1,), True)
    return elementwise("ln_dx", g, wv, x, m0, rstd, mh, mhx, float(n), dtype=rstd.dtype, out_dtype=x.dtype)


def normalize_rows(
    op: str,
    input: Tensor,  # noqa: A002
    dims: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    center: bool,
) -> Tensor:
    """``(x - mean) * rstd * weight + bias`` over the trailing ``dims`` (``center=False``: RMS normalisation,
    ``x * rstd * weight``), one node saving (input, weight, mean, rstd)."""
    if not input.dtype.is_floating:
        raise TypeError(f"{op}: expected a floating-point input, got {input.dtype!r} of shape {input.shape}")
    nshape = input.shape[input.ndim - len(dims) :]
    n = numel(nshape)
    rows = numel(input.shape[: input.ndim - len(dims)])
    backend = same_backend(op, [t for t in (input, weight, bias) if t is not None])
    params = []
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            params.append(None)
            continue
        if p.dtype is not input.dtype:
            raise TypeError(f"{op}: expected {name} of the input's dtype {input.dtype!r}, got {p.dtype!r}")
        try:
            full = p if p.shape == nshape else p.expand(*nshape)
        except (RuntimeError, ValueError) as e:
            raise RuntimeError(
                f"{op}: {name} of shape {p.shape} does not broadcast to normalized_shape {nshape} (input {input.shape})"
            ) from e
        if full.shape != nshape:
            raise RuntimeError(f"{op}: {name} of shape {p.shape} must broadcast to normalized_shape {nshape}")
        params.append(full.reshape(n))
    w, b = params
    x2 = input.detach().reshape(rows, n)
    wd, bd = (None if p is None else p.detach() for p in (w, b))
    sdt = stats_dtype(input)
    out = empty((rows, n), input.dtype, backend)
    mean = empty((rows,), sdt, backend) if center else None
    rstd = empty((rows,), sdt, backend)
    views = [None if t is None else t._view for t in (out, mean, rstd, x2, wd, bd)]
    fused = not out.numel() or backend.layer_norm(*views, float(eps))  # type: ignore[arg-type]
    if not fused:
        out, m2, r2 = _compose_forward(x2, wd, bd, eps, center)
        mean, rstd = None if m2 is None else m2.reshape(rows), r2.reshape(rows)
    result = out.reshape(input.shape)

    def rule(node: Node, g: Tensor) -> tuple[Tensor | None, ...]:
        g2 = g.reshape(rows, n)
        dx = dw = db = None
        mu_col = None if mean is None else mean.reshape(rows, 1)
        r_col = rstd.reshape(rows, 1)
        if node.needs[0]:
            dx = empty((rows, n), input.dtype, backend)
            mv = None if mean is None else mean._view
            if dx.numel() and not backend.layer_norm_backward(
                dx._view, g2._view, x2._view, None if wd is None else wd._view, mv, rstd._view
            ):
                dx = _compose_dx(g2, x2, wd, mu_col, r_col)
            dx = dx.reshape(input.shape)
        if w is not None and node.needs[1]:
            prod = elementwise("ln_dweight", g2, x2, 0.0 if mu_col is None else mu_col, r_col, dtype=sdt)
            dw = cast(_raw_reduce("sum", prod, (0,), False), input.dtype)
        if b is not None and node.needs[2]:
            db = _raw_reduce("sum", g2, (0,), False)
        return dx, dw, db

    name = "NativeLayerNormBackward" if center else "RmsNormBackward"
    return record(result, name, (input, w, b), rule, (input,) + tuple(t for t in (w,) if t is not None))
