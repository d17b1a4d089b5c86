"""No failed call poisons the device: a long seeded sequence of random ops on random shapes (0-d and zero-size
included) with deliberate bad calls mixed in, all in one process, every result compared with the cpu backend and,
where one exists, a float64 numpy reference.

Bad calls: shape mismatches, dims out of range, bad indices (reported at the next sync point on Vulkan), dtype
errors, an allocation far beyond the device's memory, probabilities outside [0, 1] and integer division by zero
(device-side checks), host reads inside a graph capture, a wgpu validation error. After each one the next good
calls must give the same results as the cpu, on tensors made before and after the failure alike, and the runtime
must hold no leftover state (open recording, unread checks).

``VKBLAS_FUZZ_STEPS`` sets the length (default 25000: about 40 s on lavapipe with 2 cores); ``VKBLAS_FUZZ_SEED``
the seed (each seed is a different sequence; the failing step and seed are in the message).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import vkblas as vb
import vkblas.nn.functional as F
from conftest import requires_vulkan

STEPS = int(os.environ.get("VKBLAS_FUZZ_STEPS", "25000"))
SEED = int(os.environ.get("VKBLAS_FUZZ_SEED", "20260901"))
DEVICES = ("cpu", "vulkan")
Rng = np.random.Generator


def shape(rng: Rng, max_dims: int = 3) -> tuple[int, ...]:
    """A random shape: 0-d, size-0, size-1 and small dims."""
    nd = int(rng.integers(0, max_dims + 1))
    return tuple(int(rng.choice([0, 1, 2, 3, 5], p=[0.12, 0.22, 0.22, 0.24, 0.2])) for _ in range(nd))


def data(rng: Rng, s: tuple[int, ...], low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, s).astype(np.float32)


def broadcastable(rng: Rng, s: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``s``: some dims set to 1, leading dims dropped."""
    out = [1 if rng.random() < 0.3 else n for n in s]
    return tuple(out[int(rng.integers(0, len(out) + 1)) :]) if out else ()


@dataclass
class Case:
    """One call: ``run(dev, args)`` on each device's copies of ``arrays``; ``ref`` gives the float64 result."""

    name: str
    arrays: list[np.ndarray]
    run: Callable[[str, list[vb.Tensor]], Any]
    ref: Callable[..., Any] | None = None


def _dims(rng: Rng, ndim: int) -> Any:
    if ndim == 0:
        return int(rng.choice([0, -1])) if rng.random() < 0.5 else None
    k = int(rng.integers(0, ndim + 1))
    return None if k == 0 else tuple(int(d) for d in rng.choice(ndim, size=k, replace=False))


# ---------------------------------------------------------------- the good calls
def unary(rng: Rng) -> Case:
    name, fn, ref = [
        ("exp", vb.exp, np.exp),
        ("relu", vb.relu, lambda a: np.maximum(a, 0)),
        ("sin", vb.sin, np.sin),
        ("tanh", vb.tanh, np.tanh),
        ("abs", vb.abs, np.abs),
        ("neg", vb.neg, np.negative),
        ("sigmoid", vb.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
        ("square", vb.square, np.square),
    ][int(rng.integers(0, 8))]
    return Case(name, [data(rng, shape(rng))], lambda d, a: fn(a[0]), ref)


def binary(rng: Rng) -> Case:
    name, fn, ref = [
        ("add", vb.add, np.add),
        ("sub", vb.sub, np.subtract),
        ("mul", vb.mul, np.multiply),
        ("maximum", vb.maximum, np.maximum),
        ("div", vb.div, np.divide),
        ("atan2", vb.atan2, np.arctan2),
    ][int(rng.integers(0, 6))]
    s = shape(rng)
    b = data(rng, broadcastable(rng, s), 0.5, 2.0)
    return Case(name, [data(rng, s), b], lambda d, a: fn(a[0], a[1]), ref)


def reduction(rng: Rng) -> Case:
    s = shape(rng)
    dims = _dims(rng, len(s))
    keep = bool(rng.random() < 0.5)
    op = ["sum", "mean", "prod", "any", "amax"][int(rng.integers(0, 5))]
    if op == "prod" and isinstance(dims, tuple):  # prod takes one dim (PyTorch)
        dims = dims[0]
    if op in ("mean", "amax"):  # not over an empty dim (PyTorch: NaN / an error)
        reduced = range(len(s)) if dims is None or not s else [d % len(s) for d in np.atleast_1d(dims)]
        if any(s[d] == 0 for d in reduced) or (op == "amax" and dims is None and 0 in s):
            op = "sum"
    refs = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "any": np.any, "amax": np.max}
    axis = None if dims is None or not s else tuple(d % len(s) for d in np.atleast_1d(dims))
    return Case(
        f"{op}(dim={dims}, keepdim={keep})",
        [data(rng, s)],
        lambda d, a: getattr(vb, op)(a[0], dims, keepdim=keep) if dims is not None else getattr(vb, op)(a[0]),
        (lambda x: refs[op](x, axis=axis, keepdims=keep)) if dims is not None else (lambda x: refs[op](x)),
    )


def matmul(rng: Rng) -> Case:
    m, k, n = (int(rng.choice([0, 1, 3, 8])) for _ in range(3))
    kind = int(rng.integers(0, 4))
    sa = [(k,), (m, k), (2, m, k), (m, k)][kind]
    sb = [(k, n), (k,), (k, n), (2, k, n)][kind]
    return Case(f"matmul {sa} @ {sb}", [data(rng, sa), data(rng, sb)], lambda d, a: a[0] @ a[1], np.matmul)


def conv(rng: Rng) -> Case:
    n, c, o = int(rng.choice([0, 1, 2])), int(rng.choice([1, 2])), int(rng.choice([1, 3]))
    hw = int(rng.choice([3, 5]))
    x, w, b = data(rng, (n, c, hw, hw)), data(rng, (o, c, 3, 3)), data(rng, (o,))
    pad = int(rng.integers(0, 2))
    return Case(f"conv2d n={n} pad={pad}", [x, w, b], lambda d, a: vb.conv2d(a[0], a[1], a[2], padding=pad))


def movement(rng: Rng) -> Case:
    s = shape(rng)
    kind = int(rng.integers(0, 4))
    if kind == 0 and s:
        return Case(f"cat {s}", [data(rng, s), data(rng, s)], lambda d, a: vb.cat([a[0], a[1]], -1), None)
    if kind == 1 and len(s) >= 2:
        return Case(f"transpose {s}", [data(rng, s)], lambda d, a: a[0].transpose(0, -1).contiguous(), None)
    if kind == 2 and s:
        return Case(f"slice {s}", [data(rng, s)], lambda d, a: a[0][1:] * 2, lambda x: x[1:] * 2)
    return Case(f"reshape {s}", [data(rng, s)], lambda d, a: a[0].reshape(-1) + 1, lambda x: x.reshape(-1) + 1)


def indexing(rng: Rng) -> Case:
    s = (int(rng.choice([1, 3, 4])), int(rng.choice([0, 2, 3])))
    idx = rng.integers(-s[0], s[0], int(rng.choice([0, 1, 4])))
    kind = int(rng.integers(0, 3))
    if kind == 0:  # a tensor index made on the same device
        return Case(f"x[idx] {s}", [data(rng, s)], lambda d, a: a[0][vb.tensor(idx, device=d)], lambda x: x[idx])
    if kind == 1:  # a Python list
        return Case(f"x[list] {s}", [data(rng, s)], lambda d, a: a[0][idx.tolist()], lambda x: x[idx])
    gi = rng.integers(0, s[0], (max(1, s[0] - 1), s[1]))
    return Case(
        f"gather {s}",
        [data(rng, s)],
        lambda d, a: vb.gather(a[0], 0, vb.tensor(gi, device=d)),
        lambda x: np.take_along_axis(x, gi, 0),
    )


def softmax_where_clamp(rng: Rng) -> Case:
    s = shape(rng)
    kind = int(rng.integers(0, 3))
    if kind == 0 and s:
        return Case(f"softmax {s}", [data(rng, s)], lambda d, a: a[0].softmax(-1), None)
    if kind == 1:
        return Case(f"where {s}", [data(rng, s)], lambda d, a: vb.where(a[0] > 0, a[0], -1.0), None)
    return Case(f"clamp {s}", [data(rng, s)], lambda d, a: a[0].clamp(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5))


def autograd(rng: Rng) -> Case:
    s = shape(rng)

    def run(d: str, a: list[vb.Tensor]) -> Any:
        x = a[0].detach().requires_grad_()
        (x.tanh() * x).sum().backward()
        return x.grad

    return Case(f"backward {s}", [data(rng, s)], run, lambda x: np.tanh(x) + x * (1 - np.tanh(x) ** 2))


def integer(rng: Rng) -> Case:
    s = shape(rng)
    a = rng.integers(-20, 20, s).astype(np.int32)
    b = rng.integers(-5, 6, broadcastable(rng, s))
    b = np.where(b == 0, 3, b).astype(np.int32)  # a nonzero divisor (division by zero is a bad call below)
    name, fn, ref = [
        ("//", lambda x, y: x // y, np.floor_divide),
        ("&", lambda x, y: x & y, np.bitwise_and),
        ("%", lambda x, y: x % y, np.remainder),
        ("**2", lambda x, y: x**2, lambda x, y: x**2),
    ][int(rng.integers(0, 4))]
    return Case(
        f"int {name}", [a, b], lambda d, t: fn(t[0], t[1]), lambda x, y: ref(x.astype(np.int64), y.astype(np.int64))
    )


def training_step(rng: Rng) -> Case:
    """Linear + cross-entropy + SGD: what a user's loop does between errors."""
    n, f, c = int(rng.choice([0, 1, 4])), int(rng.choice([1, 3])), int(rng.choice([2, 3]))
    x, w = data(rng, (n, f)), data(rng, (c, f))
    y = rng.integers(0, c, n)

    def run(d: str, a: list[vb.Tensor]) -> Any:
        weight = a[1].detach().requires_grad_()
        loss = F.cross_entropy(a[0] @ weight.T, vb.tensor(y, device=d)) if n else (a[0] @ weight.T).sum()
        loss.backward()
        opt = vb.optim.SGD([weight], lr=0.1)
        opt.step()
        return weight

    return Case(f"training step n={n}", [x, w], run)


def replay(rng: Rng) -> Case:
    """A captured graph, replayed twice (on devices that capture)."""
    s = (int(rng.choice([1, 4])), 3)

    def run(d: str, a: list[vb.Tensor]) -> Any:
        x = a[0].clone()  # the graph's static input, written between replays (not the caller's tensor)
        if not vb.graphs.can_capture(d):
            return ((x * 2 + 1).relu() * 2 + 1).relu()
        g = vb.graphs.Graph()
        with vb.graphs.capture(g, device=d):
            y = (x * 2 + 1).relu()
        g.replay()
        x.copy_(y)
        g.replay()
        g.reset()
        return y

    return Case(f"graph replay {s}", [data(rng, s)], run)


GOOD = [
    unary,
    binary,
    reduction,
    matmul,
    conv,
    movement,
    indexing,
    softmax_where_clamp,
    autograd,
    integer,
    training_step,
    replay,
]


# ---------------------------------------------------------------- the bad calls: (name, call(device), exception)
def _bad_index(d: str) -> Any:
    return vb.ones(3, 2, device=d)[vb.tensor([0, 5], device=d)]


def _capture_read(d: str) -> Any:
    if not vb.graphs.can_capture(d):
        raise vb.backend.base.GraphCaptureError("capture is not supported here")
    x = vb.ones(4, device=d)
    g = vb.graphs.Graph()
    with vb.graphs.capture(g, device=d):
        (x * 2).item()


def _error_in_capture(d: str) -> Any:
    if not vb.graphs.can_capture(d):
        raise RuntimeError("capture is not supported here: the same error as a bad op inside one")
    x = vb.ones(4, device=d)
    g = vb.graphs.Graph()
    with vb.graphs.capture(g, device=d):
        y = x * 2
        y + vb.ones(3, device=d)  # a shape error in the middle of a capture


def _many_checks_then_a_bad_index(d: str) -> Any:
    from vkblas.backend.vulkan.device_checks import EAGER_SLOTS

    x = vb.ones(5, device=d)
    for i in range(EAGER_SLOTS + 6):  # more checks than the device's flag slots before the next sync
        x[vb.tensor([i % 5], device=d)]
    return x[vb.tensor([9], device=d)]


def _invalid_dispatch(d: str) -> Any:
    """A dispatch wgpu refuses at submit (a grid past the device limit): the batch is lost, the device is not."""
    be = vb.backend.get(d)
    if not hasattr(be, "rt"):
        raise vb.BackendError("a submit that fails: only a Vulkan device has one")
    x = vb.ones(4, device=d)
    out = vb.empty(4, device=d)
    be.elementwise("neg", out._view, [x._view])
    view = out._view
    plan = be.plans[("neg", view.dtype, view.shape, view.strides, view.dtype, view.shape, view.strides)]
    be.rt.dispatch(
        plan.kernel, [out._view.storage.buffer, x._view.storage.buffer], plan.fmt, (0, 0, 4, 4, 1, 1), (70000, 1, 1)
    )


def _second_backward(d: str) -> Any:
    x = vb.ones(2, device=d, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()


BAD: list[tuple[str, Callable[[str], Any], type[BaseException]]] = [
    ("broadcast", lambda d: vb.ones(3, device=d) + vb.ones(4, device=d), RuntimeError),
    ("matmul shapes", lambda d: vb.ones(2, 3, device=d) @ vb.ones(4, 2, device=d), RuntimeError),
    ("matmul dtypes", lambda d: vb.ones(2, 2, device=d) @ vb.ones(2, 2, dtype=vb.int32, device=d), RuntimeError),
    ("dim out of range", lambda d: vb.ones(2, 3, device=d).sum(dim=4), IndexError),
    ("0-d dim 1", lambda d: vb.tensor(2.0, device=d).sum(1), IndexError),
    ("bad reshape", lambda d: vb.ones(2, 3, device=d).reshape(4, 2), RuntimeError),
    ("bad index", _bad_index, IndexError),
    ("gather index", lambda d: vb.gather(vb.ones(2, 2, device=d), 1, vb.tensor([[0, 2]], device=d)), IndexError),
    ("bitwise float", lambda d: vb.ones(2, device=d) & vb.ones(2, device=d), NotImplementedError),
    ("int add_ float", lambda d: vb.tensor([1, 2], device=d).add_(0.5), RuntimeError),
    ("huge allocation", lambda d: vb.empty(2**42, device=d) + 1, MemoryError),
    (
        "bce out of range",
        lambda d: F.binary_cross_entropy(vb.ones(2, device=d) * 1.5, vb.ones(2, device=d)),
        RuntimeError,
    ),
    ("int div by zero", lambda d: vb.tensor([4, 2], device=d) // vb.tensor([1, 0], device=d), RuntimeError),
    ("amax of empty", lambda d: vb.zeros(0, device=d).amax(), RuntimeError),
    ("read during capture", _capture_read, RuntimeError),
    ("error inside a capture", _error_in_capture, RuntimeError),
    ("more checks than flag slots, then a bad index", _many_checks_then_a_bad_index, IndexError),
    ("int scalar overflow", lambda d: vb.tensor([1], device=d) + 2**40, RuntimeError),
    ("lost batch", _invalid_dispatch, vb.BackendError),
    ("second backward", _second_backward, RuntimeError),
    ("in-place on a leaf", lambda d: vb.ones(2, device=d, requires_grad=True).add_(1.0), RuntimeError),
    (
        "device mismatch",
        lambda d: vb.ones(2, device=d) + vb.ones(2, device="vulkan" if d == "cpu" else "cpu"),
        RuntimeError,
    ),
]


# ---------------------------------------------------------------- the sequence
def close(got: Any, want: Any, what: str, rtol: float, atol: float) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype == np.bool_ or want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)


def results(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach().numpy() for o in outs]


def runtime_is_clean(device: str) -> None:
    """After a sync: no recording left open, no unread device checks."""
    backend = vb.backend.get(device)
    rt = getattr(backend, "rt", None)
    if rt is not None:
        assert rt.recording is None, "a graph recording survived its error"
        assert not backend.checks.unread, "device checks left unread"


class _Cycle:
    """An object in a reference cycle: only the garbage collector frees it (and what it holds)."""

    def __init__(self, payload: Any) -> None:
        self.me, self.payload = self, payload


_CHILD = """
import gc, vkblas as vb
for i in range(20):  # tensors uploaded and never bound, dying in garbage cycles
    cycle = [vb.tensor([2.5] * 10, device="vulkan")]
    cycle.append(cycle)
    del cycle
gc.collect()
for i in range(20):  # the pool hands their buffers out again
    assert (vb.tensor([1.0] * 10, device="vulkan") * 2).sum().item() == 20.0
"""


@requires_vulkan
@pytest.mark.vulkan
def test_tensors_freed_by_the_garbage_collector_leave_their_buffers_usable() -> None:
    """The issue's ``WGPUBufferImpl ... NoneType`` after an earlier failure: a failure's traceback is a garbage
    cycle, and the tensors its frames held used to return wgpu buffers that the collector had just released. In a
    child process: a wgpu-native panic aborts the process instead of failing one test."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


class _NoEmptyDispatches:
    """Fails the test when a dispatch with no workgroups, or a binding of a zero-size buffer, is recorded."""

    def __init__(self, device: str) -> None:
        self.rt = vb.backend.get(device).rt

    def __enter__(self) -> None:
        plain = self.rt.record

        def record(pipeline: Any, bufs: Any, packer: Any, args: Any, groups: Any) -> None:
            assert all(g > 0 for g in groups), f"a dispatch of grid {tuple(groups)} was recorded"
            assert all(b.size > 0 for b in bufs), "a zero-size buffer was bound"
            plain(pipeline, bufs, packer, args, groups)

        self.rt.record = record

    def __exit__(self, *exc: object) -> None:
        self.rt.__dict__.pop("record", None)


@requires_vulkan
@pytest.mark.vulkan
def test_random_ops_with_bad_calls_never_poison_the_device() -> None:
    with _NoEmptyDispatches("vulkan"):
        _sequence()


def _sequence() -> None:
    rng = np.random.default_rng(SEED)
    kept: list[tuple[np.ndarray, dict[str, vb.Tensor]]] = []  # tensors made earlier, reused after failures
    for step in range(STEPS):
        where = f"step {step} (VKBLAS_FUZZ_SEED={SEED})"
        if step % 499 == 0:
            # tensors that only the garbage collector frees (as a failure's traceback frees its frames' tensors),
            # just after the bind-group cache was dropped (as when it overflows): nothing else holds their buffers
            vb.backend.get("vulkan").rt.drop_bind_groups()
            for _ in range(int(rng.integers(1, 6))):
                _Cycle(vb.tensor(data(rng, shape(rng)), device="vulkan"))
            gc.collect()
        if rng.random() < 0.2:
            name, call, exc = BAD[int(rng.integers(0, len(BAD)))]
            for d in DEVICES:
                with pytest.raises(exc):
                    call(d)
                    vb.synchronize(d)  # device-side checks report here
                runtime_is_clean(d)
            continue
        case = GOOD[int(rng.integers(0, len(GOOD)))](rng)
        reused: dict[str, vb.Tensor] = {}
        if kept and rng.random() < 0.3:  # a tensor made steps (and failures) ago, when its shape and dtype fit
            old, tensors = kept[int(rng.integers(0, len(kept)))]
            if old.shape == case.arrays[0].shape and old.dtype == case.arrays[0].dtype:
                case.arrays[0], reused = old, tensors
        outs, made = {}, {}
        for d in DEVICES:
            args = [vb.tensor(a, device=d) for a in case.arrays]
            if reused:
                args[0] = reused[d]
            made[d] = args[0]
            outs[d] = results(case.run(d, args))
        what = f"{where}: {case.name} on shapes {[a.shape for a in case.arrays]}"
        for got, want in zip(outs["vulkan"], outs["cpu"], strict=True):
            close(got, want, f"{what}, vulkan vs cpu", 2e-4, 2e-5)
        if case.ref is not None:
            with np.errstate(all="ignore"):
                want = case.ref(*[a.astype(np.float64) for a in case.arrays])
            close(outs["vulkan"][0], want, f"{what}, vulkan vs float64 numpy", 1e-3, 1e-4)
        if rng.random() < 0.1 and len(kept) < 20 and case.name.split()[0] not in ("training", "graph"):
            kept.append((case.arrays[0], made))  # (cases that modify their input in place are not kept)
        vb.synchronize("vulkan")
        runtime_is_clean("vulkan")
