"""The cpu backend's fast paths give exactly what the paths they replace give: the hot elementwise kernels against
their ops' formulas (bit for bit: signed zeros and NaN included), the short-axis argmax against numpy's, the
one-pass ``max_pool2d`` primitive against the unfold composition and PyTorch (values, indices, gradients), ``fold``
and ``matmul`` on awkward layouts against float64 references, the storage pool against handing out live memory,
and float32 uniform random numbers against the float64 formula."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import vkblas as vk
from conftest import require_torch
from vkblas import backend
from vkblas.backend import cpu
from vkblas.backend import elementwise as ew
from vkblas.backend.base import Backend, View
from vkblas.dtypes import float32
from vkblas.nn import functional as F
from vkblas.ops.conv import fold as vk_fold
from vkblas.ops.conv import unfold as vk_unfold

SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.5, -2.5, 3e38, -3e38]


def _operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    specials = np.array(SPECIAL, dtype)
    flat[: min(flat.size, specials.size)] = specials[: flat.size]
    rng.shuffle(flat)
    return a


def _layouts(a: np.ndarray) -> list[np.ndarray]:
    """a itself, a transposed (non-contiguous) copy of it, and a broadcast of its first row where it has rows."""
    out = [a]
    if a.ndim == 2:
        out.append(np.ascontiguousarray(a.T).T)
        out.append(np.broadcast_to(a[:1], a.shape))
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        unsigned = np.dtype(f"u{got.itemsize}")
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(unsigned), want[~nan].view(unsigned))
    else:
        np.testing.assert_array_equal(got, want)


def _generic(op: str, target: np.ndarray, vals: list[Any]) -> None:
    """What CpuBackend.elementwise computes without a fast path."""
    with np.errstate(all="ignore"):
        np.copyto(target, ew.OPS[op].fn(ew.numpy_math, *vals), casting="unsafe")


def _cases(op: str, dtype: type) -> list[list[Any]]:
    rng = np.random.default_rng(0)
    a, b = _operand(rng, (5, 7), dtype), _operand(rng, (5, 7), dtype)
    cond = rng.random((5, 7)) < 0.5
    if op == "where":
        return [[cond, x, y] for x in _layouts(a) for y in (b, 0.0, -0.0, 2.5, b[:, :1])] + [[cond[0, 0], a, b]]
    if op == "relu":
        return [[x] for x in _layouts(a)] + [[np.array(v, dtype)] for v in SPECIAL]  # 0-d
    if op == "relu_grad":
        return [[x, y] for x in _layouts(a) for y in _layouts(b)]
    if op in ("eq", "ne"):
        ints = rng.integers(0, 3, (5, 7)).astype(np.int32)
        return [[x, y] for x in _layouts(a) for y in (b, a, 0.0, np.nan)] + [[ints, ints.T.copy().T[:, ::-1]]]
    zero_d = np.array(0.9, dtype)  # a capturable optimizer's hyper-parameters are 0-d tensors
    if op == "lerp":
        return [[x, y, w] for x in _layouts(a) for y in (b, b[:1]) for w in (0.1, zero_d, -0.0)]
    if op == "ema_sq":
        return [[x, y, beta] for x in _layouts(a) for y in (b, b.T.copy().T) for beta in (0.999, zero_d)]
    if op == "adam_apply":
        v = np.abs(b)
        return [
            [x, b, v, step, inv, 1e-8, decay]
            for x in _layouts(a)
            for step, inv in ((1e-3, 3.2), (zero_d, zero_d))
            for decay in (1.0, 0.99)
        ] + [[a, b, b, 1e-3, 1.0, 1e-8, 1.0]]  # sqrt of negatives: NaN alike
    return [[x, y] for x in _layouts(a) for y in (b, 2.0, -0.0, b[:1])] + [[np.array(1.5, dtype), a]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(cpu._FAST_ELEMENTWISE))
def test_fast_elementwise_matches_formula(op: str, dtype: type) -> None:
    for vals in _cases(op, dtype):
        shape = np.broadcast_shapes(*(np.shape(v) for v in vals))
        out_dtype = bool if ew.OPS[op].returns_bool else dtype
        want, got = np.empty(shape, out_dtype), np.empty(shape, out_dtype)
        _generic(op, want, vals)
        with np.errstate(all="ignore"):
            handled = cpu._FAST_ELEMENTWISE[op](got, vals)
        if handled:
            _same_bits(got, want)
        elif op not in ("where",):  # where refuses only shared memory; the others cover every float case here
            pytest.fail(f"{op} refused {[getattr(v, 'dtype', type(v)) for v in vals]}")


@pytest.mark.parametrize("op", ["relu", "add", "where"])
def test_fast_elementwise_leaves_other_dtypes_to_the_formula(op: str) -> None:
    ints = np.arange(-3, 3, dtype=np.int32)
    vals = {"relu": [ints], "add": [ints, ints], "where": [ints > 0, ints, ints]}[op]
    assert not cpu._FAST_ELEMENTWISE[op](np.empty(6, np.int32), vals)
    mixed = {"relu": [ints.astype(np.float64)], "add": [ints.astype(np.float64), 1.0]}.get(op)
    if mixed is not None:  # operands of another float type than the output
        assert not cpu._FAST_ELEMENTWISE[op](np.empty(6, np.float32), mixed)


def test_fast_elementwise_in_place_through_the_backend() -> None:
    """relu_ and a where into one of its own operands (overlap), through CpuBackend.elementwise."""
    x = vk.tensor(_operand(np.random.default_rng(1), (64, 80), np.float32), device="cpu")
    want = np.where(x.numpy() < 0, 0, x.numpy())
    x.relu_()
    _same_bits(x.numpy(), want.astype(np.float32))
    be = backend.get("cpu")
    a = be.from_numpy(np.arange(6, dtype=np.float32), float32)
    c = be.from_numpy(np.array([True, False] * 3), vk.bool)
    va, vc = View.of(a, (6,)), View.of(c, (6,))
    be.elementwise("where", va, [vc, 7.0, va])
    np.testing.assert_array_equal(be.to_numpy(va), [7, 1, 7, 3, 7, 5])


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_short_axis_argmax_matches_numpy(op: str, dtype: type) -> None:
    rng = np.random.default_rng(2)
    fn = np.argmax if op == "argmax" else np.argmin
    ties = rng.integers(0, 3, (8, 9, 4, 70)).astype(dtype)  # many ties: the first extreme must win
    constant = np.zeros((8, 9, 4, 70), dtype)
    cases = [ties, ties[:, :, ::-1], np.moveaxis(ties, 2, 3), constant]
    if np.dtype(dtype).kind == "f":
        cases.append(np.where(rng.random(ties.shape) < 0.5, -0.0, 0.0).astype(dtype))
        with_nan = ties.copy()
        with_nan[0, 0, 1, 0] = np.nan
        assert cpu._short_arg_reduce(op, with_nan, 2) is None  # numpy's rule (the first NaN) decides
    for a in cases:
        for axis in range(a.ndim):
            got = cpu._short_arg_reduce(op, a, axis)
            if got is not None:
                np.testing.assert_array_equal(got, fn(a, axis=axis))


def _pool_inputs(dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    ties = rng.integers(-2, 3, (2, 3, 9, 8)).astype(np.float64)
    special = ties.copy()
    special[0, 0, 0, :4] = [np.nan, 1, np.nan, 2]  # two NaN in one window: the last one is the index
    special[0, 1, 2, 2:4] = [np.inf, np.inf]
    special[1, 2, 4:6, 0:2] = -np.inf
    special[1, 0, 6:8, 6:8] = [[-0.0, 0.0], [0.0, -0.0]]
    return [ties, special, ties[:0]]  # and an empty batch


POOLS = [dict(kernel_size=2), dict(kernel_size=(2, 3)), dict(kernel_size=3, stride=3), dict(kernel_size=(1, 2))]


def _pool_grad(shape: tuple[int, ...]) -> np.ndarray:
    g = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3.0
    if g.size:
        g[0, 0, 0, :2] = [-0.0, np.inf]  # -0 comes back +0 (0 + g), inf stays where the index is
    return g


def _pool(x: np.ndarray, device: str, kw: dict[str, Any], fused: bool) -> tuple[np.ndarray, ...]:
    t = vk.tensor(x, dtype=vk.float64 if device == "cpu" else vk.float32, device=device, requires_grad=True)
    be = t._backend
    if not fused:
        be.max_pool2d = lambda *a: False  # the unfold composition
    try:
        out, idx = F.max_pool2d(t, return_indices=True, **kw)
        g = _pool_grad(out.shape)
        out.backward(vk.tensor(g, dtype=t.dtype, device=device))
    finally:
        if not fused:
            del be.max_pool2d
    return out.detach().numpy(), idx.numpy(), t.grad.numpy()


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
@pytest.mark.parametrize("kw", POOLS, ids=str)
def test_max_pool_primitive_matches_composition_and_torch(device: str, kw: dict[str, Any]) -> None:
    if device == "vulkan" and not any(d.startswith("vulkan") for d in vk.devices()):
        pytest.skip("no Vulkan adapter")
    torch = require_torch()
    for x in _pool_inputs(np.float64):
        fused, composed = _pool(x, device, kw, True), _pool(x, device, kw, False)
        for got, want in zip(fused, composed, strict=True):
            _same_bits(got, want)
        tx = torch.tensor(x, requires_grad=True)
        tout, tidx = torch.nn.functional.max_pool2d(tx, return_indices=True, **kw)
        tout.backward(torch.tensor(_pool_grad(tuple(tout.shape))))
        np.testing.assert_array_equal(fused[0], tout.detach().numpy().astype(fused[0].dtype))
        np.testing.assert_array_equal(fused[1], tidx.numpy())
        np.testing.assert_array_equal(fused[2], tx.grad.numpy().astype(fused[2].dtype))


@pytest.mark.parametrize("device", ["cpu", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_max_pool_primitive_is_optional(device: str) -> None:
    """The base class leaves max pooling to the composition; the cpu and Vulkan backends take integers too."""
    if device == "vulkan" and not any(d.startswith("vulkan") for d in vk.devices()):
        pytest.skip("no Vulkan adapter")
    be = vk.zeros(1, device=device)._backend
    x = View.of(be.from_numpy(np.arange(16, dtype=np.int32), vk.int32), (1, 1, 4, 4))
    vals, idx = (View.of(be.alloc(4, d), (1, 1, 2, 2)) for d in (vk.int32, vk.int32))
    assert not Backend.max_pool2d(be, vals, idx, x, (2, 2))
    assert be.max_pool2d(vals, idx, x, (2, 2))
    np.testing.assert_array_equal(be.to_numpy(vals), [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(be.to_numpy(idx), np.full((1, 1, 2, 2), 3))


@pytest.mark.parametrize("k,s,p,d", [((2, 2), (3, 3), (0, 0), (1, 1)), ((2, 3), (2, 3), (1, 1), (1, 1))])
def test_fold_disjoint_windows_sum_as_zero_plus_term(k: tuple, s: tuple, p: tuple, d: tuple) -> None:
    """Windows that do not overlap are assigned, not summed: -0 must still come out +0, as 0 + -0 does."""
    rng = np.random.default_rng(4)
    hw = (8, 9)
    x = rng.standard_normal((2, 3, *hw))
    cols = vk_unfold(vk.tensor(x, dtype=vk.float64, device="cpu"), k, d, p, s).numpy()
    cols[0, 0, :] = -0.0
    got = vk_fold(vk.tensor(cols, dtype=vk.float64, device="cpu"), hw, k, d, p, s).numpy()
    want = np.zeros((2, 3, hw[0] + 2 * p[0], hw[1] + 2 * p[1]))
    oh, ow = (hw[0] + 2 * p[0] - k[0]) // s[0] + 1, (hw[1] + 2 * p[1] - k[1]) // s[1] + 1
    c6 = cols.reshape(2, 3, k[0], k[1], oh, ow)
    for i in range(k[0]):
        for j in range(k[1]):
            for a in range(oh):
                for b in range(ow):
                    want[:, :, a * s[0] + i, b * s[1] + j] += c6[:, :, i, j, a, b]
    _same_bits(got, want[:, :, p[0] : p[0] + hw[0], p[1] : p[1] + hw[1]])


def test_matmul_operands_blas_cannot_read() -> None:
    """A broadcast (stride 0) and a doubly strided operand, and an output that is a non-contiguous view."""
    rng = np.random.default_rng(5)
    a64 = rng.standard_normal((3, 6, 5))
    b64 = rng.standard_normal((5, 4))
    a = vk.tensor(a64, dtype=vk.float32, device="cpu")
    b = vk.tensor(b64, dtype=vk.float32, device="cpu")
    cases = [(a, b), (a[:, ::2, ::2], b[::2, ::2]), (a, b.reshape(1, 5, 4).expand(3, 5, 4)), (a.mT.mT, b.mT.mT)]
    for x, y in cases:
        want = x.numpy().astype(np.float64) @ y.numpy().astype(np.float64)
        np.testing.assert_allclose(x.matmul(y).numpy(), want, rtol=1e-5, atol=1e-5)


def test_pool_never_hands_out_memory_a_view_still_uses() -> None:
    be = backend.get("cpu")
    n = 1 << 16
    storage = be.alloc(n, float32)
    view = storage.array[:10]  # a numpy view keeps the array alive: the storage must not give it back
    del storage
    assert all(be.alloc(n, float32).array is not view.base for _ in range(3))
    storage = be.alloc(n, float32)
    array = storage.array
    del storage  # with ``array`` still referenced it is not pooled either
    assert be.alloc(n, float32).array is not array


def test_uniform_float32_is_the_float64_formula() -> None:
    be = backend.get("cpu")
    out32 = View.of(be.alloc(5000, float32), (5000,))
    out64 = View.of(be.alloc(5000, vk.float64), (5000,))
    for seed, counter in [(0, 0), (7, 2**32 - 100), (12345, 99)]:
        be.random(out32, "uniform", seed, counter)
        be.random(out64, "uniform", seed, counter)
        i = np.arange(5000, dtype=np.uint64)
        ctr = ((np.uint64(counter) + i) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = cpu.pcg_hash(ctr ^ cpu.pcg_hash(np.array([seed], np.uint32))[0])
        want = (bits >> np.uint32(8)).astype(np.float64) * 2.0**-24
        np.testing.assert_array_equal(be.to_numpy(out64), want)
        np.testing.assert_array_equal(be.to_numpy(out32), want.astype(np.float32))


def _training_ops(x: np.ndarray) -> list[np.ndarray]:
    """relu, where, add with broadcasting, conv2d and max pooling forward and backward, on the cpu backend."""
    t = vk.tensor(x, dtype=vk.float32, device="cpu", requires_grad=True)
    w = vk.tensor(np.linspace(-1, 1, 8 * 3 * 9).reshape(8, 3, 3, 3), dtype=vk.float32, device="cpu")
    w.requires_grad_(True)
    y = F.conv2d(t.relu(), w, padding=1)
    z = F.max_pool2d(vk.where(y > 0.1, y, y * 0.5) + t.sum(1, keepdim=True), 2)
    z.backward(vk.tensor(np.cos(np.arange(z.numel())).reshape(z.shape), dtype=vk.float32, device="cpu"))
    return [y.detach().numpy(), z.detach().numpy(), t.grad.numpy(), w.grad.numpy()]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("k,s,p,d", [((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0), (1, 2))])
def test_fold_of_channel_major_cols_has_the_bits_of_batch_major(
    dtype: type, k: tuple, s: tuple, p: tuple, d: tuple
) -> None:
    """conv2d's (C*kh*kw, N, L) cols are folded through a channel-major scratch: the same sums in the same order as
    the batch-major (N, C*kh*kw, L) layout, so the same bits, with NaN, Inf and -0 (0 + -0 is +0) among the terms."""
    be = backend.get("cpu")
    rng = np.random.default_rng(8)
    n, c, hw = 3, 4, (7, 6)
    oh, ow = ((hw[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in (0, 1))
    cols = rng.standard_normal((n, c * k[0] * k[1], oh * ow)).astype(dtype)
    cols[0, :, 0], cols[1, 0, :] = -0.0, -0.0
    cols[2, 1, 3], cols[2, 2, 4], cols[1, 3, 5] = np.nan, np.inf, -np.inf
    images = []
    for layout in ((0, 1, 2), (1, 0, 2)):  # batch-major, then channel-major storage of the same logical cols
        stored = vk.tensor(np.ascontiguousarray(cols.transpose(layout)), device="cpu").permute(*layout)
        img = vk.full((n, c, *hw), 7.0, dtype=stored.dtype, device="cpu")
        be.fold(img._view, stored._view, k, s, p, d)
        images.append(img.numpy())
    _same_bits(images[1], images[0])
    want = vk_fold(vk.tensor(cols.astype(np.float64), device="cpu"), hw, k, d, p, s).numpy()
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(images[0], want.astype(dtype), rtol=tol, atol=tol)


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_kernels_match_one_thread(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """Above PARALLEL_MIN the fast kernels, unfold, fold and max pooling split the batch over threads: the same
    bits as one thread (uneven chunks with 3)."""
    x = _operand(np.random.default_rng(6), (41, 3, 34, 34), np.float32)
    assert x.size >= cpu.PARALLEL_MIN  # the input and everything after it is split
    monkeypatch.setattr(cpu, "_threads", 1)
    serial = _training_ops(x)
    monkeypatch.setattr(cpu, "_threads", threads)
    for got, want in zip(_training_ops(x), serial, strict=True):
        _same_bits(got, want)


@pytest.mark.parametrize("threads", [1, 3])
def test_cache_blocked_kernels_match_whole_chunks(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """Max pooling walks each thread's chunk in CACHE_BLOCK-sized slices: the same bits as one slice per chunk,
    also where the slices do not divide the chunk (41 images, 3 per slice)."""
    x = _operand(np.random.default_rng(9), (41, 3, 34, 34), np.float32)
    monkeypatch.setattr(cpu, "_threads", threads)
    monkeypatch.setattr(cpu, "CACHE_BLOCK", x.size)  # one slice per chunk
    whole = _training_ops(x)
    monkeypatch.setattr(cpu, "CACHE_BLOCK", 3 * 8 * 34 * 34)  # three of the pooled (41, 8, 34, 34) images
    for got, want in zip(_training_ops(x), whole, strict=True):
        _same_bits(got, want)


def test_parallel_blocks_cover_each_row_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_parallel(..., block)`` hands out slices of about ``block`` elements that cover ``range(n)`` once, in
    order within each thread; a block smaller than a row still gives one row per slice."""
    monkeypatch.setattr(cpu, "_threads", 3)
    n, size = 50, 50 * cpu.PARALLEL_MIN
    for block, rows in ((7 * cpu.PARALLEL_MIN, 7), (1, 1), (None, None)):
        seen: list[slice] = []
        cpu._parallel(seen.append, n, size, block)
        covered = sorted(i for s in seen for i in range(*s.indices(n)))
        assert covered == list(range(n))
        if rows is not None:
            assert max(len(range(*s.indices(n))) for s in seen) == rows
        else:
            assert len(seen) == 3


def test_threaded_elementwise_with_overlapping_operands(monkeypatch: pytest.MonkeyPatch) -> None:
    """An output that overlaps an operand at an offset is not split (a chunk would overwrite another's input)."""
    monkeypatch.setattr(cpu, "_threads", 2)
    be = backend.get("cpu")
    n = 2 * cpu.PARALLEL_MIN
    base = np.random.default_rng(7).standard_normal(n + 1).astype(np.float32)
    storage = be.from_numpy(base, float32)
    # out = elements 1..n, the operand elements 0..n-1: each chunk's input is the previous chunk's output
    be.elementwise("add", View(storage, (n,), (1,), 1), [View(storage, (n,), (1,), 0), 1.0])
    np.testing.assert_array_equal(be.to_numpy(View.of(storage, (n + 1,)))[1:], base[:-1] + 1)


def test_thread_cap_bounds_the_split_of_one_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``thread_cap(n)``: the calling thread's loops are split into at most ``n`` chunks, other threads keep theirs;
    the cap is restored on exit (also nested, also after an error)."""
    import threading

    from vkblas.backend.base import host_thread_cap, thread_cap

    monkeypatch.setattr(cpu, "_threads", 4)
    size = cpu.PARALLEL_MIN

    def chunks() -> int:
        seen: list[slice] = []
        cpu._parallel(seen.append, 64, size)
        return len(seen)

    assert chunks() == 4
    with thread_cap(2):
        assert chunks() == 2 and host_thread_cap() == 2
        other: list[int] = []
        t = threading.Thread(target=lambda: other.append(chunks()))
        t.start()
        t.join()
        assert other == [4]  # another thread is not capped
        with thread_cap(1):
            assert chunks() == 1
        assert chunks() == 2
        with pytest.raises(RuntimeError), thread_cap(1):
            raise RuntimeError("inside")
        assert host_thread_cap() == 2
    assert host_thread_cap() is None and chunks() == 4
    with thread_cap(8):
        assert chunks() == 4  # a cap above the backend's threads does not add threads
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="thread_cap"), thread_cap(bad):  # type: ignore[arg-type]
            pass


def test_the_array_pool_takes_back_an_array_while_it_is_busy() -> None:
    """A storage's ``__del__`` gives its array back, and a garbage collection can run it in the middle of the pool's
    own ``take`` or ``give`` on the same thread: the pool's lock must let it in (a plain lock deadlocked here)."""
    pool = cpu._ArrayPool()
    done = threading.Event()

    def nested() -> None:
        with pool.lock:  # as if a collection ran inside a section of the pool
            pool.give(np.empty(pool.MIN_BYTES // 4, np.float32))
            assert pool.take(np.dtype(np.float32), pool.MIN_BYTES // 4) is not None
        done.set()

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "the array pool's lock is not reentrant"


def test_the_hot_kernels_temporaries_come_from_the_pool_and_go_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """ReLU's mask, its gradient's and Adam's update temporaries are pooled scratch arrays, given back after use:
    fresh ones cost ~1,250 page faults a step of the 9216 CNN. A second call takes the same arrays again instead of
    adding new ones, and nothing it hands back is still in use (the results match the formula)."""
    pool = cpu._ArrayPool()
    monkeypatch.setattr(cpu, "_POOL", pool)
    n = pool.MIN_BYTES  # a bool mask of n elements is just big enough to be pooled
    rng = np.random.default_rng(0)
    x = vk.tensor(rng.standard_normal(n).astype(np.float32), device="cpu", requires_grad=True)
    for _ in range(2):
        y = F.relu(x)
        y.backward(vk.ones_like(y))
        masks = pool.free.get((np.dtype(np.bool_), n), [])
        assert len(masks) == 1 and masks[0].base is None  # one flat owner, reused by the gradient's mask too
    xn = x.detach().numpy()
    np.testing.assert_array_equal(y.detach().numpy(), np.where(xn < 0, 0, xn))
    np.testing.assert_array_equal(x.grad.numpy(), 2 * (xn > 0).astype(np.float32))  # two backward passes
    p = vk.nn.Parameter(vk.tensor(rng.standard_normal(n).astype(np.float32), device="cpu"))
    opt = vk.optim.Adam([p], lr=1e-3)
    counts = []
    for _ in range(3):
        p.grad = vk.tensor(rng.standard_normal(n).astype(np.float32), device="cpu")
        opt.step()
        counts.append(len(pool.free.get((np.dtype(np.float32), n), [])))
    assert counts[0] >= 2 and counts[1] == counts[2] == counts[0]  # adam_apply's two, reused by the next steps
