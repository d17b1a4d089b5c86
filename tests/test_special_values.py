"""Every op of the table on NaN, ±inf, ±0 and large magnitudes, against PyTorch on every device.

Each sample of an op's OpInfo is run again with its float arrays filled from ``SPECIALS`` (cycled with a phase per
argument, so binary ops meet many pairs), and with its positional Python floats replaced by NaN, inf and -0. The
op's own callable runs in vkblas and, with ``vkblas`` swapped for ``torch`` (``torch_bridge.py``), in PyTorch, in
float64 on cpu and float32 on Vulkan. Compared: raising or not, shapes, NaN positions, infinities, the sign of
zeros, then values; and, for differentiable ops, the gradients of the sum of the outputs the same way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, require_torch
from op_table import OPS, OpInfo, Sample
from torch_bridge import as_torch, to_torch, torch_float

INF, NAN = math.inf, math.nan
#: 13 values (a prime, so arguments cycled with different phases meet in many pairs). Large finite values of
#: opposite sign differ in magnitude, so sums do not cancel to an order-dependent result.
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 3e38, -1e30, 1e-30, 1e6, -12345.678, 88.75, 2.5, -0.5]
#: no PyTorch counterpart to compare with (random streams are vkblas's own; ``to`` takes vkblas dtypes)
SKIP = {"uniform_", "uniform_ (bounds)", "normal_", "bernoulli_", "to", "split"}
#: dropout masks come from vkblas's generator: compared in ``test_dropout_special_values_match_torch``, with
#: PyTorch's dropout formula applied to the same mask, keyed by the mask's shape for an input shape
DROPOUT_MASKS = {
    "dropout": lambda s: s,
    "dropout1d": lambda s: s[:-1] + (1,),
    "dropout2d": lambda s: s[:2] + (1, 1),
    "dropout3d": lambda s: s[:2] + (1, 1, 1),
    "alpha_dropout": lambda s: s,
    "feature_alpha_dropout": lambda s: s[:2] + (1,) * (len(s) - 2),
}
#: between -0 and 0 of a window max, PyTorch's pooling kernel picks another one than its own max reduction does
NO_ZERO_SIGN = {"max_pool2d"}


def _has_floats(info: OpInfo) -> bool:
    """Ops of integers and bools (their samples hold the integer extremes instead), and entries of empty tensors
    only, have nothing to replace."""
    return any(
        (isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size) or type(a) is float
        for s in info.sample_list()
        for a in s.args
    )


COMPARED = [info for info in OPS if info.name not in SKIP and info.name not in DROPOUT_MASKS and _has_floats(info)]


#: on a float32 device, ops that sum products (matmul, conv) or squares (var, atan2's gradient), fuse a
#: multiply-add (add with alpha), order their products differently (gelu) or accumulate products (cumprod: PyTorch's
#: CPU kernel in float64, a GPU's in float32): the huge and tiny finite values become moderate ones, since where
#: such terms overflow, underflow or cancel depends on each library's order of operations, not on semantics
OVERFLOW_PRONE = {
    *("matmul", "matmul (operator @)", "mm", "bmm", "conv2d", "var", "std", "addcmul_", "add (alpha)", "gelu"),
    *("atan2", "conv1d", "conv_transpose2d", "cumprod", "cumprod (zeros)"),
    "einsum",  # batched matmuls (PyTorch's contraction order: torch_bridge.py)
    # the squared deviations overflow (two passes, as vkblas's) or PyTorch's Welford updates do (inf - inf)
    "layer_norm",
    "rms_norm",
}
#: PyTorch's vectorised float32 gelu gives NaN at +inf (its float64 and scalar paths, and the definition, give inf)
NO_INF = {"gelu"}
#: PyTorch's prod gradient depends on whether any element of the whole tensor is 0; compared on finite inputs only
GRAD_FINITE_ONLY = {"prod"}
#: PyTorch's gradient at a NaN input depends on the tensor's length (its scalar kernel, for short tensors, and its
#: vectorised one disagree; README "Differences"): compared everywhere else
GRAD_AT_NAN_BY_LENGTH = {"elu", "selu", "celu", "hardswish", "hardtanh", "relu6"}


def specials_for(info: OpInfo, float32: bool) -> list[float]:
    values = SPECIALS
    if float32 and info.name in OVERFLOW_PRONE:
        values = [v if abs(v) <= 1e6 or math.isinf(v) else math.copysign(3e4, v) for v in values]
        values = [v if v == 0 or abs(v) >= 1e-3 else 1e-3 for v in values]
    if info.name in NO_INF:
        values = [-1e4 if v == INF else v for v in values]
    return values


def special_samples(info: OpInfo, float32: bool = False) -> list[Sample]:
    specials = specials_for(info, float32)
    out = []
    for sample in info.sample_list():
        arrays = [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size]
        if arrays:
            args = list(sample.args)
            for k, i in enumerate(arrays):
                a = args[i]
                args[i] = np.array([specials[(j + 5 * k) % len(specials)] for j in range(a.size)]).reshape(a.shape)
            out.append(Sample(tuple(args), sample.kwargs))
        floats = [i for i, a in enumerate(sample.args) if type(a) is float]
        for value in (NAN, INF, -0.0) if floats else ():
            args = [value if i in floats else a for i, a in enumerate(sample.args)]
            out.append(Sample(tuple(args), sample.kwargs))
    return out


def _arrays(out: Any) -> list[np.ndarray]:
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _arrays(o)]
    if hasattr(out, "detach"):
        return [np.asarray(out.detach().cpu().numpy() if hasattr(out, "cpu") else out.detach().numpy())]
    return [np.asarray(out)]


def assert_same(got: np.ndarray, want: np.ndarray, what: str, rtol: float, atol: float, signs: bool = True) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs PyTorch {want.shape}"
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    finite = np.isfinite(want) & np.isfinite(got)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)], err_msg=what)
    zero = finite & (got == 0) & (want == 0) & signs
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{what}: signed zeros")
    if finite.any() and rtol > 1e-6:  # float32: an absolute error at the rounding level of the largest result
        atol = max(atol, 1e-6 * float(np.abs(want[finite]).max()))
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=what)


def _run_vkblas(info: OpInfo, sample: Sample, device: str, grad: bool) -> tuple[list[Any], list[Any]]:
    leaves = [
        vb.tensor(a, dtype=float_dtype(device) if a.dtype.kind == "f" else None, device=device, requires_grad=grad)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f"
        else vb.tensor(a, device=device)
        if isinstance(a, np.ndarray)
        else a
        for a in sample.args
    ]
    out = info.op(*leaves, **sample.kwargs)
    vb.synchronize(device)  # device-side checks report here
    return leaves, list(out) if isinstance(out, (tuple, list)) else [out]


def _run_torch(fn: Any, sample: Sample, torch: Any, fdt: Any, grad: bool) -> tuple[list[Any], list[Any]]:
    leaves = [to_torch(a, torch, fdt) for a in sample.args]
    if grad:
        for t in leaves:
            if hasattr(t, "requires_grad") and t.dtype.is_floating_point:
                t.requires_grad_(True)
    out = fn(*leaves, **sample.kwargs)
    return leaves, list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.filterwarnings("ignore")  # PyTorch warns of var with no degrees of freedom and the like
@pytest.mark.parametrize("info", COMPARED, ids=lambda i: i.name)
def test_special_values_match_torch(info: OpInfo, device: str) -> None:
    torch = require_torch()
    fn = as_torch(info.op, torch)
    assert fn is not None, f"{info.name}: no PyTorch counterpart; add one to torch_bridge.py or to SKIP"
    fdt = torch_float(device, torch)
    if fdt is torch.float64:
        tol = {"rtol": max(info.rtol, 1e-9), "atol": max(info.atol, 1e-12)}
    else:
        tol = {"rtol": max(info.rtol32, 3e-5), "atol": max(info.atol32, 2e-6)}
    samples = special_samples(info, float32=fdt is torch.float32)
    assert samples, f"{info.name}: no sample has a float to replace"
    for sample in samples:
        what = f"{info.name}{sample.describe()} on {device}"
        grad = info.differentiable
        try:
            t_leaves, t_out = _run_torch(fn, sample, torch, fdt, grad)
        except TypeError:
            continue  # PyTorch's signature takes no Python number there (vkblas does): nothing to compare
        except Exception:  # noqa: BLE001 - PyTorch refuses these values: so must vkblas
            with pytest.raises(Exception):  # noqa: B017
                _run_vkblas(info, sample, device, grad)
            continue
        v_leaves, v_out = _run_vkblas(info, sample, device, grad)
        assert len(v_out) == len(t_out), what
        signs = info.name not in NO_ZERO_SIGN
        for g, w in zip(v_out, t_out, strict=True):
            for ga, wa in zip(_arrays(g), _arrays(w), strict=True):
                assert_same(ga, wa, what, signs=signs, **tol)
        finite = all(np.isfinite(a).all() for a in sample.args if isinstance(a, np.ndarray) and a.dtype.kind == "f")
        if grad and (finite or info.name not in GRAD_FINITE_ONLY):
            _compare_grads(v_leaves, v_out, t_leaves, t_out, what, tol, torch, info.name in GRAD_AT_NAN_BY_LENGTH)


def _compare_grads(
    v_leaves: list[Any],
    v_out: list[Any],
    t_leaves: list[Any],
    t_out: list[Any],
    what: str,
    tol: dict[str, float],
    torch: Any,
    skip_nan_inputs: bool = False,
) -> None:
    t_total = sum(o.sum() for o in t_out if getattr(o, "requires_grad", False))
    if not isinstance(t_total, torch.Tensor):
        return
    try:
        t_total.backward()
    except RuntimeError:
        return  # PyTorch cannot differentiate this case (scatter_add with src larger than index)
    v_total = None
    for o in v_out:
        if getattr(o, "requires_grad", False):
            v_total = o.sum() if v_total is None else v_total + o.sum()
    assert v_total is not None, f"{what}: PyTorch's output requires grad, vkblas's does not"
    v_total.backward()
    for i, (v, t) in enumerate(zip(v_leaves, t_leaves, strict=True)):
        if getattr(t, "grad", None) is None:
            continue
        got = v.grad.numpy() if v.grad is not None else np.zeros(tuple(t.shape))
        want = t.grad.numpy()
        if skip_nan_inputs:
            nan = np.isnan(t.detach().numpy())
            got, want = np.where(nan, 0.0, got), np.where(nan, 0.0, want)
        assert_same(got, want, f"{what}: gradient of argument {i}", **tol)


def _torch_dropout(x: Any, keep: np.ndarray, p: float, alpha: bool, torch: Any) -> Any:
    """PyTorch's ``_dropout_impl`` with its Bernoulli noise replaced by ``keep``: ``input * noise`` (alpha
    dropout: ``input * (a * noise) + ((noise - 1) * alpha * a + alpha * a * p)``)."""
    noise = torch.tensor(keep.astype(np.float64), dtype=x.dtype)
    if not alpha:
        return x * (noise / (1 - p))
    alpha_ = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha_**2 * p + 1) * (1 - p))
    return x * (noise * a) + ((noise - 1) * (alpha_ * a) + alpha_ * a * p)


@pytest.mark.parametrize("name", sorted(DROPOUT_MASKS))
def test_dropout_special_values_match_torch(name: str, device: str) -> None:
    """The dropout family on NaN, ±inf, ±0 and huge values against PyTorch's formula on vkblas's mask (the
    op table's entries draw with ``Generator(11)``, whose numbers ``references.pcg_uniform`` gives)."""
    torch = require_torch()
    from op_table import BY_NAME
    from references import pcg_uniform

    info = BY_NAME[name]
    fdt = torch_float(device, torch)
    tol = {"rtol": 1e-9, "atol": 1e-12} if fdt is torch.float64 else {"rtol": 3e-5, "atol": 2e-6}
    for sample in special_samples(info, float32=fdt is torch.float32):
        x, p = sample.args[0], sample.kwargs["p"]
        what = f"{name}{sample.describe()} on {device}"
        keep = pcg_uniform(DROPOUT_MASKS[name](x.shape), 11) >= p
        (v_x,), (v_out,) = _run_vkblas(info, sample, device, True)
        t_x = torch.tensor(x, dtype=fdt, requires_grad=True)
        t_out = _torch_dropout(t_x, keep, p, "alpha" in name, torch)
        assert_same(v_out.detach().numpy(), t_out.detach().numpy(), what, **tol)
        _compare_grads([v_x], [v_out], [t_x], [t_out], what, tol, torch)
