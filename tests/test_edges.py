"""The edges of the tensor model, against PyTorch: 0-d tensors with dim=0/-1, reductions over empty dims, gather with
a small index, scalar ** tensor, integer tensors (bitwise, //, %, pow), in-place result types, ``axis=``, indices
from the cpu or a list, matmul dtypes. Each case is one expression run in both frameworks (``m`` is the module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import require_torch


def _values(out: Any) -> list[Any]:
    """The results of a case as numpy arrays (a tuple of tensors or a (values, indices) pair flattened)."""
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _values(o)]
    return [np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out)]


def _dtype_name(out: Any) -> str:
    name = str(out.dtype).split(".")[-1]
    return {"int64": "int", "int32": "int", "float64": "float", "float32": "float", "bool": "bool"}[name]


SCALAR = 2.5
# (name, expression of m and the tensor constructor t)
CASES: dict[str, Callable[[Any, Callable[..., Any]], Any]] = {
    # 0-d tensors take dim 0 and -1
    "0-d sum(0)": lambda m, t: t(SCALAR).sum(0),
    "0-d sum(-1, keepdim)": lambda m, t: t(SCALAR).sum(-1, keepdim=True),
    "0-d mean(0)": lambda m, t: t(SCALAR).mean(0),
    "0-d prod(0)": lambda m, t: t(SCALAR).prod(0),
    "0-d squeeze(0)": lambda m, t: t(SCALAR).squeeze(0),
    "0-d logsumexp(0)": lambda m, t: t(SCALAR).logsumexp(0),
    "0-d softmax(-1)": lambda m, t: t(SCALAR).softmax(-1),
    "0-d log_softmax(0)": lambda m, t: t(SCALAR).log_softmax(0),
    "0-d max(0)": lambda m, t: tuple(t(SCALAR).max(0)),
    "0-d argmax(0)": lambda m, t: t(SCALAR).argmax(0),
    "0-d amax(-1)": lambda m, t: t(SCALAR).amax(-1),
    "0-d all(0)": lambda m, t: t(SCALAR).all(0),
    "0-d transpose(0, -1)": lambda m, t: t(SCALAR).transpose(0, -1),
    "0-d unsqueeze(0)": lambda m, t: t(SCALAR).unsqueeze(0),
    # reductions over zero-size dims
    "all() of empty": lambda m, t: m.zeros(0, 3).all(),
    "any() of empty": lambda m, t: m.zeros(0, 3).any(),
    "all(0) of (0, 3)": lambda m, t: m.zeros(0, 3).all(0),
    "any(1) of (0, 3)": lambda m, t: m.zeros(0, 3).any(1),
    "sum() of empty": lambda m, t: m.zeros(0, 3).sum(),
    "prod() of empty": lambda m, t: m.zeros(0, 3).prod(),
    "prod(0) of (0, 3)": lambda m, t: m.zeros(0, 3).prod(0),
    "amax(1) of (0, 3)": lambda m, t: m.zeros(0, 3).amax(1),
    "max(1) of (0, 3)": lambda m, t: tuple(m.zeros(0, 3).max(1)),
    "logsumexp(0) of (0, 3)": lambda m, t: m.zeros(0, 3).logsumexp(0),
    "logsumexp(0) of (0,)": lambda m, t: m.zeros(0).logsumexp(0),
    "mean(0) of (0, 3)": lambda m, t: m.zeros(0, 3).mean(0),
    "var(0) of (0, 3)": lambda m, t: m.zeros(0, 3).var(0),
    "softmax(0) of (0, 3)": lambda m, t: m.zeros(0, 3).softmax(0),
    "argmax(1) of (0, 3)": lambda m, t: m.zeros(0, 3).argmax(1),
    # gather with an index smaller than the input in the other dims
    "gather small index dim 0": lambda m, t: m.gather(m.arange(12.0).reshape(3, 4), 0, t([[0, 1], [2, 0]])),
    "gather small index dim 1": lambda m, t: m.gather(m.arange(12.0).reshape(3, 4), 1, t([[3], [0]])),
    # integer tensors
    "int ** 2 stays int": lambda m, t: t([1, -2, 3]) ** 2,
    "int ** int tensor": lambda m, t: t([1, -1, 2, 3]) ** t([-1, -3, -1, 2]),
    "bool ** 2": lambda m, t: t([True, False]) ** 2,
    "int // int": lambda m, t: t([7, -7, 7, -7]) // t([2, 2, -2, -2]),
    "int % int": lambda m, t: t([7, -7, 7, -7]) % t([2, 2, -2, -2]),
    "int & int is bitwise": lambda m, t: t([12, -1]) & t([10, 5]),
    "bool & bool": lambda m, t: t([True, False]) & t([True, True]),
    "int ^ scalar": lambda m, t: t([12, -1]) ^ 3,
    "~int": lambda m, t: ~t([0, 5, -1]),
    "3 << int": lambda m, t: 3 << t([0, 1, 29]),  # (PyTorch computes in int64: stay below 2**31)
    "int >> int": lambda m, t: t([-8, 8]) >> t([1, 40]),
    "div trunc": lambda m, t: m.div(t([7, -7]), t([2, 2]), rounding_mode="trunc"),
    "div floor float": lambda m, t: m.div(t([7.5, -7.5]), t([2.0, 2.0]), rounding_mode="floor"),
    "fmod int": lambda m, t: m.fmod(t([7, -7]), t([-3, 3])),
    "remainder float": lambda m, t: m.remainder(t([7.5, -7.5]), t([-2.0, 2.0])),
    "int / int is float": lambda m, t: t([7, -7]) / t([2, 2]),
    # axis= for dim=, keepdims= for keepdim=
    "sum(axis=0)": lambda m, t: t([[1.0, 2.0], [3.0, 4.0]]).sum(axis=0),
    "mean(axis=1, keepdims)": lambda m, t: m.mean(t([[1.0, 2.0], [3.0, 4.0]]), axis=1, keepdims=True),
    "amax(axis=-1)": lambda m, t: m.amax(t([[1.0, 5.0], [3.0, 4.0]]), axis=-1),
    "cat(axis=1)": lambda m, t: m.cat([t([[1.0]]), t([[2.0]])], axis=1),
    "softmax(axis=0)": lambda m, t: t([1.0, 2.0]).softmax(axis=0),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch warns of var with no degrees of freedom
@pytest.mark.parametrize("case", CASES, ids=str)
def test_edge_matches_torch(case: str, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = require_torch()
    fn = CASES[case]
    want = fn(torch, lambda data: torch.tensor(data))
    monkeypatch.setenv("VKBLAS_DEVICE", device)  # the factories inside a case (vb.zeros, vb.arange)
    got = fn(vb, lambda data: vb.tensor(data))
    assert all(o.device == vb.device(device) for o in (got if isinstance(got, tuple) else (got,)))
    assert [_dtype_name(o) for o in (got if isinstance(got, tuple) else (got,))] == [
        _dtype_name(o) for o in (want if isinstance(want, tuple) else (want,))
    ], case
    for g, w in zip(_values(got), _values(want), strict=True):
        assert g.shape == w.shape, f"{case}: shape {g.shape} vs PyTorch {w.shape}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6, err_msg=case)


# (name, expression, exception, message): raised on every device, as PyTorch raises
ERRORS: dict[str, tuple[Callable[[Any, Callable[..., Any]], Any], type[BaseException], str]] = {
    "0-d sum(1)": (lambda m, t: t(SCALAR).sum(1), IndexError, "Dimension out of range"),
    "0-d cat": (lambda m, t: m.cat([t(1.0), t(2.0)]), RuntimeError, "zero-dimensional"),
    "amax() of empty": (lambda m, t: m.zeros(0, 3).amax(), RuntimeError, "numel\\(\\) == 0"),
    "amax(0) of (0, 3)": (lambda m, t: m.zeros(0, 3).amax(0), IndexError, "non-zero size"),
    "max(0) of (0, 3)": (lambda m, t: m.zeros(0, 3).max(0), IndexError, "non-zero size"),
    "argmax() of empty": (lambda m, t: m.zeros(0, 3).argmax(), IndexError, "numel\\(\\) == 0"),
    "int ** -1": (lambda m, t: t([1, 2]) ** -1, RuntimeError, "negative integer powers"),
    "int // 0": (lambda m, t: t([1, 2]) // 0, RuntimeError, "ZeroDivisionError"),
    "int % 0 tensor": (lambda m, t: (t([1, 2]) % t([1, 0])).tolist(), RuntimeError, "ZeroDivisionError"),
    "int.add_(1.5)": (lambda m, t: t([1, 2]).add_(1.5), RuntimeError, "can't be cast to the desired output type"),
    "int.div_(2)": (lambda m, t: t([1, 2]).div_(2), RuntimeError, "can't be cast to the desired output type"),
    "int.exp_()": (lambda m, t: t([1, 2]).exp_(), RuntimeError, "can't be cast to the desired output type"),
    "bool.add_(1)": (lambda m, t: t([True]).add_(1), RuntimeError, "can't be cast to the desired output type"),
    "int.clamp_(0.5)": (lambda m, t: t([1, 2]).clamp_(0.5), RuntimeError, "can't be cast to the desired output type"),
    "float & float": (lambda m, t: t([1.0]) & t([1.0]), NotImplementedError, "only implemented for integer"),
    "float << 1": (lambda m, t: t([1.0]) << 1, NotImplementedError, "only implemented for integer"),
    "~float": (lambda m, t: ~t([1.0]), TypeError, "integer and Boolean"),
    "float @ int": (lambda m, t: m.ones(2, 2) @ m.ones(2, 2, dtype=m.int32), RuntimeError, "dtype"),
    "sum(dim=0, axis=0)": (lambda m, t: t([1.0]).sum(dim=0, axis=0), TypeError, "alias"),
}


@pytest.mark.parametrize("case", ERRORS, ids=str)
def test_edge_errors_as_torch(case: str, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = require_torch()
    fn, exc, match = ERRORS[case]
    with pytest.raises(exc):
        fn(torch, lambda data: torch.tensor(data, dtype=torch.int32 if _all_ints(data) else None))
    monkeypatch.setenv("VKBLAS_DEVICE", device)
    with pytest.raises(exc, match=match):
        fn(vb, lambda data: vb.tensor(data))
        vb.synchronize(device)  # a device-side check reports at the next sync point


def _all_ints(data: Any) -> bool:
    return isinstance(data, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in data)


def test_in_place_ops_that_fit_the_dtype_still_work(device: str) -> None:
    x = vb.tensor([1, 2], device=device)
    x.mul_(True)
    x.add_(3)
    x.fill_(1.5)  # fill_ and masked_fill_ convert the value, as PyTorch does
    x.masked_fill_(x > 0, 2.5)
    x[0] = 7.9
    assert x.tolist() == [7, 2] and x.dtype is vb.int32


def test_scalar_base_power_gradients_as_torch(device: str) -> None:
    """``base ** tensor`` with a negative or zero base: values and gradients as PyTorch (no math domain error)."""
    torch = require_torch()
    e = [0.5, -1.0, 0.0, 2.0, 3.0]
    for base in (-2.0, 0.0, 2.0):
        te = torch.tensor(e, dtype=torch.float64, requires_grad=True)
        (base**te).sum().backward()
        ve = vb.tensor(e, device=device, requires_grad=True)
        out = base**ve
        out.sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), (base**te).detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(ve.grad.numpy(), te.grad.numpy(), rtol=1e-5, err_msg=f"base {base}")


def test_vulkan_tensor_indexed_by_cpu_tensor_and_lists(device: str) -> None:
    x = vb.arange(12.0, device=device).reshape(3, 4)
    cpu_idx = vb.tensor([2, 0], device="cpu")
    want = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(x[cpu_idx].numpy(), want[[2, 0]])
    np.testing.assert_array_equal(x[:, cpu_idx].numpy(), want[:, [2, 0]])
    np.testing.assert_array_equal(x[[True, False, True]].numpy(), want[[True, False, True]])
    np.testing.assert_array_equal(x[[0, 2], [1, 3]].numpy(), want[[0, 2], [1, 3]])
    np.testing.assert_array_equal(x[vb.tensor([True, False, True], device="cpu")].numpy(), want[[0, 2]])
    y = vb.zeros(3, device=device)
    y[vb.tensor([True, False, True], device="cpu")] = 1.0
    y[1:2] = vb.tensor([5.0], device="cpu")
    assert y.tolist() == [1.0, 5.0, 1.0]
