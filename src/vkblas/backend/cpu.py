"""The numpy backend: exact reference semantics, the oracle of the tests, and the fallback device of machines with
no hardware Vulkan adapter (only when chosen by the device policy, never per op)."""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..dtypes import BYTES, DType, float32, float64
from . import elementwise as ew
from .base import (
    PCG_INC,
    PCG_MUL,
    PCG_OUT,
    Backend,
    DeviceOutOfMemoryError,
    ForeachProgram,
    Scalar,
    Storage,
    View,
    dropout_threshold,
    host_thread_cap,
    window_output_size,
)


class _ArrayPool:
    """The arrays of freed storages, by dtype and length, for ``alloc`` to hand out again (PyTorch's caching
    allocator, on the host). A training step frees and allocates the same sizes every step; a fresh large numpy
    array is fresh pages from the kernel, and first touching them (a page fault per 4 KiB, the kernel zeroing
    each) cost the cpu backend a third of a CNN step. Arrays under ``MIN_BYTES`` come from malloc's own bins;
    the pool keeps at most ``LIMIT_BYTES``, so its memory stays bounded."""

    MIN_BYTES = 1 << 16
    LIMIT_BYTES = 1 << 30

    def __init__(self) -> None:
        self.free: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
        self.bytes = 0
        # kernels split over threads (``_parallel``) take scratch arrays too. Reentrant, as ``_Usage``'s: ``give``
        # runs from a storage's ``__del__``, which a collection may call inside this lock's section
        self.lock = threading.RLock()

    def take(self, dtype: np.dtype, numel: int) -> np.ndarray | None:
        with self.lock:
            arrays = self.free.get((dtype, numel))
            if not arrays:
                return None
            array = arrays.pop()
            self.bytes -= array.nbytes
            return array

    def scratch(self, dtype: np.dtype | type, numel: int) -> np.ndarray:
        """A flat array of ``numel`` ``dtype`` elements: a pooled one where there is one, else a new one (give it
        back after use: the kernels' own large temporaries, such as ReLU's mask, then stop costing fresh pages)."""
        array = self.take(np.dtype(dtype), numel)
        return np.empty(numel, dtype) if array is None else array

    def give(self, array: np.ndarray) -> None:
        with self.lock:
            if array.nbytes < self.MIN_BYTES or self.bytes + array.nbytes > self.LIMIT_BYTES:
                return
            self.free.setdefault((array.dtype, array.size), []).append(array)
            self.bytes += array.nbytes


_POOL = _ArrayPool()


class _Usage:
    """Bytes held by live storages now and at most since the last reset: ``memory_stats``'s numbers, as the Vulkan
    pool counts them (numpy's own temporaries inside an op are not storages and do not count). The lock is
    reentrant: ``sub`` runs from a storage's ``__del__``, which the garbage collector may call inside another
    section of the same thread (Python 3.12 runs a pending collection at any call, ``max`` included)."""

    def __init__(self) -> None:
        self.live = self.peak = 0
        self.lock = threading.RLock()

    def add(self, nbytes: int) -> None:
        with self.lock:
            self.live += nbytes
            self.peak = max(self.peak, self.live)

    def sub(self, nbytes: int) -> None:
        with self.lock:
            self.live -= nbytes

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.live


_USAGE = _Usage()


class CpuStorage(Storage):
    __slots__ = ("array",)

    def __init__(self, array: np.ndarray, dtype: DType) -> None:
        super().__init__(dtype, array.size)
        self.array = array
        _USAGE.add(array.nbytes)

    def __del__(self) -> None:
        # only an array nothing else refers to (no numpy view of it is alive: a view holds its base) goes back;
        # 2 = this slot + getrefcount's argument
        try:
            _USAGE.sub(self.array.nbytes)
            if sys.getrefcount(self.array) == 2:
                _POOL.give(self.array)
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: the pool may be gone already
            pass


def _np(view: View) -> np.ndarray:
    """The view as a numpy array sharing memory with its storage."""
    base = view.storage.array
    if view.offset == 0 and view.storage.numel == view.numel and view.is_contiguous():
        return base.reshape(view.shape)
    item = base.itemsize
    if view.offset < base.size:
        try:  # the C constructor: several times cheaper than as_strided (a broadcast bias, a transposed weight)
            return np.ndarray(view.shape, base.dtype, base, view.offset * item, tuple(s * item for s in view.strides))
        except (TypeError, ValueError):  # a view reaching past its storage: as_strided's answer, as before
            pass
    return np.lib.stride_tricks.as_strided(
        base[view.offset :] if view.offset < base.size else base[:0],
        shape=view.shape,
        strides=tuple(s * item for s in view.strides),
    )


# ---------------------------------------------------------------- work split over the BLAS threads
#: arrays smaller than this (elements) are not worth a thread hand-off
PARALLEL_MIN = 1 << 17
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_executor: ThreadPoolExecutor | None = None
_threads: int | None = None


def cpu_threads() -> int:
    """How many threads the cpu backend splits its big non-BLAS loops over: numpy's BLAS thread count (its
    environment variables, which the distributed workers and ``benchmarks/cpu_train.py --threads`` set), else the
    CPUs this process may run on. numpy's loops release the GIL, so the chunks run in parallel."""
    global _threads
    if _threads is None:
        for var in _BLAS_THREAD_VARS:
            value = os.environ.get(var, "")
            if value.isdigit() and int(value) > 0:
                _threads = int(value)
                break
        else:
            _threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return _threads


#: elements a multi-pass loop body (max-pooling's ~15 passes over its taps) works on at once: ~1 MiB of fp32
#: stays in a core's L2 between the passes. On the MNIST CNN's first pool (128x32x28x28, one thread, an Intel
#: Xeon with 2 MiB of L2) blocks of 8 images took the forward from 5.0 to 3.5 ms and the backward from 3.4 to
#: 2.75; whole-array passes go out to L3. On an AMD EPYC the two were level (±0.5 ms).
CACHE_BLOCK = 1 << 18


def _parallel(run: Callable[[slice], object], n: int, size: int, block: int | None = None) -> None:
    """``run(chunk)`` over slices covering ``range(n)`` (the leading axis of arrays of ``size`` elements), on
    ``cpu_threads()`` threads (at most a :func:`thread_cap`) where the work is big enough; the caller's thread
    takes the first chunk. With ``block``, each thread walks its chunk in slices of about ``block`` elements (a
    body that makes several passes over its slice keeps it in cache)."""
    global _executor
    cap = host_thread_cap()
    threads = cpu_threads() if cap is None else min(cap, cpu_threads())
    parts = min(threads, n) if size >= PARALLEL_MIN else 1
    per_row = size // max(n, 1)
    rows = n if block is None or per_row == 0 else max(1, block // per_row)

    def walk(chunk: slice) -> None:
        start, stop, _ = chunk.indices(n)
        if stop - start <= rows:
            run(chunk)
            return
        for i in range(start, stop, rows):
            run(slice(i, min(stop, i + rows)))

    if parts <= 1:
        walk(slice(None))
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    chunks = [slice(bounds[i], bounds[i + 1]) for i in range(parts)]
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=max(cpu_threads() - 1, 1), thread_name_prefix="vkblas-cpu")
    futures = [_executor.submit(walk, chunk) for chunk in chunks[1:]]
    try:
        walk(chunks[0])
    finally:
        for f in futures:
            f.result()


def pcg_hash(x: np.ndarray) -> np.ndarray:
    s = x * np.uint32(PCG_MUL) + np.uint32(PCG_INC)
    w = ((s >> ((s >> np.uint32(28)) + np.uint32(4))) ^ s) * np.uint32(PCG_OUT)
    return w ^ (w >> np.uint32(22))


def _windows(
    cols: View, image: View, k: Sequence[int], s: Sequence[int], p: Sequence[int], d: Sequence[int], op: str
) -> np.ndarray:
    """``cols`` (N, C*kh*kw, OH*OW), any strides, as a numpy (N, C, kh, kw, OH, OW) view of the same memory."""
    n, c, h, w = image.shape
    oh, ow = window_output_size((h, w), k, s, p, d)
    if cols.shape != (n, c * k[0] * k[1], oh * ow):
        raise ValueError(
            f"{op}: cols of shape {cols.shape} should be {(n, c * k[0] * k[1], oh * ow)} for an image "
            f"of shape {image.shape}, kernel {tuple(k)}, stride {tuple(s)}, padding {tuple(p)}"
        )
    a = _np(cols)
    s0, s1, s2 = a.strides
    return np.lib.stride_tricks.as_strided(
        a, (n, c, k[0], k[1], oh, ow), (s0, s1 * k[0] * k[1], s1 * k[1], s1, s2 * ow, s2)
    )


def machine_memory_bytes() -> int:
    """RAM plus swap: no allocation above it can ever be backed. Linux with ``vm.overcommit_memory=1`` grants any
    ``malloc``, and the first write to a 16 TiB array then eats memory until the OOM killer ends the process."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): numpy's own allocation failure decides
        return sys.maxsize
    try:
        with open("/proc/meminfo") as f:
            swap = next((int(line.split()[1]) * 1024 for line in f if line.startswith("SwapTotal:")), 0)
    except OSError:
        swap = 0
    return total + swap


_MEMORY = machine_memory_bytes()


class CpuBackend(Backend):
    name = "cpu"

    def supports(self, dtype: DType) -> bool:
        return True

    def describe(self) -> dict[str, object]:
        return {"name": "cpu", "adapter": "numpy " + np.__version__, "backend_type": "numpy"}

    def alloc(self, numel: int, dtype: DType) -> CpuStorage:
        if numel * dtype.itemsize > _MEMORY:
            raise DeviceOutOfMemoryError(
                f"cpu: a tensor of {numel} {dtype.name} elements needs {numel * dtype.itemsize} bytes, more than this "
                f"machine's {_MEMORY} bytes of memory (RAM + swap)"
            )
        return CpuStorage(_POOL.scratch(dtype.np, numel), dtype)

    def memory_stats(self) -> dict[str, int]:
        return {"allocated": _USAGE.live, "peak_allocated": _USAGE.peak, "reserved": _USAGE.live + _POOL.bytes}

    def reset_peak_memory_stats(self) -> None:
        _USAGE.reset_peak()

    def from_numpy(self, array: np.ndarray, dtype: DType) -> CpuStorage:
        array = np.asarray(array)
        storage = self.alloc(array.size, dtype)
        np.copyto(storage.array.reshape(array.shape), array, casting="unsafe")
        return storage

    def to_numpy(self, view: View) -> np.ndarray:
        return np.array(_np(view), copy=True)

    def elementwise(self, op: str, out: View, args: Sequence[View | Scalar]) -> None:
        fast = _FAST_ELEMENTWISE.get(op)
        if fast is not None and out.dtype not in BYTES and self._fast_elementwise(op, fast, _np(out), args):
            return
        spec = ew.OPS[op]
        # 8-bit storage computes in int32 (as on the GPU) and wraps when stored
        vals = [(_np(a).astype(np.int32) if a.dtype in BYTES else _np(a)) if isinstance(a, View) else a for a in args]
        with np.errstate(all="ignore"):
            result = spec.fn(ew.numpy_math, *vals)
        target = _np(out)
        if out.dtype.is_bool:
            np.copyto(target, np.asarray(result).astype(bool), casting="unsafe")
        else:
            np.copyto(target, result, casting="unsafe")

    def foreach(self, program: ForeachProgram, tensors: Sequence[Sequence[View]], scalars: Sequence[Any]) -> None:
        """The default's steps (``Backend.foreach``: one ``elementwise`` per step and tensor, the same numbers),
        with each entry's arrays made once instead of per step: the optimizers' update of every parameter."""
        if any(isinstance(s, View) for s in scalars):  # device scalars (capturable): the default broadcasts them
            super().foreach(program, tensors, scalars)
            return
        for views in tensors:
            if not views or not views[0].numel:
                continue
            dtype = views[0].dtype
            slots: list[View | None] = list(views)
            arrays: list[np.ndarray | None] = [_np(v) for v in views]
            for dst, op, args in program:
                while len(slots) <= dst:
                    slots.append(None)
                    arrays.append(None)
                out = slots[dst]
                if out is None:
                    out = slots[dst] = View.of(self.alloc(views[0].numel, dtype), views[0].shape)
                    arrays[dst] = _np(out)
                fast = _FAST_ELEMENTWISE.get(op)
                if fast is not None and out.dtype not in BYTES:
                    vals = [arrays[a] if a >= 0 else scalars[-1 - a] for a in args]
                    if self._fast_elementwise(op, fast, arrays[dst], vals):
                        continue
                self.elementwise(op, out, [slots[a] if a >= 0 else scalars[-1 - a] for a in args])

    def _fast_elementwise(
        self, op: str, fast: Callable[[np.ndarray, Sequence[object]], bool], target: np.ndarray, args: Sequence[object]
    ) -> bool:
        """Run a fast kernel, split over threads along the leading axis where that is safe: every array operand
        broadcast to the output's shape, and none overlapping the output except exactly (an in-place op): one
        chunk's writes must not reach another chunk's operands."""
        vals = [_np(a) if isinstance(a, View) else a for a in args]
        splittable = target.size >= PARALLEL_MIN and target.ndim > 0 and target.shape[0] > 1 and cpu_threads() > 1
        if splittable:
            splittable = all(
                not np.may_share_memory(target, v)
                or (v.shape == target.shape and v.strides == target.strides and _same_start(v, target))
                for v in vals
                if isinstance(v, np.ndarray)
            )
        with np.errstate(all="ignore"):
            if not splittable:
                return fast(target, vals)
            full = [np.broadcast_to(v, target.shape) if isinstance(v, np.ndarray) else v for v in vals]
            part = [v[:1] if isinstance(v, np.ndarray) else v for v in full]
            if not fast(target[:1], part):  # the kernel's own checks decide, on the first row
                return False

            rest, rest_vals = target[1:], [v[1:] if isinstance(v, np.ndarray) else v for v in full]

            def run(chunk: slice) -> None:
                sub = [v[chunk] if isinstance(v, np.ndarray) else v for v in rest_vals]
                with np.errstate(all="ignore"):
                    if not fast(rest[chunk], sub):  # cannot happen (same dtypes, no new overlap); stay exact anyway
                        np.copyto(rest[chunk], ew.OPS[op].fn(ew.numpy_math, *sub), casting="unsafe")

            _parallel(run, rest.shape[0], target.size)
        return True

    def reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> None:
        a = _np(x)
        target = _np(out)
        if a.size == 0 and op not in ("sum", "prod"):
            raise ValueError(f"{op}() of an empty tensor of shape {x.shape} has no identity")
        if op in ("argmax", "argmin"):
            (axis,) = axes
            result = _short_arg_reduce(op, a, axis)
            if result is None:
                result = (np.argmax if op == "argmax" else np.argmin)(a, axis=axis)
        else:
            fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
            # sums of floats accumulate in at least fp32 (as the GPU kernels do), float64 stays float64
            wide = np.float64 if x.dtype is float64 else np.float32
            acc = a.astype(wide, copy=False) if op in ("sum", "prod") and x.dtype.is_floating else a
            result = fn(acc, axis=axes)
        np.copyto(target, result, casting="unsafe")

    def matmul(self, out: View, a: View, b: View) -> None:
        A, B = _np(a), _np(b)
        if A.dtype == np.float16:  # accumulate half in fp32, as the GPU path does
            A, B = A.astype(np.float32), B.astype(np.float32)
        target = _np(out)
        if A.dtype.kind == "f":  # numpy runs a matrix whose strides BLAS cannot take through a slow loop of its own
            A, B = _blas_operand(A), _blas_operand(B)
        if (
            target.dtype == A.dtype == B.dtype
            and target.flags.c_contiguous
            and not np.may_share_memory(target, A)
            and not np.may_share_memory(target, B)
        ):
            np.matmul(A, B, out=target)  # straight into the output: no result temporary and copy
        else:
            np.copyto(target, np.matmul(A, B), casting="unsafe")

    def gather(self, out: View, x: View, dim: int, index: View) -> None:
        idx = _np(index).astype(np.intp)
        # torch.gather allows an index smaller than x in the other dims: x's leading part there (take_along_axis
        # would want them equal, or broadcast)
        d = dim % max(idx.ndim, 1)
        part = tuple(slice(None) if i == d else slice(0, n) for i, n in enumerate(idx.shape))
        np.copyto(_np(out), np.take_along_axis(_np(x)[part], idx, axis=dim))

    def scatter(self, op: str, out: View, dim: int, index: View, src: View) -> None:
        target = _np(out)
        idx = _np(index).astype(np.intp)
        grids = list(np.indices(idx.shape, sparse=True))
        grids[dim] = idx
        where = tuple(grids)
        values = _np(src)[tuple(slice(0, n) for n in idx.shape)]
        if op == "assign":
            target[where] = values  # duplicates: the last one in C order wins
        else:  # maximum/minimum: NaN wins, as in PyTorch
            ufunc = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[op]
            ufunc.at(target, where, values)

    def scan(self, op: str, out: View, x: View, axis: int) -> None:
        a = _np(x)
        wide = np.float64 if x.dtype is float64 else np.float32 if x.dtype.is_floating else np.int64
        fn = np.cumsum if op == "sum" else np.cumprod
        result = fn(a.astype(wide), axis=axis)
        if op == "sum" and x.dtype.is_floating:
            result += 0.0  # a sum starts from +0 (PyTorch's and the GPU's): -0 alone sums to +0
        np.copyto(_np(out), result, casting="unsafe")  # ints wrap to int32 as on the GPU

    def sort(self, values: View, indices: View, x: View, descending: bool) -> None:
        a = _np(x)
        order = np.arange(a.shape[-1]) if a.ndim else np.zeros((), np.intp)
        if a.ndim == 0:
            idx = np.zeros((), np.int64)
        elif a.dtype.kind == "f":
            nan = np.isnan(a)
            key = np.where(nan, 0, a)
            # lexsort sorts by its last key first: NaN flag, then the value, then the position (stability)
            keys = (np.broadcast_to(order, a.shape), -key if descending else key, ~nan if descending else nan)
            idx = np.lexsort(keys, axis=-1)
        else:
            key = a.astype(np.int64)
            idx = np.lexsort((np.broadcast_to(order, a.shape), -key if descending else key), axis=-1)
        np.copyto(_np(indices), idx, casting="unsafe")
        np.copyto(_np(values), np.take_along_axis(a, idx, -1) if a.ndim else a)

    def random(self, out: View, distribution: str, seed: int, counter: int) -> None:
        n = out.numel
        # (counter + i) mod 2**32, in uint32 arithmetic (which wraps)
        ctr = np.arange(n, dtype=np.uint32)
        ctr += np.uint32(counter & 0xFFFFFFFF)
        bits = pcg_hash(ctr ^ pcg_hash(np.array([seed & 0xFFFFFFFF], dtype=np.uint32))[0])
        if distribution == "uniform":
            # a 24-bit integer times 2**-24 is exact in float32: the same numbers as in float64, at half the traffic
            vals = (bits >> np.uint32(8)).astype(np.float32)
            vals *= np.float32(2.0**-24)
        elif distribution == "normal":
            u = (bits >> np.uint32(8)).astype(np.float64) * 2.0**-24
            u1 = ((pcg_hash(bits) >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0**-24
            vals = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u)
        else:
            raise ValueError(f"unknown distribution {distribution!r}")
        np.copyto(_np(out), vals.reshape(out.shape), casting="unsafe")

    def attention(
        self,
        out: View,
        lse: View,
        rng: View,
        q: View,
        k: View,
        v: View,
        mask: View | None,
        causal: bool,
        scale: float,
        dropout_p: float,
        seed: int,
        counter: int,
    ) -> None:
        probs, m, total = _attention_probs(_wide(q), _wide(k), _mask_of(mask), causal, scale)
        state = np.array([int(pcg_hash(np.array([seed & 0xFFFFFFFF], np.uint32))[0]), counter & 0xFFFFFFFF], np.int64)
        np.copyto(_np(rng), state.astype(np.uint32).view(np.int32))
        if dropout_p > 0:
            probs = probs * _dropout_keep(state, probs.shape, dropout_p) * _keep_scale(dropout_p)
        np.copyto(_np(out), np.matmul(probs, _wide(v)), casting="unsafe")
        with np.errstate(divide="ignore", invalid="ignore"):
            np.copyto(_np(lse), np.log(total[..., 0]) + m[..., 0], casting="unsafe")  # -inf: a fully masked row

    def attention_backward(
        self,
        dq: View,
        dk: View,
        dv: View,
        q: View,
        k: View,
        v: View,
        out: View,
        dout: View,
        lse: View,
        rng: View,
        mask: View | None,
        causal: bool,
        scale: float,
        dropout_p: float,
        dmask: View | None = None,
    ) -> None:
        Q, K, V, dO = _wide(q), _wide(k), _wide(v), _wide(dout)
        probs = _attention_probs(Q, K, _mask_of(mask), causal, scale)[0]  # recomputed: lse is not needed here
        dp = np.matmul(dO, np.swapaxes(V, -1, -2))
        kept = probs
        if dropout_p > 0:
            keep = _dropout_keep(_np(rng).astype(np.int64) & 0xFFFFFFFF, probs.shape, dropout_p) * _keep_scale(
                dropout_p
            )
            kept, dp = probs * keep, dp * keep
        # softmax's backward as PyTorch's reference computes it (the sum over dp * p, not dO . out: they differ
        # where a masked key's value is inf or NaN)
        ds = probs * (dp - (dp * probs).sum(-1, keepdims=True))
        if dmask is not None:
            np.copyto(_np(dmask), ds, casting="unsafe")
        np.copyto(_np(dv), np.matmul(np.swapaxes(kept, -1, -2), dO), casting="unsafe")
        np.copyto(_np(dq), np.matmul(ds, K) * scale, casting="unsafe")
        np.copyto(_np(dk), np.matmul(np.swapaxes(ds, -1, -2), Q) * scale, casting="unsafe")

    def unfold(
        self,
        out: View,
        x: View,
        kernel_size: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        pad_value: float,
    ) -> None:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
        target = _windows(out, x, kernel_size, stride, padding, dilation, "unfold")
        a = _np(x)
        if ph or pw:
            a = np.pad(a, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=pad_value)
        # windows of the dilated extent, then every sh-th start and every dh-th tap: (N, C, OH, OW, kh, kw)
        win = np.lib.stride_tricks.sliding_window_view(a, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
        win = win[:, :, ::sh, ::sw, ::dh, ::dw]
        win = win.transpose(0, 1, 4, 5, 2, 3)
        _parallel(lambda b: np.copyto(target[b], win[b], casting="unsafe"), target.shape[0], target.size)

    def max_pool2d(self, values: View, indices: View, x: View, kernel_size: Sequence[int]) -> bool:
        kh, kw = kernel_size
        a = _np(x)
        n, c, h, w = a.shape
        oh, ow = h // kh, w // kw
        if a.dtype.kind not in "fiu" or values.shape != (n, c, oh, ow) or indices.shape != (n, c, oh, ow):
            return False
        # the windows as a (N, C, OH, kh, OW, kw) view; tap t = i*kw + j is [:, :, :, i, :, j]
        win = a[:, :, : oh * kh, : ow * kw].reshape(n, c, oh, kh, ow, kw)
        kk = kh * kw
        values_out, indices_out = _np(values), _np(indices)

        def run(b: slice) -> None:  # the images ``b`` of the batch
            # each tap copied out once into a contiguous plane: the ~15 passes below then read contiguous memory
            # (a strided tap read costs ~3x a contiguous one). In the MNIST CNN's step (AMD EPYC, one thread) its
            # pools went 4.45 -> 3.87 and 2.60 -> 2.25 ms at batch 128, 17.6 -> 14.1 and 10.5 -> 8.5 at batch 512
            sub = win[b]
            size = kk * sub.shape[0] * c * oh * ow
            planes = _POOL.scratch(a.dtype, size)
            taps = planes.reshape(kk, sub.shape[0], c, oh, ow)
            for i in range(kh):
                for j in range(kw):
                    np.copyto(taps[i * kw + j], sub[:, :, :, i, :, j])
            best = taps[0].copy()
            for tap in taps[1:]:  # the max in window order, as the reduction over unfold's window dim takes it
                np.maximum(best, tap, out=best)
            index = np.full(best.shape, kk - 1, np.int8 if kk <= 127 else np.int32)
            hit = np.empty(best.shape, bool)
            step = np.empty(best.shape, index.dtype)

            def move_to(t: int, where: np.ndarray) -> None:  # index = t where ``where``, branch-free
                np.subtract(index, t, out=step)
                np.multiply(step, where, out=step)
                np.subtract(index, step, out=index)

            for t in range(kk - 2, -1, -1):  # from the end: the first maximum is the last to move the index
                move_to(t, np.equal(taps[t], best, out=hit))
            if a.dtype.kind == "f" and np.isnan(best).any():
                for t in range(kk):  # in order: the last NaN is the last to move the index
                    move_to(t, np.isnan(taps[t], out=hit))
            np.copyto(values_out[b], best)
            np.copyto(indices_out[b], index, casting="unsafe")
            _POOL.give(planes)

        _parallel(run, n, a.size, CACHE_BLOCK)
        return True

    def layer_norm(
        self,
        out: View,
        mean: View | None,
        rstd: View,
        x: View,
        weight: View | None,
        bias: View | None,
        eps: float,
    ) -> bool:
        a = _np(x)
        acc = np.float64 if a.dtype == np.float64 else np.float32  # float16 rows: float32 statistics
        o, r = _np(out), _np(rstd)

        def run(b: slice) -> None:  # two passes over the rows ``b``
            xs = a[b].astype(acc, copy=False)
            with np.errstate(all="ignore"):  # NaN / inf rows give NaN, as PyTorch's do
                mu = xs.mean(1, keepdims=True, dtype=acc) if mean is not None else None
                c = xs - mu if mu is not None else xs
                rs = 1.0 / np.sqrt(np.square(c).mean(1, keepdims=True, dtype=acc) + acc(eps))
                y = c * rs
                if weight is not None:
                    y *= _np(weight).astype(acc, copy=False)
                if bias is not None:
                    y += _np(bias).astype(acc, copy=False)
            np.copyto(o[b], y, casting="unsafe")
            np.copyto(r[b], rs[:, 0], casting="unsafe")
            if mu is not None:
                np.copyto(_np(mean)[b], mu[:, 0], casting="unsafe")

        _parallel(run, a.shape[0], a.size)
        return True

    def layer_norm_backward(
        self, dx: View, dy: View, x: View, weight: View | None, mean: View | None, rstd: View
    ) -> bool:
        a = _np(x)
        acc = np.float64 if a.dtype == np.float64 else np.float32
        g, o = _np(dy), _np(dx)
        r = _np(rstd).astype(acc, copy=False)[:, None]
        mu = None if mean is None else _np(mean).astype(acc, copy=False)[:, None]

        def run(b: slice) -> None:
            with np.errstate(all="ignore"):
                xs = a[b].astype(acc, copy=False)
                xhat = (xs - mu[b] if mu is not None else xs) * r[b]
                h = g[b].astype(acc, copy=False)
                if weight is not None:
                    h = h * _np(weight).astype(acc, copy=False)
                t = h - xhat * (h * xhat).mean(1, keepdims=True, dtype=acc)
                if mu is not None:
                    t -= h.mean(1, keepdims=True, dtype=acc)
                np.copyto(o[b], t * r[b], casting="unsafe")

        _parallel(run, a.shape[0], a.size)
        return True

    def cross_entropy(
        self,
        loss: View,
        lse: View,
        wk: View,
        x: View,
        target: View,
        weight: View | None,
        ignore_index: int,
        label_smoothing: float,
        mean: View | None = None,
    ) -> bool:
        a = _np(x)
        acc = np.float64 if a.dtype == np.float64 else np.float32
        if mean is not None and (a.dtype != np.float32 or mean.dtype is not float32 or mean.shape != (2,)):
            return False
        xs = a.astype(acc, copy=False)
        m, c = xs.shape
        t = _np(target).astype(np.int64)
        keep = (t != ignore_index) & (t >= 0) & (t < c)  # a bad target (reported by the caller's check) reads nothing
        safe = np.where(keep, t, 0)
        w = None if weight is None else _np(weight).astype(acc, copy=False)
        with np.errstate(all="ignore"):
            mx = xs.max(1, keepdims=True)
            s = np.exp(xs - mx).sum(1, dtype=acc)
            row_lse = mx[:, 0] + np.log(s)
            wt = keep.astype(acc) if w is None else np.where(keep, w[safe], 0)
            picked = xs[np.arange(m), safe]
            row = -((1 - label_smoothing) * wt * (picked - row_lse))  # -0 for a certain prediction, as PyTorch
            if label_smoothing:
                w_sum = c if w is None else w.sum()
                sxw = xs.sum(1) if w is None else xs @ w
                row = row + label_smoothing / c * (w_sum * row_lse - sxw)
        kept = np.where(keep, row, 0)
        np.copyto(_np(loss), kept, casting="unsafe")
        np.copyto(_np(lse), row_lse, casting="unsafe")
        np.copyto(_np(wk), wt, casting="unsafe")
        if mean is not None:
            total = wt.sum(dtype=np.float32)
            with np.errstate(all="ignore"):  # every row ignored: 0 / 0, NaN as PyTorch's mean
                _np(mean)[...] = (kept.sum(dtype=np.float32) / total, total)
        return True

    def cross_entropy_backward(
        self,
        dx: View,
        scale: View,
        x: View,
        target: View,
        lse: View,
        weight: View | None,
        ignore_index: int,
        label_smoothing: float,
        den: View | None = None,
    ) -> bool:
        a = _np(x)
        acc = np.float64 if a.dtype == np.float64 else np.float32
        m, c = a.shape
        t = _np(target).astype(np.int64)
        keep = (t != ignore_index) & (t >= 0) & (t < c)
        safe = np.where(keep, t, 0)
        w = None if weight is None else _np(weight).astype(acc, copy=False)
        aa, cc = 1 - label_smoothing, label_smoothing / c
        with np.errstate(all="ignore"):
            s = _np(scale) if den is None else _np(scale) / _np(den)  # in scale's dtype, as the division first
            sc = np.where(keep, s.astype(acc, copy=False), 0)[:, None]
            wt = (np.ones(m, acc) if w is None else w[safe])[:, None]
            w_sum = c if w is None else w.sum()
            g = np.exp(a.astype(acc, copy=False) - _np(lse).astype(acc, copy=False)[:, None]) * (
                sc * (aa * wt + cc * w_sum)
            )
            g -= sc * cc * (1.0 if w is None else w[None, :])
            g[np.arange(m), safe] -= (sc * aa * wt)[:, 0]
        np.copyto(_np(dx), g, casting="unsafe")
        return True

    def max_pool2d_backward(self, grad_input: View, grad: View, indices: View, kernel_size: Sequence[int]) -> bool:
        kh, kw = kernel_size
        out = _np(grad_input)
        g, index = _np(grad), _np(indices)
        n, c, h, w = out.shape
        oh, ow = h // kh, w // kw
        if out.dtype.kind != "f" or g.dtype != out.dtype or g.shape != (n, c, oh, ow) or index.shape != g.shape:
            return False
        if (oh * kh, ow * kw) != (h, w):
            out[...] = 0  # the rows and columns no window covers
        s0, s1, s2, s3 = out.strides  # the windows of out as (N, C, OH, kh, OW, kw), written through
        win = np.lib.stride_tricks.as_strided(out, (n, c, oh, kh, ow, kw), (s0, s1, s2 * kh, s2, s3 * kw, s3))

        def run(b: slice) -> None:  # the images ``b`` of the batch
            with np.errstate(all="ignore"):
                g0 = g[b] + 0  # the sum the composition's fold takes (0 + g): -0 becomes +0
            hit = np.empty(g0.shape, bool)
            for i in range(kh):
                for j in range(kw):
                    _select_into(win[b, :, :, i, :, j], np.equal(index[b], i * kw + j, out=hit), g0, 0.0)

        _parallel(run, n, out.size, CACHE_BLOCK)
        return True

    def fold(
        self,
        out: View,
        cols: View,
        kernel_size: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> None:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
        c6 = _windows(cols, out, kernel_size, stride, padding, dilation, "fold")
        n, c, h, w = out.shape
        oh, ow = c6.shape[4:]
        target = _np(out)
        # windows that cannot overlap (each pixel gets at most one term): assignments instead of read-add-writes
        disjoint = sh > dh * (kh - 1) and sw > dw * (kw - 1)
        # the sums go straight into the output, unless half (accumulated in fp32) or cols stored channel-major
        # (conv2d's (C*kh*kw, N, L) layout): there a (C, N, H, W) scratch that the tap adds walk in the cols' own
        # memory order (~20 % faster for a CNN's input gradient) and one copy into the output at the end
        wide = np.dtype(np.float32) if target.dtype == np.float16 else target.dtype
        channel_major = n > 1 and c > 1 and c6.strides[1] > c6.strides[0]
        scratch = None
        if wide != target.dtype or channel_major:
            scratch = _POOL.scratch(wide, target.size)
            shape = (c, n, h, w) if channel_major else (n, c, h, w)
            accs = scratch.reshape(shape).transpose(1, 0, 2, 3) if channel_major else scratch.reshape(shape)

        def run(b: slice) -> None:  # the images ``b`` of the batch
            acc = target[b] if scratch is None else accs[b]
            acc[...] = 0
            for i in range(kh):  # kh*kw strided adds: tap (i, j) lands on a strided grid of the padded image
                rows, src_rows = _tap_range(i * dh - ph, sh, oh, h)
                for j in range(kw):
                    cols_, src_cols = _tap_range(j * dw - pw, sw, ow, w)
                    if rows is None or cols_ is None:
                        continue  # the tap reads only padding
                    src = c6[b, :, i, j, src_rows, src_cols]
                    dst = acc[:, :, rows, cols_]
                    if disjoint:
                        np.add(src, 0, out=dst)  # + 0 as the sum would: -0 becomes +0
                    else:
                        dst += src
            if scratch is not None:
                np.copyto(target[b], acc, casting="unsafe")

        _parallel(run, n, target.size * kh * kw)
        if scratch is not None:
            _POOL.give(scratch)


def _same_start(a: np.ndarray, b: np.ndarray) -> bool:
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _tap_range(start: int, stride: int, count: int, size: int) -> tuple[slice | None, slice]:
    """For one kernel tap along one axis: the slice of the image it touches (``start + o * stride`` for the outputs
    ``o`` that land inside ``[0, size)``) and the matching slice of the outputs; ``None`` if it touches none."""
    lo = max(0, -(start // stride)) if start < 0 else 0
    hi = min(count - 1, (size - 1 - start) // stride)
    if lo > hi:
        return None, slice(0, 0)
    return slice(start + lo * stride, start + hi * stride + 1, stride), slice(lo, hi + 1)


def _blas_operand(a: np.ndarray) -> np.ndarray:
    """``a`` itself if BLAS can read its last two dims as a (possibly transposed) matrix, else a C-contiguous copy:
    numpy's matmul computes any other layout (a broadcast or a doubly strided view) in a loop many times slower."""
    if a.ndim < 2:
        return a
    (m, n), (s0, s1), item = a.shape[-2:], a.strides[-2:], a.itemsize
    if (s1 == item and s0 >= n * item and s0 % item == 0) or (s0 == item and s1 >= m * item and s1 % item == 0):
        return a
    if m == 1 or n == 1:  # a vector: any positive stride works
        return a
    return np.ascontiguousarray(a)


#: argmax/argmin along an axis at most this long run as a few vectorised passes per position along it
SHORT_AXIS = 16


def _short_arg_reduce(op: str, a: np.ndarray, axis: int) -> np.ndarray | None:
    """argmax/argmin along a short axis (max-pooling's window): numpy's own moves that axis last and reduces each
    tiny row by itself. Here: the extreme, then, walking the axis from its end, the index moves to every position
    that equals it (branch-free arithmetic: numpy's masked writes mispredict on random data), so the first extreme
    wins, as numpy's. ``None`` (numpy's rule decides) where an extreme is NaN: numpy gives the first NaN."""
    k = a.shape[axis] if a.ndim else 0
    if not 1 < k <= SHORT_AXIS or a.size < 4096 or a.dtype.kind not in "fiu":
        return None
    best = (np.max if op == "argmax" else np.min)(a, axis=axis)
    if a.dtype.kind == "f" and np.isnan(best).any():
        return None
    if a.dtype.kind in "iu" and np.array_equal(best, (np.min if op == "argmax" else np.max)(a, axis=axis)):
        return np.zeros(best.shape, np.int8)  # every row constant (max-pooling's NaN flags of a NaN-free input)
    taps = np.moveaxis(a, axis, 0)
    # int8 positions (k <= 16): the temporaries stay a small share of the input's size
    index = np.full(best.shape, k - 1, np.int8)
    hit = np.empty(best.shape, bool)
    step = np.empty(best.shape, np.int8)
    for t in range(k - 2, -1, -1):
        np.equal(taps[t], best, out=hit)
        np.subtract(index, t, out=step)
        np.multiply(step, hit, out=step)
        index -= step  # index = t where hit, else unchanged
    return index


def _bits(v: object, dtype: np.dtype) -> object:
    """The IEEE bits of a float array (a view) or number, as unsigned integers of the same width."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    if isinstance(v, np.ndarray):
        return v.view(unsigned)
    return np.array(v, dtype).view(unsigned)[()]


def _select_into(target: np.ndarray, cond: np.ndarray, a: object, b: object) -> None:
    """``target = where(cond, a, b)`` bit for bit (signed zeros and NaN payloads kept), branch-free: numpy's
    ``where`` and masked ``copyto`` branch per element and run several times slower on an unpredictable mask.
    ``a_bits * cond + b_bits * (not cond)`` in unsigned integers: one term is 0, so the sum is exact."""
    out = target.view(np.dtype(f"u{target.itemsize}"))
    abits, bbits = _bits(a, target.dtype), _bits(b, target.dtype)
    if isinstance(bbits, np.integer) and bbits == 0:  # where(c, a, +0.0): one multiply
        np.multiply(abits, cond, out=out, casting="unsafe")
        return
    other = np.logical_not(cond)
    if isinstance(abits, np.integer) and abits == 0:
        np.multiply(bbits, other, out=out, casting="unsafe")
        return
    tmp = np.multiply(bbits, other, dtype=out.dtype, casting="unsafe")
    np.multiply(abits, cond, out=out, casting="unsafe")
    out += tmp


def _same_float(target: np.ndarray, vals: Sequence[object]) -> bool:
    """Every array operand has the float dtype of ``target`` (numbers act as it): numpy's ufunc with ``out=``
    computes exactly what the formula does."""
    return target.dtype.kind == "f" and all(not isinstance(v, np.ndarray) or v.dtype == target.dtype for v in vals)


def _ufunc_into(ufunc: np.ufunc) -> Callable[[np.ndarray, Sequence[object]], bool]:
    def run(target: np.ndarray, vals: Sequence[object]) -> bool:
        if not _same_float(target, vals):
            return False
        ufunc(*vals, out=target)
        return True

    return run


def _compare_into(ufunc: np.ufunc) -> Callable[[np.ndarray, Sequence[object]], bool]:
    def run(target: np.ndarray, vals: Sequence[object]) -> bool:
        arrays = [v for v in vals if isinstance(v, np.ndarray)]
        if target.dtype != np.bool_ or not arrays or any(v.dtype != arrays[0].dtype for v in arrays):
            return False
        ufunc(*vals, out=target)
        return True

    return run


def _temporary(target: np.ndarray, dtype: np.dtype | type | None = None) -> np.ndarray:
    """A pooled scratch array shaped as ``target`` (``dtype``: target's by default); ``_POOL.give(t.base)`` after
    use. The hot kernels' large temporaries were fresh memory every step, and malloc's trimming then cost ~1,250
    page faults (2.5-6 ms of system time) a step of the 9216 CNN: ReLU's mask, Adam's update of its 4.7 MB fc1."""
    return _POOL.scratch(target.dtype if dtype is None else dtype, target.size).reshape(target.shape)


def _relu_into(target: np.ndarray, vals: Sequence[object]) -> bool:
    (a,) = vals
    if not _same_float(target, vals) or not isinstance(a, np.ndarray):
        return False
    # where(a < 0, 0, a): -0 and NaN stay as they are (np.maximum would turn -0 into +0)
    keep = np.less(a, 0, out=_temporary(a, np.bool_))  # an array even when 0-d
    _select_into(target, np.logical_not(keep, out=keep), a, 0.0)
    _POOL.give(keep.base)
    return True


def _relu_grad_into(target: np.ndarray, vals: Sequence[object]) -> bool:
    g, x = vals
    if not _same_float(target, vals) or not isinstance(x, np.ndarray):
        return False
    shape = np.broadcast_shapes(x.shape, target.shape)
    off = _POOL.scratch(np.bool_, math.prod(shape)).reshape(shape)
    np.less_equal(x, 0, out=off)  # where(x <= 0, 0, g): a NaN input passes the gradient
    _select_into(target, np.logical_not(off, out=off), g, 0.0)
    _POOL.give(off.base)
    return True


def _where_op(target: np.ndarray, vals: Sequence[object]) -> bool:
    cond, a, b = vals
    if not isinstance(cond, np.ndarray) or cond.dtype != np.bool_ or not _same_float(target, (a, b)):
        return False
    if any(isinstance(v, np.ndarray) and np.may_share_memory(target, v) for v in (cond, a, b)):
        return False  # the first write into target would change an operand before it is read
    _select_into(target, cond, a, b)
    return True


def _lerp_into(target: np.ndarray, vals: Sequence[object]) -> bool:
    a, b, w = vals  # a + w * (b - a)
    if not _same_float(target, vals) or not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        return False
    t = _temporary(target)
    np.subtract(b, a, out=t)
    np.multiply(w, t, out=t)
    np.add(a, t, out=target)
    _POOL.give(t.base)
    return True


def _ema_sq_into(target: np.ndarray, vals: Sequence[object]) -> bool:
    v, g, beta = vals  # beta * v + (1.0 - beta) * g * g
    if not _same_float(target, vals) or not isinstance(g, np.ndarray) or np.may_share_memory(target, g):
        return False
    t = _temporary(target)
    np.multiply(1.0 - beta, g, out=t)
    np.multiply(t, g, out=t)
    np.multiply(beta, v, out=target)
    np.add(target, t, out=target)
    _POOL.give(t.base)
    return True


def _adam_apply_into(target: np.ndarray, vals: Sequence[object]) -> bool:
    p, mom, v, step, inv_sqrt_bc2, eps, decay = vals  # p * decay - step * mom / (sqrt(v) * inv_sqrt_bc2 + eps)
    if not _same_float(target, vals) or not isinstance(mom, np.ndarray) or not isinstance(v, np.ndarray):
        return False
    if np.may_share_memory(target, mom) or np.may_share_memory(target, v):
        return False
    d, u = _temporary(target), _temporary(target)
    np.sqrt(v, out=d)
    np.multiply(d, inv_sqrt_bc2, out=d)
    np.add(d, eps, out=d)
    np.multiply(step, mom, out=u)
    np.divide(u, d, out=u)
    np.multiply(p, decay, out=target)
    np.subtract(target, u, out=target)
    _POOL.give(d.base)
    _POOL.give(u.base)
    return True


#: cpu kernels for the hottest elementwise ops of a training step, written straight into the output (the generic
#: path evaluates the formula into temporaries, then copies): each computes exactly the op's formula
#: (backend/elementwise.py; ops/elementwise.py), and returns False to leave an operand mix it does not cover
#: (integers, mixed dtypes) to the generic path
_FAST_ELEMENTWISE: dict[str, Callable[[np.ndarray, Sequence[object]], bool]] = {
    "add": _ufunc_into(np.add),
    "sub": _ufunc_into(np.subtract),
    "mul": _ufunc_into(np.multiply),
    "eq": _compare_into(np.equal),
    "ne": _compare_into(np.not_equal),
    "relu": _relu_into,
    "relu_grad": _relu_grad_into,
    "where": _where_op,
    # Adam's update (optim/fused.py): the same operations in the same order, two temporaries instead of six
    "lerp": _lerp_into,
    "ema_sq": _ema_sq_into,
    "adam_apply": _adam_apply_into,
}


# ---------------------------------------------------------------- attention, as plain matrices (the reference)
def _mask_of(mask: View | None) -> np.ndarray | None:
    return None if mask is None else _wide_mask(mask)


def _attention_probs(
    q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, causal: bool, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probabilities, row max, row sum of exp(s - max)) of (B, H, L, S) attention, as PyTorch's reference
    defines them: softmax(q k^T * scale + mask) with masked scores -inf (a float mask is added), NaN and +inf
    scores making their row NaN, and a row with every score -inf all 0 (row max 0, sum 0)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if causal:
            s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
        if mask is not None:
            s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
        masked = np.all(s == -np.inf, -1, keepdims=True)
        m = np.where(masked, 0.0, np.max(s, -1, keepdims=True, initial=-np.inf))
        e = np.exp(s - m)
        total = e.sum(-1, keepdims=True)
        probs = np.where(masked, 0.0, e / np.where(masked, 1.0, total))
    return probs, m, total


def _dropout_keep(rng: np.ndarray, shape: tuple[int, ...], p: float) -> np.ndarray:
    """The kept elements of the dropout mask (backend/base.py ``attention``), from ``rng`` = (pcg(seed), counter)."""
    seed_h, counter = np.uint32(rng[0] & 0xFFFFFFFF), np.uint64(rng[1] & 0xFFFFFFFF)
    e = np.arange(int(np.prod(shape)), dtype=np.uint64)
    bits = pcg_hash(((counter + e) & np.uint64(0xFFFFFFFF)).astype(np.uint32) ^ seed_h)
    return ((bits >> np.uint32(8)) >= dropout_threshold(p)).reshape(shape)


def _keep_scale(p: float) -> float:
    return 1.0 / (1.0 - p) if p < 1.0 else 0.0


def _wide(view: View) -> np.ndarray:
    a = _np(view)
    return a.astype(np.float64 if a.dtype == np.float64 else np.float32)


def _wide_mask(mask: View) -> np.ndarray:
    a = _np(mask)
    return a if a.dtype == np.bool_ else a.astype(np.float64)
