"""Generic tests over the op table (tests/op_table.py) x device.

* forward: values, shape and dtype against the float64 numpy reference (cpu computes in float64; float32 devices are
  compared with their inputs rounded to float32, with float32 tolerances), and again in each of the op's ``dtypes``;
* gradcheck: cpu float64 analytic gradients against central finite differences of vkblas;
* reference gradients: every device's analytic gradients against finite differences of the numpy reference;
* device gradients: a device's float32 analytic gradients against the cpu's float64 analytic gradients;
* non-contiguous: inputs made by transposing and slicing a bigger tensor give the values and gradients that
  contiguous inputs give;
* error inputs raise what the table says; every public op has an entry;
* torch: a few expressions written once and run in both frameworks (skipped without PyTorch, except that
  ``VKBLAS_WITH_TORCH=1`` makes a missing PyTorch fail).

Each generic test fails when an op's samples give it nothing to check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype, require_torch, requires_vulkan
from op_table import OPS, OpInfo, Sample
from references import numeric_grad

DIFFERENTIABLE = [info for info in OPS if info.differentiable]
GPU_DEVICES = [pytest.param("vulkan", marks=requires_vulkan)]


def _ids(info: OpInfo) -> str:
    return info.name


def vk_dtype(a: np.ndarray, device: str) -> vb.DType:
    if a.dtype == np.bool_:
        return vb.bool
    if a.dtype == np.float16:
        return vb.float16
    if a.dtype in (np.uint8, np.int8):
        return vb.uint8 if a.dtype == np.uint8 else vb.int8
    return float_dtype(device) if a.dtype.kind == "f" else vb.int32


def make_arg(a: Any, device: str, requires_grad: bool = False, noncontiguous: bool = False) -> tuple[Any, Any]:
    """(leaf, argument): a Python scalar passes through; an array becomes a tensor on ``device``.

    With ``noncontiguous`` the argument is a strided view into a bigger leaf: the array is written into every other
    column of a padded array stored transposed, then viewed back with ``.T[..., 1::2]``.
    """
    if not isinstance(a, np.ndarray):
        return a, a
    dtype = vk_dtype(a, device)
    grad = requires_grad and dtype.is_floating
    if not noncontiguous or a.ndim == 0:
        t = vb.tensor(a, dtype=dtype, device=device, requires_grad=grad)
        return t, t
    padded = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), dtype=a.dtype)
    padded[..., 1::2] = a
    base = vb.tensor(np.ascontiguousarray(padded.T), dtype=dtype, device=device, requires_grad=grad)
    view = base.T[..., 1::2]
    assert view.shape == a.shape and (not view.is_contiguous() or a.shape[-1] <= 1)
    return base, view


def grad_of_leaf(leaf: Any, noncontiguous: bool, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient that reached the argument made by :func:`make_arg` (zeros when none did)."""
    if leaf.grad is None:
        return np.zeros(shape)
    g = leaf.grad
    if noncontiguous and len(shape):
        g = g.T[..., 1::2]
    return g.numpy().astype(np.float64)


def as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def reference(info: OpInfo, sample: Sample, device: str) -> tuple[np.ndarray, ...]:
    """The float64 reference, from the inputs exactly as the device sees them (rounded to its float dtype)."""
    np_float = float_dtype(device).np
    args = [
        a.astype(np_float).astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
        for a in sample.args
    ]
    return tuple(np.asarray(r) for r in as_tuple(info.ref(*args, **sample.kwargs)))


def expected_dtype(ref: np.ndarray, device: str) -> vb.DType:
    if ref.dtype == np.bool_:
        return vb.bool
    return vb.int32 if ref.dtype.kind in "iu" else float_dtype(device)


def tolerances(info: OpInfo, device: str) -> dict[str, float]:
    if float_dtype(device) is vb.float64:
        return {"atol": info.atol, "rtol": info.rtol}
    return {"atol": info.atol32, "rtol": info.rtol32}


def assert_matches(out: vb.Tensor, ref: np.ndarray, device: str, info: OpInfo, what: str) -> None:
    assert isinstance(out, vb.Tensor), f"{what}: expected a Tensor, got {type(out).__name__}"
    assert tuple(out.shape) == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {ref.shape}"
    assert out.dtype is expected_dtype(ref, device), f"{what}: dtype {out.dtype!r} (reference {ref.dtype})"
    assert out.device == vb.device(device), f"{what}: result on {out.device}, expected {device}"
    got = out.detach().numpy()
    if out.dtype.is_floating:
        np.testing.assert_allclose(got, ref, err_msg=what, **tolerances(info, device))
    else:
        np.testing.assert_array_equal(got, ref, err_msg=what)


def run(
    info: OpInfo, sample: Sample, device: str, requires_grad: bool = False, noncontiguous: bool = False
) -> tuple[list[Any], tuple[Any, ...]]:
    pairs = [make_arg(a, device, requires_grad, noncontiguous) for a in sample.args]
    out = info.op(*(arg for _, arg in pairs), **sample.kwargs)
    return [leaf for leaf, _ in pairs], as_tuple(out)


def analytic_grads(info: OpInfo, sample: Sample, device: str, noncontiguous: bool = False) -> list[np.ndarray | None]:
    """Gradients of ``sum(out_k * w_k)`` (fixed random weights) for every float array argument (None elsewhere)."""
    leaves, outs = run(info, sample, device, requires_grad=True, noncontiguous=noncontiguous)
    total = None
    for k, o in enumerate(outs):
        w = vb.tensor(np.random.default_rng(k).standard_normal(o.shape), dtype=o.dtype, device=device)
        term = (o * w).sum()
        total = term if total is None else total + term
    assert total is not None and total.requires_grad, f"{info.name}: output does not require grad"
    total.backward()
    return [
        grad_of_leaf(leaf, noncontiguous, a.shape) if isinstance(leaf, vb.Tensor) and leaf.requires_grad else None
        for leaf, a in zip(leaves, sample.args, strict=True)
    ]


def has_float_input(sample: Sample) -> bool:
    return any(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in sample.args)


# ---------------------------------------------------------------- the generic tests
def samples(info: OpInfo, keep: Any = None) -> list[Sample]:
    """The op's samples (those ``keep`` accepts); fails when that leaves nothing to check."""
    chosen = [s for s in info.sample_list() if keep is None or keep(s)]
    assert chosen, f"{info.name}: its sample generator yields nothing for this test"
    return chosen


@pytest.mark.parametrize("info", OPS, ids=_ids)
def test_forward_matches_numpy(info: OpInfo, device: str) -> None:
    for sample in samples(info):
        what = f"{info.name}{sample.describe()} on {device}"
        _, outs = run(info, sample, device)
        refs = reference(info, sample, device)
        assert len(outs) == len(refs), f"{what}: {len(outs)} outputs, reference has {len(refs)}"
        for out, ref in zip(outs, refs, strict=True):
            assert_matches(out, ref, device, info, what)


@pytest.mark.parametrize("info", DIFFERENTIABLE, ids=_ids)
def test_gradcheck_float64(info: OpInfo) -> None:
    for sample in samples(info, has_float_input):
        args = [make_arg(a, "cpu", requires_grad=True)[1] for a in sample.args]
        slots = [i for i, a in enumerate(args) if isinstance(a, vb.Tensor)]

        def fn(*tensors: vb.Tensor, sample: Sample = sample, args: list[Any] = args, slots: list[int] = slots):
            full = list(args)
            for i, t in zip(slots, tensors, strict=True):
                full[i] = t
            outs = as_tuple(info.op(*full, **sample.kwargs))
            return outs[0] if len(outs) == 1 else vb.cat([o.reshape(-1) for o in outs])

        try:
            assert vb.gradcheck(fn, [args[i] for i in slots], atol=info.grad_atol, rtol=info.grad_rtol)
        except AssertionError as e:
            raise AssertionError(f"{info.name}{sample.describe()}: {e}") from None


@pytest.mark.parametrize("device", GPU_DEVICES)  # cpu float64 is the reference, checked by gradcheck above
@pytest.mark.parametrize("info", DIFFERENTIABLE, ids=_ids)
def test_device_grads_match_cpu_float64(info: OpInfo, device: str) -> None:
    """Code generation: the same expression on the device and on the cpu (paired with the reference test below)."""
    for sample in samples(info, has_float_input):
        got = analytic_grads(info, sample, device)
        want = analytic_grads(info, sample, "cpu")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if w is not None:
                np.testing.assert_allclose(
                    g,
                    w,
                    atol=info.grad_atol32,
                    rtol=info.grad_rtol32,
                    err_msg=f"{info.name}{sample.describe()}: gradient of input {i}",
                )


@pytest.mark.parametrize("info", DIFFERENTIABLE, ids=_ids)
def test_grads_match_reference_finite_differences(info: OpInfo, device: str) -> None:
    """The maths: analytic gradients on every device against central differences of the float64 numpy reference."""
    fdt = float_dtype(device)
    atol, rtol = (info.grad_atol, info.grad_rtol) if fdt is vb.float64 else (info.grad_atol32, info.grad_rtol32)
    for sample in samples(info, has_float_input):
        got = analytic_grads(info, sample, device)
        args = [
            a.astype(fdt.np).astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
            for a in sample.args
        ]
        outs = as_tuple(info.ref(*args, **sample.kwargs))
        weights = [np.random.default_rng(k).standard_normal(np.shape(o)) for k, o in enumerate(outs)]
        for i, g in enumerate(got):
            if g is None:
                continue
            want = numeric_grad(lambda *a, kw=sample.kwargs: info.ref(*a, **kw), args, i, weights)
            np.testing.assert_allclose(
                g, want, atol=atol, rtol=rtol, err_msg=f"{info.name}{sample.describe()} on {device}: gradient {i}"
            )


@pytest.mark.parametrize("info", [i for i in OPS if i.noncontiguous], ids=_ids)
def test_noncontiguous_inputs_match_contiguous(info: OpInfo, device: str) -> None:
    checked = 0
    for sample in info.sample_list():
        if not any(isinstance(a, np.ndarray) and a.ndim and a.size > 1 for a in sample.args):
            continue
        what = f"{info.name}{sample.describe()} on {device}, non-contiguous"
        _, outs = run(info, sample, device, noncontiguous=True)
        _, want = run(info, sample, device)
        for o, w in zip(outs, want, strict=True):
            assert_matches(o, w.numpy(), device, info, what)
        if info.differentiable and has_float_input(sample):
            for g, w in zip(
                analytic_grads(info, sample, device, noncontiguous=True),
                analytic_grads(info, sample, device),
                strict=True,
            ):
                if w is not None:
                    np.testing.assert_allclose(g, w, err_msg=what + " (gradient)", **tolerances(info, device))
        checked += 1
    assert checked, f"{info.name}: no sample has an input that can be made non-contiguous"


# ---------------------------------------------------------------- other dtypes
def in_dtype(sample: Sample, dtype: vb.DType) -> tuple[Sample, list[int]] | None:
    """The sample with its float arrays converted to ``dtype`` (see OpInfo.dtypes), and which were; None if none."""
    args, changed = [], []
    for i, a in enumerate(sample.args):
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            if dtype is vb.int32:
                a = np.asarray(np.rint(a * 2), dtype=np.int32)
            elif dtype in (vb.uint8, vb.int8):  # 8-bit: small values of each sign range
                a = np.asarray(np.rint(a * 30) + (128 if dtype is vb.uint8 else 0), dtype=dtype.np)
            else:
                a = np.asarray(a > 0) if dtype is vb.bool else a.astype(np.float16)
            changed.append(i)
        args.append(a)
    return (Sample(tuple(args), sample.kwargs), changed) if changed else None


def dtype_reference(info: OpInfo, sample: Sample, changed: list[int], dtype: vb.DType) -> tuple[np.ndarray, ...]:
    wide = np.float64 if dtype is vb.float16 else None
    args = [a.astype(wide) if i in changed and wide is not None else a for i, a in enumerate(sample.args)]
    return tuple(np.asarray(r) for r in as_tuple(info.ref(*args, **sample.kwargs)))


def dtype_expected(ref: np.ndarray, info: OpInfo, dtype: vb.DType) -> vb.DType:
    if ref.dtype == np.bool_:
        return vb.bool
    if ref.dtype in (np.uint8, np.int8):
        return vb.uint8 if ref.dtype == np.uint8 else vb.int8
    if ref.dtype.kind in "iu":
        return vb.int32
    return vb.float16 if dtype is vb.float16 else vb.float32


@pytest.mark.parametrize("info", [i for i in OPS if i.dtypes], ids=_ids)
def test_other_dtypes_match_numpy(info: OpInfo, device: str) -> None:
    backend = vb.backend.get(device)
    checked = 0
    for dtype in info.dtypes:
        if not backend.supports(dtype):
            continue  # float16 needs the adapter's shader-f16
        for sample in info.sample_list():
            converted = in_dtype(sample, dtype)
            if converted is None:
                continue
            sample, changed = converted
            what = f"{info.name}{sample.describe()} on {device}"
            _, outs = run(info, sample, device)
            refs = dtype_reference(info, sample, changed, dtype)
            assert len(outs) == len(refs), what
            for out, ref in zip(outs, refs, strict=True):
                want = dtype_expected(ref, info, dtype)
                assert out.dtype is want, f"{what}: dtype {out.dtype!r}, expected {want!r}"
                assert tuple(out.shape) == ref.shape, f"{what}: shape {tuple(out.shape)} != {ref.shape}"
                got = out.detach().numpy()
                if want.is_floating:
                    tol = 2e-2 if want is vb.float16 else info.atol32
                    np.testing.assert_allclose(got, ref, atol=tol, rtol=tol if want is vb.float16 else info.rtol32)
                else:
                    np.testing.assert_array_equal(got, ref, err_msg=what)
            checked += 1
    if not checked and all(not backend.supports(d) for d in info.dtypes):
        pytest.skip(f"{device} supports none of {info.dtypes}")
    assert checked, f"{info.name}: no sample has a float array to convert to {info.dtypes}"


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("info", [i for i in OPS if i.error_inputs is not None], ids=_ids)
def test_error_inputs_raise(info: OpInfo, device: str) -> None:
    cases = info.error_list()
    assert cases, f"{info.name}: error_inputs yields nothing"
    for case in cases:
        with pytest.raises(case.error, match=case.match):
            run(info, case.sample, device)
            vb.synchronize(device)  # an asynchronous device reports bad indices at its next sync point


# ---------------------------------------------------------------- coverage
def public_ops() -> set[str]:
    """The functions of ``vkblas`` that are ops, and the in-place Tensor methods that ops bind."""

    def from_ops(obj: Any) -> bool:
        return callable(obj) and getattr(obj, "__module__", "").startswith("vkblas.ops")

    names = {n for n in dir(vb) if not n.startswith("_") and from_ops(getattr(vb, n))}
    names |= {
        n for n in dir(vb.Tensor) if n.endswith("_") and not n.startswith("_") and from_ops(getattr(vb.Tensor, n))
    }
    return names


def test_every_public_op_has_an_opinfo() -> None:
    covered = {info.name.split(" ")[0] for info in OPS}
    ops = public_ops()
    assert len(ops) > 80, sorted(ops)  # the finder itself works
    missing = sorted(ops - covered)
    assert not missing, f"public ops with no OpInfo in tests/op_table.py: {missing}"


def test_table_covers_the_issue_ops() -> None:
    names = {info.name.split(" ")[0] for info in OPS}
    required = (
        "add sub mul div neg pow exp log sqrt rsqrt abs sin cos tanh sigmoid relu gelu gelu_tanh silu "
        "leaky_relu clamp maximum minimum where eq ne lt le gt ge sum mean max min argmax argmin var std "
        "matmul reshape view flatten squeeze unsqueeze permute transpose expand repeat cat stack split chunk "
        "getitem gather scatter_add softmax log_softmax logsumexp one_hot masked_fill add_ mul_ sub_ zero_ "
        "copy_ fill_"
    ).split()
    assert not [n for n in required if n not in names]


# ---------------------------------------------------------------- the same lambda in torch (optional)
TORCH_CASES = {
    "x*y + x": lambda m, x, y: x * y + x,
    "scalars on both sides": lambda m, x, y: (2.0 - x) / 3.0 + 1.5 * y**2 - 4.0 / (y * y + 1.0),
    "softmax + log_softmax": lambda m, x, y: m.softmax(x, dim=-1) * m.log_softmax(y, dim=0),
    "logsumexp keepdim": lambda m, x, y: m.logsumexp(x * y, dim=0, keepdim=True) + x,
    "broadcast matmul": lambda m, x, y: m.matmul(x.unsqueeze(0), y.T.unsqueeze(0).expand(2, 4, 3)).sum(0),
    "var + std": lambda m, x, y: m.var(x, dim=1) + m.std(y, dim=0).sum(),
    "max/min dim": lambda m, x, y: m.max(x, dim=1).values * 2 + m.min(y, dim=1, keepdim=True).values.squeeze(),
    "activations": lambda m, x, y: (
        m.sigmoid(x)
        + m.tanh(y)
        + m.relu(x - y)
        + m.nn.functional.gelu(x)
        + m.nn.functional.silu(y)
        + m.nn.functional.leaky_relu(x, 0.1)
        + m.nn.functional.gelu(y, approximate="tanh")
    ),
    "where/maximum/clamp": lambda m, x, y: m.where(x > 0, m.maximum(x, y), m.clamp(y, -0.5, 0.5)),
    "int-array index": lambda m, x, y: x[[0, 2, 2]] * y[:, [3, 0]].sum(),
    "reshape/permute/cat/stack": lambda m, x, y: (
        m.cat([x.reshape(4, 3).permute(1, 0), y], 1) * m.stack([y[0], x[1], y[2]], 0).repeat(1, 2)
    ),
}


@pytest.mark.parametrize("case", TORCH_CASES, ids=str)
def test_same_expression_as_torch(case: str, device: str) -> None:
    torch = require_torch()
    fn = TORCH_CASES[case]
    rng = np.random.default_rng(7)
    xs = [away_from_zero(rng.uniform(-2, 2, (3, 4))) for _ in range(2)]
    tx = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in xs]
    vx = [vb.tensor(a, dtype=float_dtype(device), device=device, requires_grad=True) for a in xs]
    t_out, v_out = fn(torch, *tx), fn(vb, *vx)
    assert tuple(v_out.shape) == tuple(t_out.shape)
    # exact gelu uses an erf approximation with |error| < 1.5e-7 (ops/elementwise.py)
    tol = {"atol": 1e-6 if case == "activations" else 1e-9, "rtol": 1e-7}
    if device != "cpu":
        tol = {"atol": 1e-4, "rtol": 1e-4}
    np.testing.assert_allclose(v_out.detach().numpy(), t_out.detach().numpy(), **tol, err_msg=case)
    w = np.random.default_rng(8).standard_normal(tuple(t_out.shape))
    t_out.backward(torch.tensor(w))
    v_out.backward(vb.tensor(w, dtype=v_out.dtype, device=device))
    for v, t in zip(vx, tx, strict=True):
        np.testing.assert_allclose(v.grad.numpy(), t.grad.numpy(), **tol, err_msg=f"{case} (gradient)")


def away_from_zero(a: np.ndarray) -> np.ndarray:
    return np.where(np.abs(a) < 0.1, 0.5, a)
