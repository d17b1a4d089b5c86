"""The Vulkan backend through the backend contract, against the numpy reference backend (whose reductions, matmul,
gather and scatter are numpy's own). Elementwise formulas run the same formula on both, so they are also checked
against float64 references written in numpy: ops' formulas through their OpInfo (tests/op_table.py), the others
here (``FORMULA_REFERENCES``).

Runs on whatever Vulkan adapter exists (lavapipe in CI); run it also with ``VKBLAS_SHADER_CHECKS=1``. Sizes are
small: lavapipe is a CPU.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from references import pcg_normal, pcg_uniform
from vkblas import dtypes as D
from vkblas.backend import elementwise as ew
from vkblas.backend.base import BackendError, NoAdapterError, UnsupportedError, View, contiguous_strides
from vkblas.backend.cpu import CpuBackend

os.environ.setdefault("LP_NUM_THREADS", "0")
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

wgpu = pytest.importorskip("wgpu")
from vkblas.backend.vulkan import VulkanBackend, list_adapters  # noqa: E402
from vkblas.backend.vulkan import queue as vk_queue  # noqa: E402
from vkblas.backend.vulkan.kernels import elementwise as vk_elementwise  # noqa: E402
from vkblas.backend.vulkan.kernels.reduce import MEDIUM, SplitPlan  # noqa: E402
from vkblas.bench.copy import copy_bandwidth, device_copy  # noqa: E402
from vkblas.ops.record import RECORDS  # noqa: E402


@pytest.fixture(scope="module")
def vk() -> VulkanBackend:
    try:
        return VulkanBackend()
    except NoAdapterError as e:
        pytest.skip(f"no Vulkan adapter on this machine: {e}")


CPU = CpuBackend()
RNG = np.random.default_rng(0)


def put(be, arr: np.ndarray, dtype: D.DType, shape=None, strides=None, offset: int = 0) -> View:
    """A view of ``arr`` (flattened into a storage) with the given layout; default contiguous."""
    flat = np.asarray(arr).reshape(-1)
    shape = tuple(np.shape(arr)) if shape is None else tuple(shape)
    strides = contiguous_strides(shape) if strides is None else tuple(strides)
    return View(be.from_numpy(flat, dtype), shape, strides, offset)


def empty(be, shape, dtype: D.DType) -> View:
    return View.of(be.alloc(max(1, int(np.prod(shape))), dtype), shape)


def both(arr, dtype, vk, **layout):
    """The same view on vulkan (``dtype``) and on cpu (float64 for floats, as the precise reference). The reference
    takes the values vulkan holds (rounded to ``dtype``): an ill-conditioned op (atanh's gradient near |x| = 1)
    would otherwise show the input's rounding, amplified, as the kernel's error."""
    ref = D.float64 if dtype.is_floating else dtype
    held = np.asarray(arr).astype(dtype.np) if dtype.is_floating else arr
    return put(vk, arr, dtype, **layout), put(CPU, held, ref, **layout)


# ---------------------------------------------------------------- device


def test_adapters_and_describe(vk):
    adapters = list_adapters()
    assert adapters and all({"name", "adapter_type", "backend_type", "features", "limits"} <= set(a) for a in adapters)
    d = vk.describe()
    if sys.platform.startswith("linux"):
        assert d["backend_type"] == "Vulkan"
    assert d["limits"]["max-storage-buffer-binding-size"] > 0
    assert not vk.supports(D.float64)
    assert vk.supports(D.float16) == ("shader-f16" in d["features"])


# ---------------------------------------------------------------- elementwise


# (low, high) of operands that must stay in a domain (step counts, decay rates, quantities under a square root);
# the optimizers' formulas of optim/fused.py
_DOMAINS: dict[str, dict[int, tuple[float, float]]] = {
    "adadelta_apply": {1: (0.0, 2.0), 2: (0.0, 2.0), 5: (1e-6, 1e-3)},
    "adadelta_acc": {0: (0.0, 2.0), 1: (0.0, 2.0), 3: (0.1, 0.9), 4: (1e-6, 1e-3)},
    "adagrad_lr": {0: (0.1, 1.0), 1: (1.0, 10.0), 2: (0.0, 1.0)},
    "div_apply": {2: (0.5, 2.0)},
    "nadam_apply": {3: (0.0, 2.0), 6: (0.5, 2.0), 7: (1e-6, 1e-3)},
    "nadam_mu_product": {0: (0.1, 0.9), 1: (1.0, 20.0), 2: (0.5, 0.99), 3: (0.0, 0.1)},
    "nadam_coef_g": {1: (0.1, 0.9), 2: (1.0, 20.0), 3: (0.5, 0.99), 4: (0.0, 0.1)},
    "nadam_coef_m": {1: (0.1, 0.9), 2: (1.0, 20.0), 3: (0.5, 0.99), 4: (0.0, 0.1)},
    "radam_apply": {2: (0.0, 2.0), 6: (1e-6, 1e-3)},
    "radam_a": {0: (10.0, 20.0), 1: (0.8, 0.95), 2: (1.0, 30.0)},  # rho_t well past 5: rect is well conditioned
    "radam_b": {0: (1.0, 20.0), 1: (1.0, 10.0)},
}


def _operand_values(op: str, i: int, shape) -> np.ndarray:
    """Inputs in each op's domain (positive for log/sqrt, integral exponents for negative pow bases...)."""
    if i in _DOMAINS.get(op, {}):
        return RNG.uniform(*_DOMAINS[op][i], shape)
    if op in ("log", "sqrt", "rsqrt"):
        return RNG.uniform(0.1, 3.0, shape)
    if op == "pow" and i == 1:
        return RNG.integers(-3, 4, shape).astype(np.float64)
    if op in ("div", "reciprocal") and i == (0 if op == "reciprocal" else 1):
        return RNG.uniform(0.5, 2.0, shape) * RNG.choice([-1, 1], shape)
    if op in ("clamp",) and i > 0:
        return np.full(shape, -0.5 if i == 1 else 0.7)
    v = RNG.uniform(-2.0, 2.0, shape)
    v.flat[0] = 0.0  # sign(0), relu(0), pow(0, x)
    return v


def _check_op(vk, op: str, layouts: list[str]) -> None:
    spec = ew.OPS[op]
    shape = (3, 5)
    vargs, cargs = [], []
    # integer-only formulas (bitwise ops) on int32; the others on float32 against the cpu's float64
    dt, ref_dt = (D.int32, D.int32) if spec.integer_only else (D.float32, D.float64)
    for i in range(spec.arity):
        if i == spec.bool_operand:
            vals = RNG.random(shape) > 0.5
            v, c = put(vk, vals, D.bool_), put(CPU, vals, D.bool_)
        elif op.startswith("logical"):
            vals = RNG.random(shape) > 0.5
            v, c = put(vk, vals, D.bool_), put(CPU, vals, D.bool_)
        elif layouts[i] == "scalar":
            s = 2 if spec.integer_only else 0.3 if op not in ("pow",) else 2.0
            vargs.append(s)
            cargs.append(s)
            continue
        else:
            vals = _operand_values(op, i, shape)
            if spec.integer_only:
                vals = np.rint(vals * 20).astype(np.int32)
            kind = layouts[i]
            if kind == "contiguous":
                v, c = both(vals, dt, vk)
            elif kind == "transposed":  # storage holds the transpose; the view transposes back
                v, c = both(np.ascontiguousarray(vals.T), dt, vk, shape=shape, strides=(1, 3))
            elif kind == "offset":
                padded = np.concatenate([np.full(4, 9, vals.dtype), vals.reshape(-1)])
                v, c = both(padded, dt, vk, shape=shape, strides=(5, 1), offset=4)
            else:  # broadcast a row: stride 0 along dim 0
                v, c = both(vals[0], dt, vk, shape=shape, strides=(0, 1))
        vargs.append(v)
        cargs.append(c)
    out_dtype = D.bool_ if spec.returns_bool else dt
    out_v = empty(vk, shape, out_dtype)
    out_c = empty(CPU, shape, D.bool_ if spec.returns_bool else ref_dt)
    vk.elementwise(op, out_v, vargs)
    CPU.elementwise(op, out_c, cargs)
    got, want = vk.to_numpy(out_v), CPU.to_numpy(out_c)
    if spec.returns_bool:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {layouts}")
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=f"{op} {layouts}")


_LAYOUTS = ["contiguous", "transposed", "offset", "broadcast"]


@pytest.mark.parametrize("op", sorted(ew.OPS))
def test_elementwise_ops(vk, op):
    """Code generation: every formula on Vulkan (float32, four layouts) against the cpu backend (float64)."""
    arity = ew.OPS[op].arity
    for k, first in enumerate(_LAYOUTS):
        layouts = [first] + [_LAYOUTS[(k + j + 1) % 4] for j in range(arity - 1)]
        _check_op(vk, op, layouts)
    if arity > 1 and ew.OPS[op].bool_operand is None and not op.startswith("logical"):
        _check_op(vk, op, ["transposed"] + ["scalar"] * (arity - 1))


def test_pow_edge_cases(vk):
    a = np.array([0.0, 0.0, -2.0, -2.0, -2.0, 2.0, -8.0, 0.0], np.float32)
    b = np.array([0.0, 2.0, 3.0, 2.0, 0.5, -1.0, 1.0 / 3.0, -1.0], np.float32)
    out = empty(vk, (8,), D.float32)
    vk.elementwise("pow", out, [put(vk, a, D.float32), put(vk, b, D.float32)])
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(vk.to_numpy(out), np.power(a, b), rtol=1e-6)


def test_tanh_sign_extremes(vk):
    x = np.array([-1e4, -30.0, -0.0, 0.0, 1e-3, 30.0, 1e4], np.float32)
    with np.errstate(over="ignore"):
        sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    for op, ref in (("tanh", np.tanh(x)), ("sign", np.sign(x)), ("sigmoid", sig)):
        out = empty(vk, x.shape, D.float32)
        vk.elementwise(op, out, [put(vk, x, D.float32)])
        np.testing.assert_allclose(vk.to_numpy(out), ref, rtol=1e-6, atol=1e-7, err_msg=op)


def test_casts_and_int_ops(vk):
    f = np.array([-2.7, -0.5, 0.0, 0.4, 1.9, 3.0], np.float32)
    i = np.array([-3, -1, 0, 1, 2, 7], np.int32)
    cases = [
        ("copy", [put(vk, f, D.float32)], D.int32, f.astype(np.int32)),
        ("copy", [put(vk, i, D.int32)], D.float32, i.astype(np.float32)),
        ("copy", [put(vk, f, D.float32)], D.bool_, f != 0),
        ("copy", [put(vk, f != 0, D.bool_)], D.float32, (f != 0).astype(np.float32)),
        ("add", [put(vk, i, D.int32), 5], D.int32, i + 5),
        ("mul", [put(vk, i, D.int32), put(vk, i, D.int32)], D.int32, i * i),
        ("div", [put(vk, i, D.int32), 2], D.float32, i / 2),
        ("pow", [put(vk, i, D.int32), 3], D.int32, i**3),
        ("gt", [put(vk, i, D.int32), 0], D.bool_, i > 0),
        ("abs", [put(vk, i, D.int32)], D.int32, np.abs(i)),
        ("sign", [put(vk, i, D.int32)], D.int32, np.sign(i)),
        ("maximum", [put(vk, i, D.int32), 1], D.int32, np.maximum(i, 1)),
        ("mul", [put(vk, i, D.int32), 0.5], D.float32, i * 0.5),
        ("copy", [2.5], D.float32, np.full(6, 2.5)),
        ("where", [put(vk, i > 0, D.bool_), 1.0, put(vk, f, D.float32)], D.float32, np.where(i > 0, 1.0, f)),
    ]
    for op, args, out_dtype, want in cases:
        out = empty(vk, (6,), out_dtype)
        vk.elementwise(op, out, args)
        np.testing.assert_allclose(vk.to_numpy(out), want, rtol=1e-6, err_msg=f"{op} -> {out_dtype}")


def test_float16(vk):
    if not vk.supports(D.float16):
        with pytest.raises(UnsupportedError, match="float16"):
            vk.alloc(4, D.float16)
        return
    a = RNG.uniform(-2, 2, 10).astype(np.float16)
    out = empty(vk, (10,), D.float16)
    vk.elementwise("mul", out, [put(vk, a, D.float16), 3.0])
    np.testing.assert_allclose(vk.to_numpy(out).astype(np.float32), a.astype(np.float32) * 3, rtol=2e-3)
    s = empty(vk, (), D.float32)
    vk.reduce("sum", s, put(vk, a, D.float16), (0,))
    np.testing.assert_allclose(vk.to_numpy(s), a.astype(np.float32).sum(), rtol=1e-3)


# ---------------------------------------------------------------- reductions


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reduce_axes(vk, op):
    x = RNG.standard_normal((3, 4, 5))
    xt = np.ascontiguousarray(x.transpose(2, 0, 1))  # stored (5, 3, 4); viewed back as (3, 4, 5)
    views = [both(x, D.float32, vk), both(xt, D.float32, vk, shape=(3, 4, 5), strides=(4, 1, 12))]
    for v, c in views:
        for axes in [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)]:
            shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
            ov, oc = empty(vk, shape, D.float32), empty(CPU, shape, D.float64)
            vk.reduce(op, ov, v, axes)
            CPU.reduce(op, oc, c, axes)
            np.testing.assert_allclose(vk.to_numpy(ov), CPU.to_numpy(oc), rtol=1e-5, atol=1e-6, err_msg=str(axes))


def test_reduce_long_and_int(vk):
    x = RNG.standard_normal((3, 3000)).astype(np.float32)  # long rows: workgroup tree reduction
    for op in ("sum", "max", "argmin"):
        out = empty(vk, (3,), D.int32 if op.startswith("arg") else D.float32)
        vk.reduce(op, out, put(vk, x, D.float32), (1,))
        want = {"sum": x.sum(1), "max": x.max(1), "argmin": x.argmin(1)}[op]
        np.testing.assert_allclose(vk.to_numpy(out), want, rtol=1e-4, atol=1e-4, err_msg=op)
    i = RNG.integers(-100, 100, (4, 6)).astype(np.int32)
    out = empty(vk, (6,), D.int32)
    vk.reduce("sum", out, put(vk, i, D.int32), (0,))
    np.testing.assert_array_equal(vk.to_numpy(out), i.sum(0))
    b = RNG.random((4, 6)) > 0.5
    vk.reduce("sum", out, put(vk, b, D.bool_), (0,))
    np.testing.assert_array_equal(vk.to_numpy(out), b.sum(0))


def test_reduce_empty_sum_and_errors(vk):
    x = put(vk, np.zeros(0, np.float32), D.float32, shape=(2, 0, 3))
    out = empty(vk, (2, 3), D.float32)
    vk.reduce("sum", out, x, (1,))
    np.testing.assert_array_equal(vk.to_numpy(out), np.zeros((2, 3)))
    vk.reduce("sum", empty(vk, (0, 3), D.float32), x, (0,))  # empty output: nothing to do
    total = empty(vk, (), D.float32)
    vk.reduce("sum", total, x, (0, 1, 2))
    assert vk.to_numpy(total) == 0.0
    with pytest.raises(ValueError, match="empty"):
        vk.reduce("max", out, x, (1,))
    vk.reduce("sum", empty(vk, (0,), D.float32), put(vk, np.zeros(1, np.float32), D.float32, (0, 99999), (0, 0)), (1,))


def test_argmax_ties(vk):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, 1, 5, 5]], np.int32)
    for op, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
        for axis in (0, 1):
            shape = (4,) if axis == 0 else (3,)
            out = empty(vk, shape, D.int32)
            vk.reduce(op, out, put(vk, x, D.int32), (axis,))
            np.testing.assert_array_equal(vk.to_numpy(out), fn(x, axis=axis), err_msg=f"{op} {axis}")
    xf = np.zeros((2, 300), np.float32)  # all tied over a long row: first index
    xf[1, 7] = xf[1, 250] = 1.0
    out = empty(vk, (2,), D.int32)
    vk.reduce("argmax", out, put(vk, xf, D.float32), (1,))
    np.testing.assert_array_equal(vk.to_numpy(out), [0, 7])


# ---------------------------------------------------------------- matmul


@pytest.mark.parametrize(
    "batch,m,k,n", [((), 1, 1, 1), ((), 7, 13, 11), ((2,), 17, 3, 19), ((2, 3), 5, 16, 4), ((), 33, 40, 2)]
)
def test_matmul(vk, batch, m, k, n):
    a = RNG.standard_normal((*batch, m, k))
    b = RNG.standard_normal((*batch, k, n))
    va, ca = both(a, D.float32, vk)
    vb, cb = both(b, D.float32, vk)
    out = empty(vk, (*batch, m, n), D.float32)
    vk.matmul(out, va, vb)
    np.testing.assert_allclose(vk.to_numpy(out), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_transposed_and_broadcast(vk):
    a = RNG.standard_normal((6, 5))  # stored (k, m): a.T @ b without a copy
    b = RNG.standard_normal((6, 3))
    va = put(vk, a, D.float32, shape=(5, 6), strides=(1, 5))
    out = empty(vk, (5, 3), D.float32)
    vk.matmul(out, va, put(vk, b, D.float32))
    np.testing.assert_allclose(vk.to_numpy(out), a.T @ b, rtol=1e-4, atol=1e-5)
    w = RNG.standard_normal((3, 4))  # one weight broadcast over a batch of 4 (batch stride 0)
    xs = RNG.standard_normal((4, 2, 3))
    out = empty(vk, (4, 2, 4), D.float32)
    vk.matmul(out, put(vk, xs, D.float32), put(vk, w, D.float32, shape=(4, 3, 4), strides=(0, 4, 1)))
    np.testing.assert_allclose(vk.to_numpy(out), xs @ w, rtol=1e-4, atol=1e-5)
    ai = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    out = empty(vk, (3, 3), D.int32)
    vk.matmul(out, put(vk, ai, D.int32), put(vk, ai.T.copy(), D.int32))
    np.testing.assert_array_equal(vk.to_numpy(out), ai @ ai.T)


# ---------------------------------------------------------------- gather / scatter_add


def test_gather_scatter_add(vk):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    idx = np.array([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, -1, 1]], np.int32)  # duplicates and a negative index
    for dim, index in ((1, idx), (0, np.array([[0, 2, 1, 1, 0], [2, 2, 0, 1, 1]], np.int32))):
        out_v, out_c = empty(vk, index.shape, D.float32), empty(CPU, index.shape, D.float32)
        vk.gather(out_v, put(vk, x, D.float32), dim, put(vk, index, D.int32))
        CPU.gather(out_c, put(CPU, x, D.float32), dim, put(CPU, index, D.int32))
        np.testing.assert_array_equal(vk.to_numpy(out_v), CPU.to_numpy(out_c))
    src = RNG.standard_normal((3, 4)).astype(np.float32)
    for dtype, srcv in ((D.float32, src), (D.int32, (src * 10).astype(np.int32))):
        base = np.ones((3, 5), dtype.np)
        tv, tc = put(vk, base, dtype), put(CPU, base, dtype)
        vk.scatter_add(tv, 1, put(vk, idx, D.int32), put(vk, srcv, dtype))
        CPU.scatter_add(tc, 1, put(CPU, idx, D.int32), put(CPU, srcv, dtype))
        np.testing.assert_allclose(vk.to_numpy(tv), CPU.to_numpy(tc), rtol=1e-6)
    # many threads hitting one element: the atomic CAS loop must not lose updates
    many = np.ones((1, 2000), np.float32)
    t = put(vk, np.zeros((1, 1), np.float32), D.float32)
    vk.scatter_add(t, 1, put(vk, np.zeros((1, 2000), np.int32), D.int32), put(vk, many, D.float32))
    assert vk.to_numpy(t)[0, 0] == 2000.0


# float64 references of the formulas that are not an op's own (an op's formula is checked against its OpInfo's
# reference, the fused backward kernel of a record by the reference-gradient test; tests/test_ops.py)
FORMULA_REFERENCES = {
    "copy": lambda a: a,
    "add_scaled": lambda a, b, alpha: a + alpha * b,
    "pow_grad_base": lambda g, a, b: np.where(b == 0, 0, g * b * np.power(a, b - 1)),
    "pow_grad_exponent": lambda g, a, b, out: np.where((a == 0) & (b >= 0), 0, g * out * np.log(a)),
    "outside": lambda v, lo, hi: ~((v >= lo) & (v <= hi)),
    "inside": lambda v, lo, hi: (v >= lo) & (v <= hi),
    "outside_but": lambda v, lo, hi, a: ~((v >= lo) & (v <= hi)) & (v != a),
    "inside_but": lambda v, lo, hi, a: (v >= lo) & (v <= hi) & (v != a),
    "flag_or": np.maximum,
    "where": np.where,
    "clamp": lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi),
    "lerp": lambda a, b, w: a + w * (b - a),
    "leaky_relu": lambda a, slope: np.where(a > 0, a, a * slope),
    "leaky_relu_grad": lambda g, x, slope: np.where(x > 0, g, g * slope),
    "exp_sub": lambda x, mx: np.exp(x - mx),
    "log_softmax_out": lambda x, mx, s: x - mx - np.log(s),
    "log_softmax_grad": lambda g, y, s: g - np.exp(y) * s,
    "softmax_grad": lambda g, y, s: y * (g - s),
    "axpby": lambda x, y, a, b: a * x + b * y,
    "ema_sq": lambda v, g, beta: beta * v + (1 - beta) * g**2,
    "sub_scaled": lambda x, y, s: x - s * y,
    "adam_step_size": lambda lr, t, beta1: lr / (1 - beta1**t),
    "adam_rsqrt_bc": lambda t, beta2: 1 / np.sqrt(1 - beta2**t),
    "adam_apply": lambda p, mom, v, step, rbc, eps, decay: p * decay - step * mom / (np.sqrt(v) * rbc + eps),
}


def _radam_rect(t: np.ndarray, b2: np.ndarray) -> np.ndarray:
    rho_inf = 2 / (1 - b2) - 1
    rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
    return np.sqrt(np.maximum((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho), 0))


# the parameterised elementwise ops (ops/parametric.py); their params are random too here
FORMULA_REFERENCES |= {
    "softplus": lambda a, beta, th: np.where(a * beta > th, a, np.log1p(np.exp(a * beta)) / beta),
    "softplus_grad": lambda g, x, beta, th: np.where(x * beta > th, g, g / (1 + np.exp(-x * beta))),
    "elu": lambda a, alpha, scale, s_in: scale * np.where(a > 0, a, alpha * np.expm1(a * s_in)),
    "elu_grad": lambda g, x, alpha, scale, s_in: g * scale * np.where(x > 0, 1, alpha * s_in * np.exp(x * s_in)),
    "hardtanh": lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi),
    "hardtanh_grad": lambda g, x, lo, hi: np.where((x > lo) & (x < hi), g, 0),
    "isclose": lambda a, b, rtol, atol, eq: (
        (a == b)
        | ((np.abs(a - b) <= atol + rtol * np.abs(b)) & np.isfinite(a - b))
        | ((eq != 0) & np.isnan(a) & np.isnan(b))
    ),
    # the optimizers' (optim/fused.py)
    "acc_sq": lambda s, g: s + g * g,
    "adadelta_apply": lambda p, u, v, g, lr, eps: p - lr * np.sqrt(u + eps) / np.sqrt(v + eps) * g,
    "adadelta_acc": lambda u, v, g, rho, eps: rho * u + (1 - rho) * (np.sqrt(u + eps) / np.sqrt(v + eps) * g) ** 2,
    "adagrad_lr": lambda lr, t, decay: lr / (1 + (t - 1) * decay),
    "adamax_inf": lambda u, g, beta2, eps: np.maximum(beta2 * u, np.abs(g) + eps),
    "div_apply": lambda p, m, u, step: p - step * m / u,
    "nadam_apply": lambda p, g, m, v, cg, cm, r, eps, decay: p * decay + (cg * g + cm * m) / (np.sqrt(v) * r + eps),
    "nadam_mu_product": lambda prod, t, b1, psi: prod * b1 * (1 - 0.5 * 0.96 ** (t * psi)),
    "nadam_coef_g": lambda lr, prod, t, b1, psi: -lr * (1 - b1 * (1 - 0.5 * 0.96 ** (t * psi))) / (1 - prod),
    "nadam_coef_m": lambda lr, prod, t, b1, psi: (
        -lr * b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi)) / (1 - prod * b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi)))
    ),
    "radam_apply": lambda p, m, v, step, a, b, eps, decay: p * decay - step * m * (a / (np.sqrt(v) + eps) + b),
    "radam_a": lambda t, b2, first: np.where(t >= first, _radam_rect(t, b2) * np.sqrt(1 - b2**t), 0.0),
    "radam_b": lambda t, first: np.where(t >= first, 0.0, 1.0),
    # multinomial's (ops/sampling.py)
    "es_key": lambda u, w: np.log(u) / w,
}
# operands that must be in (0, 1): logarithms, square roots, powers of a beta
# the fused layer_norm's and cross-entropy's compositions (ops/norm.py, nn/functional.py)
FORMULA_REFERENCES |= {
    "ln_sqdev": lambda x, mu: (x - mu) ** 2,
    "ln_rstd": lambda s, n, eps: 1 / np.sqrt(s / n + eps),
    "ln_out": lambda x, mu, r, w, b: (x - mu) * r * w + b,
    "ln_h_xhat": lambda g, w, x, mu, r: g * w * ((x - mu) * r),
    "ln_dx": lambda g, w, x, mu, r, mh, mhx, n: r * (g * w - mh / n - (x - mu) * r * (mhx / n)),
    "ln_dweight": lambda g, x, mu, r: g * (x - mu) * r,
    "ce_lse": lambda mx, s: mx + np.log(s),
    "ce_safe": lambda t, ii: np.where(t == ii, 0, t),
    "ce_keep": lambda t, ii: np.where(t == ii, 0, 1),
    "ce_row": lambda lse, pk, wk, keep, sxw, w_sum, a, c: np.where(
        keep > 0, -(a * wk * (pk - lse)) + c * (w_sum * lse - sxw), 0
    ),
    "ce_grad": lambda x, lse, g, den, wk, keep, wc, w_sum, a, c: (
        np.exp(x - lse) * (np.where(keep > 0, g / den, 0) * (a * wk + c * w_sum))
        - np.where(keep > 0, g / den, 0) * c * wc
    ),
    "ce_onehot": lambda g, den, wk, keep, a: np.where(keep > 0, -(g / den) * (a * wk), 0),
}
_DOMAINS |= {
    "ln_rstd": {0: (0.0, 2.0), 1: (1.0, 10.0), 2: (1e-6, 1e-3)},
    "ln_dx": {7: (1.0, 10.0)},
    "ce_lse": {1: (0.1, 2.0)},
    "ce_grad": {3: (0.5, 2.0)},
    "ce_onehot": {1: (0.5, 2.0)},
}


_UNIT_OPERANDS = {
    "es_key": {0, 1},
    "softplus": {1},
    "softplus_grad": {2},
    "log_softmax_out": {2},
    "pow_grad_base": {1},
    "pow_grad_exponent": {1},
    "adam_apply": {2, 4, 5},
    "adam_step_size": {0, 1, 2},
    "adam_rsqrt_bc": {0, 1},
}


def _covered_by_an_op(name: str) -> bool:
    return name in RECORDS or (name.endswith("_grad") and name[: -len("_grad")] in RECORDS)


def test_every_formula_has_a_reference():
    missing = sorted(n for n in ew.OPS if not _covered_by_an_op(n) and n not in FORMULA_REFERENCES)
    assert not missing, f"formulas with no float64 reference (add one to FORMULA_REFERENCES): {missing}"
    assert not set(FORMULA_REFERENCES) - set(ew.OPS), "references of formulas that no longer exist"


@pytest.mark.parametrize("op", sorted(FORMULA_REFERENCES))
def test_formulas_match_float64_reference(vk, op):
    spec = ew.OPS[op]
    shape = (3, 5)
    rng = np.random.default_rng(3)
    values = []
    for i in range(spec.arity):
        if i == spec.bool_operand:
            values.append(rng.random(shape) > 0.5)
        elif i in _UNIT_OPERANDS.get(op, ()):
            values.append(rng.uniform(0.1, 0.9, shape))
        elif i in _DOMAINS.get(op, {}):
            values.append(rng.uniform(*_DOMAINS[op][i], shape))
        else:
            values.append(rng.uniform(-2.0, 2.0, shape))
    want = np.asarray(FORMULA_REFERENCES[op](*values))
    for be, dtype in ((CPU, D.float64), (vk, D.float32)):
        args = [put(be, v, D.bool_ if v.dtype == np.bool_ else dtype) for v in values]
        out = empty(be, shape, D.bool_ if spec.returns_bool else dtype)
        be.elementwise(op, out, args)
        got = be.to_numpy(out)
        if spec.returns_bool:
            np.testing.assert_array_equal(got, want, err_msg=f"{op} on {be.name}")
        else:
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=f"{op} on {be.name}")


_LET = re.compile(r"\s*let t\d+: (\w+) = (.*);$")
_FLOAT_COMPARISON = re.compile(r"[\w)] (<|<=|>|>=|==) [\w(]")


@pytest.mark.parametrize("op", sorted(ew.OPS))
def test_formulas_compile_to_wgsl_a_fast_math_driver_cannot_break(op):
    """WGSL lets a driver assume no NaN, ignore the sign of zero and divide as x * (1 / y), and NVIDIA's does
    (mathlib.py): every float comparison an f32 formula emits carries a bit-level NaN test, every division goes
    through vk_div (exact for |y| > 2**126) and -0.0 is a bit pattern. The H200 run of test_special_values shows
    the values; this shows the code on any adapter."""
    spec = ew.OPS[op]
    kinds = [
        ("t", D.bool_ if i == spec.bool_operand else D.int32 if spec.integer_only else D.float32)
        for i in range(spec.arity)
    ]
    compute = D.int32 if spec.integer_only else D.float32
    src, _ = vk_elementwise._formula(op, D.float32, kinds, compute, spec.arity + 1)
    assert "f32(-0.0)" not in src, op
    for line in src[src.index("fn vk_op(") :].splitlines():
        m = _LET.match(line)
        if m is None:
            continue
        ty, code = m.groups()
        assert " / " not in code, f"{op}: a plain division: {line}"
        if ty == "bool" and _FLOAT_COMPARISON.search(code) and not spec.integer_only:
            assert "bitcast<u32>" in code, f"{op}: a float comparison without a NaN test: {line}"
    if not spec.float_only and spec.bool_operand is None:  # the H200 computed i32 % as if unsigned
        ints = [("t", D.int32)] * spec.arity
        src, _ = vk_elementwise._formula(op, D.int32, ints, D.int32, spec.arity + 1)
        assert " % " not in src, f"{op}: WGSL's integer %"


def test_a_gpu_knows_its_memory(vk, monkeypatch):
    """A GPU's pool refuses at once what exceeds its device-local heaps (a driver may otherwise spill into host
    memory: the H200 host ran out of memory for a tensor of 2**42 floats); lavapipe's are read as a GPU's would be."""
    from vkblas.backend.vulkan import backend as vk_backend

    monkeypatch.setitem(vk.dev.info, "adapter_type", "DiscreteGPU")
    memory = vk_backend._memory(vk.dev)
    assert isinstance(memory, int) and memory > 0
    monkeypatch.setattr(vk.pool, "memory", memory)
    with pytest.raises(MemoryError, match="bytes of memory"):
        vk.alloc(2**42, D.float32)


# ---------------------------------------------------------------- random


def test_random_matches_cpu(vk):
    """The same numbers on both backends, and the documented formula's (references.py, float64)."""
    shape = (7, 33)
    for dist, exact in (("uniform", True), ("normal", False)):
        ov, oc = empty(vk, shape, D.float32), empty(CPU, shape, D.float32)
        vk.random(ov, dist, 1234, 2**32 - 100)  # counter wraps inside the tensor
        CPU.random(oc, dist, 1234, 2**32 - 100)
        got, want = vk.to_numpy(ov), CPU.to_numpy(oc)
        ref = (pcg_uniform if dist == "uniform" else pcg_normal)(shape, 1234, 2**32 - 100)
        if exact:
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(want, ref.astype(np.float32))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-5)
    # strided output: element i in C order of the view still gets counter + i
    base = put(vk, np.zeros(20, np.float32), D.float32)
    view = View(base.storage, (2, 3), (1, 5), 2)
    vk.random(view, "uniform", 5, 0)
    ref = empty(CPU, (2, 3), D.float32)
    CPU.random(ref, "uniform", 5, 0)
    np.testing.assert_array_equal(vk.to_numpy(view), CPU.to_numpy(ref))


# ---------------------------------------------------------------- runtime: batching, pool, large grids


def test_pool_reuse_with_pending_work(vk):
    acc = put(vk, np.zeros(50, np.float32), D.float32)
    want = np.zeros(50, np.float32)
    for i in range(60):
        vals = np.full(50, float(i), np.float32)
        tmp = put(vk, vals, D.float32)  # upload into a recycled buffer while earlier dispatches are pending
        tmp2 = empty(vk, (50,), D.float32)
        vk.elementwise("mul", tmp2, [tmp, 2.0])
        vk.elementwise("add", acc, [acc, tmp2])
        want += vals * 2
        del tmp, tmp2
        if i % 17 == 0:
            np.testing.assert_array_equal(vk.to_numpy(acc), want)
    np.testing.assert_array_equal(vk.to_numpy(acc), want)
    assert vk.pool.cached_bytes > 0


def test_chain_beyond_flush_threshold(vk):
    n = vk_queue.FLUSH_DISPATCHES + 300
    a = put(vk, np.zeros(8, np.float32), D.float32)
    b = empty(vk, (8,), D.float32)
    for _ in range(n):
        vk.elementwise("add", b, [a, 1.0])
        a, b = b, a
    np.testing.assert_array_equal(vk.to_numpy(a), np.full(8, n, np.float32))


def full_batches(vk):
    """Sync, then leave the runtime as in the middle of a long loop: batches of FLUSH_DISPATCHES from the first."""
    vk.synchronize()
    vk.rt.limit = vk_queue.FLUSH_DISPATCHES


def test_work_is_submitted_every_flush_threshold_dispatches(vk):
    """Eager work and replays reach the GPU in batches of FLUSH_DISPATCHES, not at the next sync point only: the
    GPU runs one batch while the host records the next (a replay longer than a batch is split across two)."""
    rt, most = vk.rt, vk_queue.FLUSH_DISPATCHES
    assert most <= 256  # small batches (the module docstring): 2048 made host and GPU take turns
    a = put(vk, np.zeros(8, np.float32), D.float32)
    full_batches(vk)
    start = rt._submitted
    for _ in range(3 * most):
        vk.elementwise("add", a, [a, 1.0])
    assert rt.count == 0 and rt._submitted - start == 3 * most
    n = most + 5
    rt.limit = most
    cap = vk.capture_begin()
    for _ in range(n):
        vk.elementwise("add", a, [a, 1.0])
    vk.capture_end()
    for _ in range(2):
        vk.capture_replay(cap)
    assert rt.count < most
    np.testing.assert_array_equal(vk.to_numpy(a), np.full(8, 3 * most + 3 * n, np.float32))
    vk.capture_release(cap)


def test_after_a_wait_the_first_batches_are_small_and_submitted_at_once(vk, monkeypatch):
    """After a sync the device idles: its next work goes out after FIRST_BATCH dispatches, submitted on the calling
    thread (the submit thread would wait for the GIL while this one records: a loop that reads its loss every step
    left the GPU idle until the read), and each batch doubles up to FLUSH_DISPATCHES. Replays follow the same
    schedule; a read starts it again."""
    rt, first, most = vk.rt, vk_queue.FIRST_BATCH, vk_queue.FLUSH_DISPATCHES
    assert 1 <= first < most
    handed, real = [], rt._submitter.submit

    def submit(fn, *batch):
        handed.append(batch[-1])  # its dispatch count
        return real(fn, *batch)

    monkeypatch.setattr(rt._submitter, "submit", submit)
    a = put(vk, np.zeros(8, np.float32), D.float32)
    vk.synchronize()
    sizes, size = [], first
    while size < most:
        sizes.append(size)
        size *= 2
    start = rt._submitted
    for i, size in enumerate(sizes):
        for _ in range(size):
            vk.elementwise("add", a, [a, 1.0])
        assert rt.count == 0 and rt._submitted - start == sum(sizes[: i + 1]) and not rt._in_flight
    assert handed == [] and rt.limit == most
    for _ in range(most):
        vk.elementwise("add", a, [a, 1.0])
    assert handed == [most]  # full batches go to the submit thread
    assert vk.to_numpy(a)[0] == sum(sizes) + most and rt.limit == first
    cap = vk.capture_begin()
    for _ in range(first + 3):
        vk.elementwise("add", a, [a, 1.0])
    vk.capture_end()
    vk.synchronize()
    start = rt._submitted
    vk.capture_replay(cap)  # split: its first FIRST_BATCH dispatches are submitted before the rest is recorded
    assert rt._submitted - start == first and rt.count == 3
    np.testing.assert_array_equal(vk.to_numpy(a), np.full(8, sum(sizes) + most + 2 * (first + 3), np.float32))
    vk.capture_release(cap)


def test_reads_wait_through_an_interrupt_without_losing_the_next_read(vk, monkeypatch):
    """Ctrl-C while a read waits for the device: the read-back buffer, whose map may still finish later, is set
    aside (with the cell its callback writes), and the next read uses a new one and returns the right bytes."""
    a = put(vk, np.arange(8, dtype=np.float32), D.float32)
    vk.synchronize()
    real, calls = vk_queue._poll, []

    def interrupted(device, wait, index):
        calls.append(wait)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(device, wait, index)

    monkeypatch.setattr(vk_queue, "_poll", interrupted)
    staging = vk.rt._staging
    with pytest.raises(KeyboardInterrupt):
        vk.to_numpy(a)
    assert vk.rt._staging is None and vk.rt._abandoned[-1][0] is staging
    vk.elementwise("add", a, [a, 1.0])
    np.testing.assert_array_equal(vk.to_numpy(a), np.arange(8, dtype=np.float32) + 1)
    assert vk.rt._staging is not staging


@pytest.fixture
def held_submits(vk, monkeypatch):
    """The submit thread held back: each handed-off batch waits for ``release`` (set by a timer, so that a call
    which rightly waits for the thread does not hang the test)."""
    release, real = threading.Event(), vk.rt._submit

    def submit(*batch):
        release.wait(10)
        real(*batch)

    full_batches(vk)
    monkeypatch.setattr(vk.rt, "_submit", submit)
    yield release
    release.set()
    monkeypatch.undo()
    vk.synchronize()


def test_an_upload_into_a_recycled_buffer_waits_for_the_submit_thread(vk, held_submits):
    """A full batch is submitted by the submit thread; an upload (queue.write_buffer, which runs before the next
    submit's dispatches) into a recycled buffer that the handed-off batch reads must wait until it is submitted.
    Before the wait, the batch read the new data (the runtime only checked its own open batch)."""
    n, most = 64, vk_queue.FLUSH_DISPATCHES
    src = put(vk, np.full(n, 1.0, np.float32), D.float32)
    out = empty(vk, (n,), D.float32)
    vk.elementwise("mul", out, [src, 0.0])
    for _ in range(most - 1):  # out += src: with the mul, a whole batch, handed off and held back
        vk.elementwise("add", out, [out, src])
    assert vk.rt.count == 0 and len(vk.rt._in_flight) == 1 and vk.rt.pending  # pending: not yet submitted
    pb = src.storage.buffer
    del src
    threading.Timer(0.3, held_submits.set).start()
    again = put(vk, np.full(n, 100.0, np.float32), D.float32)  # the same pooled buffer, overwritten
    assert again.storage.buffer is pb
    np.testing.assert_array_equal(vk.to_numpy(out), np.full(n, most - 1, np.float32))


def test_an_interrupted_sync_keeps_the_order_of_the_work(vk, held_submits, monkeypatch):
    """Ctrl-C while a sync waits for the submit thread (a training loop stopped, then a checkpoint read): the open
    batch must not be submitted ahead of the batch still on the thread. Before, the wait forgot that batch and the
    sync's own submit went first, so the later ``out *= 2`` ran before the batch that sets ``out``."""
    most = vk_queue.FLUSH_DISPATCHES
    out = put(vk, np.full(8, 7.0, np.float32), D.float32)
    vk.elementwise("mul", out, [out, 0.0])
    for _ in range(most - 1):  # out = 0 + 255: a whole batch, handed off and held back
        vk.elementwise("add", out, [out, 1.0])
    vk.elementwise("mul", out, [out, 2.0])  # the open batch
    future = vk.rt._in_flight[0]
    real = future.exception
    calls = []

    def interrupted(timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(timeout)

    monkeypatch.setattr(future, "exception", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vk.synchronize()
    assert vk.rt.pending
    held_submits.set()
    np.testing.assert_array_equal(vk.to_numpy(out), np.full(8, 2 * (most - 1), np.float32))


def test_full_batches_are_submitted_inline_once_threads_take_no_work(vk, monkeypatch):
    """At interpreter exit executors refuse new work (``atexit`` code may still run tensors): a full batch is then
    submitted on the calling thread, in order, instead of the error escaping from an arbitrary op."""
    closed = ThreadPoolExecutor(max_workers=1)
    closed.shutdown()
    full_batches(vk)
    monkeypatch.setattr(vk.rt, "_submitter", closed)
    most = vk_queue.FLUSH_DISPATCHES
    a = put(vk, np.zeros(8, np.float32), D.float32)
    for _ in range(2 * most + 3):
        vk.elementwise("add", a, [a, 1.0])
    assert not vk.rt._in_flight and vk.rt.count == 3
    np.testing.assert_array_equal(vk.to_numpy(a), np.full(8, 2 * most + 3, np.float32))


def test_a_failed_hand_off_is_raised_at_the_next_sync_and_later_work_still_runs(vk, monkeypatch):
    """A batch whose submit fails on the submit thread is reported (with its dispatch count) at the next call that
    waits for the thread; the work recorded after it is submitted all the same, and the runtime goes on."""
    real, calls = vk.rt._submit, []

    def submit(encoder, windows, npending):
        calls.append(npending)
        if len(calls) == 1:
            raise vk_queue._lost(npending, RuntimeError("injected"))
        real(encoder, windows, npending)

    full_batches(vk)
    monkeypatch.setattr(vk.rt, "_submit", submit)
    most = vk_queue.FLUSH_DISPATCHES
    a, b = put(vk, np.zeros(8, np.float32), D.float32), put(vk, np.zeros(8, np.float32), D.float32)
    for _ in range(most):  # a's batch: lost
        vk.elementwise("add", a, [a, 1.0])
    for _ in range(3):  # b's work: recorded after it, in the open batch
        vk.elementwise("add", b, [b, 1.0])
    with pytest.raises(BackendError, match=rf"submitting {most} recorded dispatch\(es\) failed.*injected"):
        vk.synchronize()
    monkeypatch.undo()
    np.testing.assert_array_equal(vk.to_numpy(b), np.full(8, 3, np.float32))
    vk.elementwise("add", a, [a, 1.0])
    assert vk.to_numpy(a).shape == (8,)  # usable again
    assert calls == [most, 3]


def test_large_grid_2d(vk):
    n = 65535 * 256 + 1000  # more workgroups than one grid dimension allows
    ones = put(vk, np.ones(1, np.int32), D.int32, shape=(n,), strides=(0,))
    out = empty(vk, (n,), D.int32)
    vk.elementwise("add", out, [ones, 1])
    assert (vk.to_numpy(out) == 2).all()
    tail = View(out.storage, (5,), (1,), n - 5)
    np.testing.assert_array_equal(vk.to_numpy(tail), np.full(5, 2))


# ---------------------------------------------------------------- errors and recovery


def test_errors_then_success(vk):
    with pytest.raises(MemoryError, match="bytes"):  # far beyond the device's memory: refused, not attempted
        vk.alloc(2**42, D.float32)
    with pytest.raises(UnsupportedError, match="float64"):
        vk.alloc(4, D.float64)
    x = put(vk, np.arange(4, dtype=np.float32), D.float32)
    with pytest.raises(BackendError, match=r"float32\[4\]"):
        vk.elementwise("add", empty(vk, (3,), D.float32), [x, x])  # shape mismatch names shapes and dtypes
    with pytest.raises(BackendError, match="outside"):
        vk.elementwise("neg", empty(vk, (4,), D.float32), [View(x.storage, (4,), (1,), 2)])
    out = empty(vk, (4,), D.float32)
    vk.elementwise("add", out, [x, 1.0])
    np.testing.assert_array_equal(vk.to_numpy(out), [1, 2, 3, 4])


def test_wgpu_validation_error_recovers(vk, caplog):
    x = put(vk, np.arange(4, dtype=np.float32), D.float32)
    out = empty(vk, (4,), D.float32)
    vk.elementwise("neg", out, [x])  # builds a plan; reuse its kernel for a deliberately invalid dispatch
    plan = next(p for k, p in vk.plans.items() if k[0] == "neg")
    args = (0, 0, 4, 4, 1, 1)
    vk.rt.dispatch(plan.kernel, [out.storage.buffer, x.storage.buffer], plan.fmt, args, (70000, 1, 1))
    with pytest.raises(BackendError, match="lost"):
        vk.synchronize()
    vk.elementwise("add", out, [x, 2.0])
    np.testing.assert_array_equal(vk.to_numpy(out), [2, 3, 4, 5])


# ---------------------------------------------------------------- vec4 elementwise variant


class _Recorded:
    """Collects the pipelines that ``rt.record`` dispatches (to see which variant ran)."""

    def __init__(self, vk):
        self.vk, self.pipelines = vk, []

    def __enter__(self):
        rt = self.vk.rt
        self.orig = rt.record

        def spy(pipeline, *a):
            self.pipelines.append(pipeline)
            return self.orig(pipeline, *a)

        rt.record = spy
        return self

    def __exit__(self, *exc):
        del self.vk.rt.record


def _plan_of(vk, op, out, args):
    key = [op, out.dtype, out.shape, out.strides]
    for a in args:
        key += (a.dtype, a.shape, a.strides) if isinstance(a, View) else (type(a),)
    return vk.plans[tuple(key)]


@pytest.mark.parametrize("n", [4, 8, 2048, 2052, 4100, 6, 4097])
def test_elementwise_vec4_choice(vk, n):
    """vec4 when rank 1, n % 4 == 0 and every offset % 4 == 0 (full and tail paths); scalar otherwise."""
    a, b = RNG.standard_normal(n + 8), RNG.standard_normal(n + 8)
    for off_a, off_out in [(0, 0), (4, 8), (1, 0), (0, 3)]:
        va, ca = both(a, D.float32, vk, shape=(n,), strides=(1,), offset=off_a)
        vb, cb = both(b, D.float32, vk, shape=(n,), strides=(1,), offset=4)
        out = View(vk.alloc(n + 8, D.float32), (n,), (1,), off_out)
        with _Recorded(vk) as rec:
            vk.elementwise("add", out, [va, vb])
        plan = _plan_of(vk, "add", out, [va, vb])
        vec = n % 4 == 0 and off_a % 4 == 0 and off_out % 4 == 0
        assert (plan.vec is not None) == (n % 4 == 0)
        assert rec.pipelines == [plan.vec.pipeline if vec else plan.pipeline]
        want = CPU.to_numpy(ca) + CPU.to_numpy(cb)
        np.testing.assert_allclose(vk.to_numpy(out), want, rtol=1e-6, atol=1e-6, err_msg=f"n={n} {off_a},{off_out}")


def test_elementwise_vec4_dtypes_and_broadcast(vk):
    n = 1028
    c = RNG.random(n) > 0.5
    x, y = RNG.standard_normal(n), RNG.standard_normal(1)
    vc, vx = put(vk, c, D.bool_), put(vk, x, D.float32)
    vy = put(vk, np.concatenate([[7.0], y]), D.float32, shape=(n,), strides=(0,), offset=1)  # broadcast, offset 1
    out = empty(vk, (n,), D.float32)
    with _Recorded(vk) as rec:
        vk.elementwise("where", out, [vc, vx, vy])
    assert rec.pipelines == [_plan_of(vk, "where", out, [vc, vx, vy]).pipeline]  # offset 1: scalar variant
    np.testing.assert_allclose(vk.to_numpy(out), np.where(c, x, y[0]), rtol=1e-6)
    vy0 = put(vk, y, D.float32, shape=(n,), strides=(0,))
    with _Recorded(vk) as rec:
        vk.elementwise("where", out, [vc, vx, vy0])
    assert rec.pipelines == [_plan_of(vk, "where", out, [vc, vx, vy0]).vec.pipeline]
    np.testing.assert_allclose(vk.to_numpy(out), np.where(c, x, y[0]), rtol=1e-6)
    ob = empty(vk, (n,), D.bool_)
    vk.elementwise("gt", ob, [vx, 0.25])  # bool output: vec4<u32>
    np.testing.assert_array_equal(vk.to_numpy(ob), x > 0.25)
    i = RNG.integers(-50, 50, n).astype(np.int32)
    oi = empty(vk, (n,), D.int32)
    vk.elementwise("mul", oi, [put(vk, i, D.int32), 3])
    np.testing.assert_array_equal(vk.to_numpy(oi), i * 3)
    if vk.supports(D.float16):
        h = empty(vk, (n,), D.float16)
        vk.elementwise("mul", h, [put(vk, x, D.float16), 2.0])
        np.testing.assert_allclose(vk.to_numpy(h), (x.astype(np.float16) * 2).astype(np.float16), rtol=1e-3)


# ---------------------------------------------------------------- reductions: rows, split


def _reduce_check(vk, x: np.ndarray, op: str, axes, dtype=D.float32, **layout):
    v, c = both(x, dtype, vk, **layout)
    shape = tuple(n for d, n in enumerate(v.shape) if d not in [a % len(v.shape) for a in axes])
    odt = D.int32 if op.startswith("arg") or dtype is D.bool_ else dtype
    ov, oc = empty(vk, shape, odt), empty(CPU, shape, D.int32 if odt is D.int32 else D.float64)
    vk.reduce(op, ov, v, tuple(axes))
    CPU.reduce(op, oc, c, tuple(axes))
    got, want = vk.to_numpy(ov), CPU.to_numpy(oc)
    if odt is D.int32:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {x.shape} {axes}")
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-4, err_msg=f"{op} {x.shape} {axes}")


@pytest.mark.parametrize("rows", [64, 65, 1000, 1700, 20000, 40000])
def test_reduce_tall_split(vk, rows):
    """Sum over dim 0 of (N, 10) (the bias-gradient shape): one pass up to MEDIUM elements (the lanes of a workgroup
    share a column: all of them for SMALL inputs, as many as keep each one's loop short above), then splits of
    every lane's rows; splits interleaved over the rows (one lane per column) above MEDIUM."""
    x = RNG.standard_normal((rows, 10))
    x[rows // 2, 3] = x[rows - 1, 4] = 50.0  # ties for argmax across splits: the first wins
    for op in ("sum", "max", "argmax", "argmin"):
        _reduce_check(vk, x, op, (0,))
    key = ("reduce", "sum", D.float32, (10,), (1,), D.float32, (rows, 10), (10, 1), (0,))
    assert isinstance(vk.plans[key], SplitPlan) == (rows >= 20000)


@pytest.mark.parametrize("shape", [(512, 256), (512, 512), (300, 701), (129, 1000)])
def test_reduce_medium_strided_in_one_pass(vk, shape):
    """The bias gradient of a 256- or 512-wide layer at batch 512 (and odd sizes) sums over dim 0 in one pass: as
    many lanes per column as keep each lane's loop to SPLIT_MIN_ITERS; every op, ties included, as numpy."""
    x = RNG.standard_normal(shape)
    x[shape[0] // 2, 3] = x[shape[0] - 1, 3] = x[1, 3] = 50.0  # ties in one column, across lanes: the first wins
    for op in ("sum", "max", "argmax", "argmin"):
        _reduce_check(vk, x, op, (0,))
    key = ("reduce", "sum", D.float32, shape[1:], (1,), D.float32, shape, (shape[1], 1), (0,))
    assert not isinstance(vk.plans[key], SplitPlan)
    assert shape[0] * shape[1] <= MEDIUM


@pytest.mark.parametrize("n", [16384, 16385, 100_003])
def test_reduce_long_split(vk, n):
    """A long contiguous row into one output: chunked splits from 16385 elements (64 trips of 256 lanes)."""
    x = RNG.standard_normal(n)
    x[n // 3] = x[n - 2] = 9.0
    for op in ("sum", "max", "argmax", "min", "argmin"):
        _reduce_check(vk, x, op, (0,))
    _reduce_check(vk, RNG.standard_normal((3, n // 3)), "sum", (1,))
    _reduce_check(vk, RNG.random(n) > 0.5, "sum", (0,), D.bool_)
    _reduce_check(vk, RNG.integers(-9, 9, n), "max", (0,), D.int32)


def test_reduce_rows_cooperative(vk):
    """Rows of 2..1000 contiguous elements (softmax / cross-entropy shapes), strided inputs, f16 workspaces."""
    for shape in [(300, 10), (50, 1000), (7, 3), (1000, 2), (33, 129)]:
        x = RNG.standard_normal(shape)
        for op in ("sum", "max", "argmax"):
            _reduce_check(vk, x, op, (1,))
    xt = RNG.standard_normal((200, 30))  # viewed transposed: reduced dim strided
    _reduce_check(vk, xt, "sum", (1,), shape=(30, 200), strides=(1, 30))
    _reduce_check(vk, xt, "argmin", (0,), shape=(30, 200), strides=(1, 30))
    _reduce_check(vk, RNG.standard_normal((4, 50, 6)), "sum", (0, 2))
    if vk.supports(D.float16):
        h = RNG.standard_normal(40000).astype(np.float16)
        out = empty(vk, (), D.float16)
        vk.reduce("max", out, put(vk, h, D.float16), (0,))
        assert vk.to_numpy(out) == h.max()


def test_reduce_beyond_loop_limit(vk):
    """2**24 + 3 elements into one output (one invocation used to loop > 65535 times on llvmpipe)."""
    n = (1 << 24) + 3
    ones = put(vk, np.ones(1, np.int32), D.int32, shape=(n,), strides=(0,))
    out = empty(vk, (), D.int32)
    vk.reduce("sum", out, ones, (0,))
    assert int(vk.to_numpy(out)) == n
    x = np.zeros(n, np.float32)
    x[n - 1] = 2.0
    x[7] = 1.0
    vx = put(vk, x, D.float32)
    vk.reduce("argmax", out, vx, (0,))
    assert int(vk.to_numpy(out)) == n - 1
    s = empty(vk, (), D.float32)
    vk.reduce("sum", s, vx, (0,))
    assert float(vk.to_numpy(s)) == 3.0


# ---------------------------------------------------------------- device copy


def test_device_copy_in_order(vk):
    x = put(vk, np.arange(100, dtype=np.float32), D.float32)
    y = empty(vk, (100,), D.float32)
    z = empty(vk, (100,), D.float32)
    vk.elementwise("mul", x, [x, 2.0])  # recorded before the copy
    device_copy(vk, y.storage, x.storage, 400)
    vk.elementwise("add", z, [y, 1.0])  # reads the copy: a new compute pass after it
    np.testing.assert_array_equal(vk.to_numpy(z), np.arange(100) * 2 + 1)
    with pytest.raises(BackendError, match="multiple of 4"):
        device_copy(vk, y.storage, x.storage, 6)
    with pytest.raises(BackendError, match="one buffer"):
        device_copy(vk, x.storage, x.storage, 4)
    with pytest.raises(BackendError, match="exceed"):
        device_copy(vk, y.storage, x.storage, 1 << 20)
    assert copy_bandwidth(vk, 1 << 16, reps=2) > 0
