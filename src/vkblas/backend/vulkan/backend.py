"""``VulkanBackend``: the backend contract (``backend/base.py``) on wgpu.

Each primitive validates its views on the host (dtypes, shapes, extents inside their storages -- kernels run
without bounds checks), looks up a cached launch plan for its (op, dtypes, shapes, strides), and records one
dispatch into the runtime's open compute pass. Nothing waits except ``to_numpy`` and ``synchronize``.

The cached-plan path is the per-op floor of every small op, so it is written flat: the cache key is a flat tuple
of (dtype, shape, strides) per view (no nested tuples), everything that depends only on the key (operand
validation, shape rules) runs on a cache miss only, and per call there remain the bounds check of each view's
offset against its storage (inlined), one ``Struct.pack_into`` and three C calls (``Runtime.record``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ...dtypes import DType, bool_, float16, float32, int8, int32, uint8
from .. import elementwise as ew
from ..base import (
    RANDOM_DISTRIBUTIONS,
    REDUCE_OPS,
    SCAN_OPS,
    SCATTER_OPS,
    Backend,
    BackendError,
    Capture,
    ForeachProgram,
    Scalar,
    UnsupportedError,
    View,
    numel,
)
from . import epilogue
from .autotune import startup_check
from .conv import encode_conv
from .device import Device
from .device_checks import Check, DeviceChecks
from .gemm import EPILOGUES
from .heaps import device_local_bytes
from .kernels import attention as att
from .kernels import elementwise as ew_kernels
from .kernels import foreach as fe
from .kernels import indexing, norm, random, reduce, scan, sort, window, xent
from .kernels.plan import Plan, out_of_bounds, span
from .kernels.random import pcg_host
from .kernels.reduce import SplitPlan
from .kernels.wgsl import PARAM_WORDS, WORKGROUP, grid
from .large import Splitter
from .matmul import encode_matmul
from .memory import BufferPool, LargeStorage, NeedsSplitting, PoolBuffer, TooLargeForABinding, VulkanStorage, Window
from .queue import Recording, Runtime

_PY_SCALARS = (bool, int, float)
_PLAN_CACHE = 16384
#: bytes per host read of a large storage (the staging buffer grows to this)
_READ_CHUNK = 64 << 20


def _memory(dev: Device) -> int | None:
    """The memory allocations come from: the host's for a CPU adapter (lavapipe), a GPU's device-local heaps (a
    driver may spill what exceeds them into host memory); None (ask the driver) where neither is known."""
    if dev.info.get("adapter_type") != "CPU":
        raw = dev.adapter.info
        return device_local_bytes(raw.get("vendor_id", -1), raw.get("device_id", -1), raw.get("device", ""))
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class InvalidArgumentError(BackendError, ValueError):
    """Operands that no backend could accept (mismatched shapes, bad axes, wrong index dtype)."""


def _describe(views: Sequence[Any]) -> str:
    parts = []
    for v in views:
        if isinstance(v, View):
            parts.append(f"{v.dtype.name}{list(v.shape)} strides={list(v.strides)} offset={v.offset}")
        else:
            parts.append(repr(v))
    return ", ".join(parts)


# a random dispatch's params: word 0 the view's offset, 1 pcg(seed), 2 counter (see random())
_RANDOM_WORDS = struct.Struct("<II")
_WINDOW_BYTES = PARAM_WORDS * 4


def _foreach_bindable(views: Sequence[View], n: int) -> bool:
    """Whether ``foreach``'s fused kernel can take the views: float32, contiguous, ``n`` elements, in one binding."""
    for v in views:  # (a loop, not all() of a generator: the optimizers run this for every parameter every step)
        st = v.storage
        if not (
            st.dtype is float32
            and getattr(st, "buffer", None).__class__ in _BINDABLE
            and v.offset + n <= st.numel
            and numel(v.shape) == n
            and v.is_contiguous()
        ):
            return False
    return True


_BINDABLE = (PoolBuffer, Window)


#: convolution geometries as tuples of Python ints, keyed by themselves (numpy integers hash and compare equal, so
#: they find the entry too): one lookup a call instead of converting four pairs
_GEOMETRIES: dict[Any, tuple[tuple[int, int], ...]] = {}


class VulkanBackend(Backend):
    name = "vulkan"
    can_capture = True

    def __init__(self, adapter_index: int | None = None, limits: dict[str, int] | None = None) -> None:
        """``limits`` lowers the binding / buffer limits the pool uses (tests of the large-tensor paths with small
        tensors); they cannot exceed the adapter's."""
        self.dev = Device(adapter_index)
        self.rt = Runtime(self.dev)
        lim = {**self.dev.limits, **(limits or {})}
        self.pool = BufferPool(
            self.dev.device, lim["max-storage-buffer-binding-size"], lim["max-buffer-size"], _memory(self.dev)
        )
        self.pool.before_destroy = self.rt.drop_bind_groups
        self.large = Splitter(self)
        self.plans: dict[Any, Any] = {}
        self._np_storage = {bool_: np.dtype(np.uint32)}
        self._dtypes = frozenset(d for d in (float32, int32, bool_, float16, uint8, int8) if self.supports(d))
        self.checks = DeviceChecks(self)
        startup_check(self)  # default GEMM variants vs numpy: a driver bug is caught before any user matmul

    @property
    def adapter_index(self) -> int:
        return self.dev.index

    def __repr__(self) -> str:
        return f"VulkanBackend({self.dev.info['name']!r}, {self.dev.info['adapter_type']})"

    # -- description
    def supports(self, dtype: DType) -> bool:
        return dtype in (float32, int32, bool_, uint8, int8) or (dtype is float16 and self.dev.has_f16)

    def describe(self) -> dict[str, Any]:
        d = self.dev.describe()
        d["pool"] = {"allocated_bytes": self.pool.allocated_bytes, "cached_bytes": self.pool.cached_bytes}
        return d

    def device_name(self) -> str:
        return f"vulkan ({self.dev.info['name']})"

    def _error(self, cls: type[BackendError], op: str, operands: Sequence[Any], why: str) -> BackendError:
        return cls(f"{op} on {self.device_name()}: {why}; operands: {_describe(operands)}")

    def _check_dtypes(self, op: str, operands: Sequence[Any]) -> None:
        for v in operands:
            if isinstance(v, View) and not self.supports(v.dtype):
                raise self._error(UnsupportedError, op, operands, f"dtype {v.dtype.name} is not supported here")
            if isinstance(v, View) and not isinstance(v.storage, VulkanStorage):
                raise self._error(BackendError, op, operands, "an operand does not live on this device")

    # -- memory
    def alloc(self, numel: int, dtype: DType) -> VulkanStorage:
        if dtype not in self._dtypes:
            raise UnsupportedError(f"alloc on {self.device_name()}: dtype {dtype.name} is not supported")
        try:
            return VulkanStorage(self.pool, dtype, numel)
        except TooLargeForABinding:  # beyond one binding: segments, reached through windows
            return LargeStorage(self.pool, dtype, numel)

    def from_numpy(self, array: np.ndarray, dtype: DType) -> VulkanStorage:
        if not self.supports(dtype):
            raise UnsupportedError(f"from_numpy on {self.device_name()}: dtype {dtype.name} is not supported")
        host = np.ascontiguousarray(np.asarray(array, dtype=dtype.np).reshape(-1))
        if dtype is bool_:
            host = host.astype(np.uint32)
        storage = self.alloc(host.size, dtype)
        if host.nbytes % 4:  # write_buffer wants whole words
            data: bytes | memoryview = host.tobytes() + b"\0" * (4 - host.nbytes % 4)
        else:
            data = memoryview(host).cast("B")  # no host-side copy of a batch
        if not host.nbytes:
            return storage
        if isinstance(storage, LargeStorage):
            for i, pb in enumerate(storage.segments):
                start = i * storage.segment_bytes
                self.rt.upload(pb, data[start : start + pb.size])
        else:
            self.rt.upload(storage.buffer, data)
        return storage

    def to_numpy(self, view: View) -> np.ndarray:
        self._check_dtypes("to_numpy", [view])
        n = view.numel
        if n == 0:  # still a sync point: pending device checks report here too
            if self.checks.unread:
                self.checks.raise_failed()
            return np.empty(view.shape, dtype=view.dtype.np)
        src, start = view, view.offset
        if not view.is_contiguous():
            tmp = View.of(self.alloc(n, view.dtype), view.shape)
            self.elementwise("copy", tmp, [view])
            src, start = tmp, 0
        if out_of_bounds([src], [(0, n - 1)]) >= 0:
            raise self._error(InvalidArgumentError, "to_numpy", [view], "the view reaches outside its storage")
        item = view.dtype.itemsize
        b0, b1 = start * item, (start + n) * item
        a0, a1 = b0 & ~3, (b1 + 3) & ~3
        raw = self._read(src.storage, a0, a1 - a0)
        arr = np.frombuffer(raw, dtype=self._np_storage.get(view.dtype, view.dtype.np), count=n, offset=b0 - a0)
        arr = arr != 0 if view.dtype is bool_ else arr.copy()
        if self.checks.unread:
            self.checks.raise_failed()
        return arr.reshape(view.shape)

    def _read(self, storage: VulkanStorage, offset: int, nbytes: int) -> bytes:
        """``nbytes`` from byte ``offset`` of a storage; a large one segment by segment, in reads of at most
        ``_READ_CHUNK`` bytes (the staging buffer's size)."""
        if not isinstance(storage, LargeStorage):
            return self.rt.read(storage.buffer, offset, nbytes)
        parts, end, seg = [], offset + nbytes, storage.segment_bytes
        while offset < end:
            i, within = divmod(offset, seg)
            take = min(end - offset, seg - within, _READ_CHUNK)
            parts.append(self.rt.read(storage.segments[i], within, take))
            offset += take
        return b"".join(parts)

    def synchronize(self) -> None:
        self.rt.synchronize()
        if self.checks.unread:
            self.checks.raise_failed()

    # -- value checks: recorded on the device, reported at the next sync point (see device_checks.py)
    def check_values(
        self,
        view: View,
        low: float,
        high: float,
        message: str,
        error: type[Exception] = IndexError,
        inside: bool = True,
        allow: float | None = None,
    ) -> None:
        """Record the check (one dispatch, no host round trip). A failure raises at the next
        ``to_numpy``/``synchronize``; kernels never read out of bounds meanwhile (gather reads 0, scatter_add
        skips)."""
        if view.numel:
            self.checks.record(Check(view, low, high, message, error, inside, allow))

    def flag_where(self, op: str, flag: View, args: Sequence[View | Scalar]) -> None:
        """OR 1 into the int32 element under ``flag`` (a view with zero strides over ``args[0]``'s shape) where the
        boolean elementwise ``op`` is true: a value check in one dispatch. NeedsSplitting for a large view."""
        key = ("flag", op, *(type(a) if not isinstance(a, View) else (a.dtype, a.shape, a.strides) for a in args))
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, op, [flag, *args], lambda: ew_kernels.build(self.dev, op, flag, args, flag=True))
        views = [flag, *(a for a in args if isinstance(a, View))]
        self.launch(op, plan, views, [a for a in args if not isinstance(a, View)])

    # -- graph capture (the optional interface of backend/base.py; vkblas.graphs drives it)
    def capture_begin(self) -> Recording:
        rec = Recording()
        # the graph's check flags persist across replays: allocated and zeroed before recording starts, so that
        # no buffer freed during the capture (an intermediate the replay rewrites) can become them
        rec.flags = self.checks.zeroed_flags()
        self.rt.begin_capture(rec)
        return rec

    def capture_end(self) -> None:
        """Stop recording; pins the buffers the recording binds (a graph's memory) in the pool."""
        rec = self.rt.end_capture()
        if rec is not None:
            self.pool.pin(rec.buffers)

    def capture_release(self, capture: Capture) -> None:
        self.pool.unpin(self._recording(capture).buffers)

    def capture_paused(self) -> AbstractContextManager[None]:
        return self.rt.paused()

    def capture_replay(self, capture: Capture) -> None:
        """Re-issue a recording: random dispatches get the next seed/counter of their generator (as the eager op
        would), then every dispatch is re-recorded; its index checks are looked at by the next sync point."""
        rec = self._recording(capture)
        blob = rec.blob
        for i, gen, n in rec.randoms:
            seed, counter = gen.take(n)
            at = i * _WINDOW_BYTES + 4 * rec.seed_words.get(i, 1)
            _RANDOM_WORDS.pack_into(blob, at, pcg_host(seed & 0xFFFFFFFF), counter & 0xFFFFFFFF)
        self.rt.replay(rec)
        self.checks.after_replay(rec)

    def capture_profile(self, capture: Capture) -> list[Any]:
        from .profile import profile  # a tool, not the hot path

        rec = self._recording(capture)
        labels = {k.handle: k.label for k in self.dev._kernels.values()}
        rows = profile(self.rt, rec, labels)
        self.checks.after_replay(rec)  # its device checks (indices, targets) are looked at, as after a replay
        return rows

    def _recording(self, capture: Capture) -> Recording:
        if not isinstance(capture, Recording):
            raise BackendError(f"{self.device_name()}: {capture!r} was not captured by a Vulkan backend")
        return capture

    def empty_cache(self) -> None:
        """Release cached free buffers back to the driver."""
        self.pool.empty_cache()

    def memory_stats(self) -> dict[str, int]:
        p = self.pool
        return {"allocated": p.live_bytes, "peak_allocated": p.peak_bytes, "reserved": p.allocated_bytes}

    def reset_peak_memory_stats(self) -> None:
        self.pool.reset_peak()

    # -- dispatch
    def launch(
        self,
        op: str,
        plan: Plan,
        views: Sequence[View],
        scalars: Sequence[Any] = (),
        groups: tuple[int, int, int] | None = None,
    ) -> None:
        """Record one dispatch of ``plan`` over ``views`` (bindings in order) with dynamic ``scalars``."""
        groups = groups or plan.groups
        if not groups[0]:
            return
        bufs = []
        offs = []
        try:
            for v, (lo, hi) in zip(views, plan.spans, strict=True):
                st, o = v[0], v[3]
                if hi >= 0 and (o + lo < 0 or o + hi >= st.numel):
                    raise self._error(InvalidArgumentError, op, views, "a view reaches outside its storage")
                bufs.append(st.buffer)
                offs.append(o)
        except AttributeError:
            raise self._not_bindable(op, views) from None
        offs += scalars
        offs.append(plan.static_bytes)
        try:
            self.rt.record(plan.pipeline, tuple(bufs), plan.packer, offs, groups)
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - struct.error for out-of-range scalars, wgpu errors
            raise self._record_error(op, views, scalars, e) from e

    def _not_bindable(self, op: str, views: Sequence[Any]) -> Exception:
        """A view of a large storage (split the op: ``large.py``), or one that lives elsewhere."""
        if any(isinstance(v, View) and isinstance(v.storage, LargeStorage) for v in views):
            return NeedsSplitting(op)
        return self._error(BackendError, op, views, "an operand does not live on this device")

    def _record_error(self, op: str, views: Sequence[View], scalars: Sequence[Any], e: Exception) -> BackendError:
        return self._error(BackendError, op, [*views, *scalars], f"recording the dispatch failed: {e}")

    def _plan(self, key: Any, op: str, operands: Sequence[Any], build: Any) -> Any:
        """Cached plan for ``key``; builds it with validation-error wrapping on a miss."""
        if len(self.plans) > _PLAN_CACHE:
            self.plans.clear()
        self._check_dtypes(op, operands)
        try:
            plan = self.plans[key] = build()
        except BackendError:
            raise
        except TypeError as e:
            raise self._error(UnsupportedError, op, operands, str(e)) from e
        except (ValueError, KeyError) as e:
            raise self._error(InvalidArgumentError, op, operands, str(e)) from e
        return plan

    # -- compute
    def elementwise(self, op: str, out: View, args: Sequence[View | Scalar]) -> None:
        held = self.rt.held
        if held is not None and op in EPILOGUES and epilogue.fuse(self, held, op, out, list(args)):
            return  # done in the epilogue of the GEMM before it
        st = out[0]
        key = [op, st.dtype, out[1], out[2]]
        views = [out]
        scalars = []
        for a in args:
            t = type(a)
            if t is float or t is int or t is bool:
                key.append(t)
                scalars.append(a)
            elif t is View or isinstance(a, View):
                key += (a[0].dtype, a[1], a[2])
                views.append(a)
            else:  # numpy scalars and 0-d arrays act as Python numbers
                return self.elementwise(op, out, [a if isinstance(a, View) else np.asarray(a).item() for a in args])
        tkey = tuple(key)
        plan = self.plans.get(tkey)
        if plan is None:
            plan = self._plan(tkey, op, [out, *args], lambda: self._build_elementwise(op, out, args))
        if not plan.groups[0]:
            return
        # inlined launch(): bounds of every view, its buffer, offset; the OR of offsets picks the vec4 variant
        bufs = []
        offs = []
        aligned = 0
        try:
            for v, (lo, hi) in zip(views, plan.spans, strict=True):
                st, o = v[0], v[3]
                if hi >= 0 and (o + lo < 0 or o + hi >= st.numel):
                    raise self._error(InvalidArgumentError, op, views, "a view reaches outside its storage")
                bufs.append(st.buffer)
                offs.append(o)
                aligned |= o
        except AttributeError:
            e = self._not_bindable(op, views)
            if isinstance(e, NeedsSplitting):
                return self.large.elementwise(op, out, args)
            raise e from None
        if plan.vec is not None and not aligned & 3:
            plan = plan.vec
        offs += scalars
        offs.append(plan.static_bytes)
        try:
            self.rt.record(plan.pipeline, tuple(bufs), plan.packer, offs, plan.groups)
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - struct.error for out-of-range scalars, wgpu errors
            raise self._record_error(op, views, scalars, e) from e

    def _build_elementwise(self, op: str, out: View, args: Sequence[Any]) -> Any:
        spec = ew.OPS.get(op)
        if spec is None:
            raise ValueError(f"unknown elementwise op {op!r}")
        if len(args) != spec.arity:
            raise ValueError(f"{op} takes {spec.arity} operands, got {len(args)}")
        for a in args:
            if isinstance(a, View) and a.shape != out.shape:
                raise ValueError(f"operand shape {a.shape} differs from the output shape {out.shape}")
        return ew_kernels.build(self.dev, op, out, args)

    def foreach(self, program: ForeachProgram, tensors: Sequence[Sequence[View]], scalars: Sequence[Any]) -> None:
        """One dispatch per chunk of tensors (``kernels/foreach.py``); tensors it cannot bind (not float32, not
        contiguous, larger than a binding) take the default path of separate elementwise ops."""
        if not tensors:
            return
        nslot = len(tensors[0])
        dev_scal = [s for s in scalars if isinstance(s, View)]
        if any(not isinstance(getattr(s.storage, "buffer", None), (PoolBuffer, Window)) for s in dev_scal):
            return super().foreach(program, tensors, scalars)
        fused, rest = [], []
        for views in tensors:
            n = numel(views[0].shape)
            if n:
                (fused if len(views) == nslot and _foreach_bindable(views, n) else rest).append(views)
        limit = self.dev.limits["max-storage-buffers-per-shader-stage"]
        chunk: list[Sequence[View]] = []
        bufs: dict[Any, int] = {s.storage.buffer: 0 for s in dev_scal}
        for views in fused:
            new = {v.storage.buffer for v in views} - bufs.keys()
            if chunk and (fe.words(len(chunk) + 1, nslot, len(scalars)) > PARAM_WORDS or len(bufs) + len(new) > limit):
                self._foreach_chunk(program, chunk, scalars)
                chunk, bufs = [], {s.storage.buffer: 0 for s in dev_scal}
                new = {v.storage.buffer for v in views}
            chunk.append(views)
            bufs.update(dict.fromkeys(new, 0))
        if chunk:
            self._foreach_chunk(program, chunk, scalars)
        if rest:
            super().foreach(program, rest, scalars)

    def _foreach_chunk(self, program: ForeachProgram, chunk: Sequence[Sequence[View]], scalars: Sequence[Any]) -> None:
        index: dict[Any, int] = {}
        bufs: list[Any] = []

        def bind(v: View) -> int:
            b = v.storage.buffer
            if b not in index:
                bufs.append(b)
                index[b] = len(bufs)
            return index[b]

        slots = tuple(tuple(bind(v) for v in views) for views in chunk)
        scal_bind = tuple(bind(s) if isinstance(s, View) else -1 for s in scalars)
        layout = (slots, scal_bind)
        key = ("foreach", program, layout)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, "foreach", [], lambda: fe.kernel(self.dev, program, layout, len(bufs)))
        kern, packer = plan
        ends, total = [], 0
        for views in chunk:
            total += views[0].numel
            ends.append(total)
        args = [*ends, *(v.offset for views in chunk for v in views)]
        args += [s.offset if isinstance(s, View) else float(s) for s in scalars]
        try:
            self.rt.record(kern.handle, tuple(bufs), packer, args, grid(-(-total // WORKGROUP), self.rt.max_groups))
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - struct.error for out-of-range scalars, wgpu errors
            raise self._record_error("foreach", [v for views in chunk for v in views], list(scalars), e) from e

    def reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> None:
        axes = axes if type(axes) is tuple else tuple(axes)
        key = ("reduce", op, out[0].dtype, out[1], out[2], x[0].dtype, x[1], x[2], axes)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, op, [out, x], lambda: self._build_reduce(op, out, x, axes))
        try:
            if type(plan) is Plan:
                self.launch(op, plan, (out, x))
                return
            # two passes: partial results per (output, split) into a workspace, then one pass over the splits
            sp: SplitPlan = plan
            ws = [View(self.alloc(sp.ws_numel, d), (sp.ws_numel,), (1,), 0) for d in sp.ws_dtypes]
            self.launch(op, sp.partial, (ws[0], x, *ws[1:]))
            self.launch(op, sp.final, (out, *ws))
        except NeedsSplitting:  # raised before anything is recorded
            self.large.reduce(op, out, x, axes)

    def _build_reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> Plan | SplitPlan:
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
        axes = tuple(sorted(a % len(x.shape) for a in axes)) if x.shape else ()
        if len(set(axes)) != len(axes):
            raise ValueError(f"repeated axis in {axes}")
        if op in ("argmax", "argmin") and len(axes) != 1:
            raise ValueError(f"{op} takes exactly one axis, got {axes}")
        kept = tuple(n for d, n in enumerate(x.shape) if d not in axes)
        if out.shape != kept:
            raise ValueError(f"output shape {out.shape} should be {kept} (input shape without axes {axes})")
        if x.numel == 0 and op not in ("sum", "prod"):
            raise ValueError(f"{op}() of an empty tensor of shape {x.shape} has no identity")
        return reduce.build(self.dev, op, out, x, axes)

    def matmul(self, out: View, a: View, b: View) -> None:
        self._encode_matmul(out, a, b, None)

    def matmul_bias(self, out: View, a: View, b: View, bias: View) -> bool:
        # the epilogue reads a contiguous (n,) bias of out's dtype from one binding; anything else composes
        if (
            len(out.shape) != 2
            or bias.shape != out.shape[-1:]
            or bias.dtype is not out.dtype
            or (bias.strides != (1,) and bias.shape[0] > 1)
            or bias.storage.__class__ is not VulkanStorage
        ):
            return False
        self._encode_matmul(out, a, b, bias)
        return True

    def matmul_sum_rows(self, out: View, a: View, b: View, sums: View) -> bool:
        # the GEMM writes a contiguous (m,) float target of out's dtype through one binding; anything else composes
        if (
            len(out.shape) != 2
            or sums.shape != out.shape[:1]
            or sums.dtype is not out.dtype
            or not sums.dtype.is_floating
            or (sums.strides != (1,) and sums.shape[0] > 1)
            or sums.storage.__class__ is not VulkanStorage
            or not out.numel
            or not a.shape[-1]
        ):
            return False
        self._encode_matmul(out, a, b, sums, "sum_rows")
        return True

    def _encode_matmul(self, out: View, a: View, b: View, bias: View | None, axis: str = "cols") -> None:
        if (
            out.shape
            and len(a.shape) >= 2
            and (a.shape[:-2], a.shape[-2], b.shape[-1]) == (out.shape[:-2], out.shape[-2], out.shape[-1])
            and a.shape[:-2] == b.shape[:-2]
            and a.shape[-1] == b.shape[-2]
            and a.dtype is b.dtype
        ):
            for v in (out, a, b):  # the common case checked inline; _check_dtypes words the errors
                st = v.storage
                if st.__class__ is not VulkanStorage or st.dtype is not float32:
                    self._check_dtypes("matmul", [out, a, b])
                    break
        else:
            raise self._error(
                InvalidArgumentError,
                "matmul",
                [out, a, b],
                "expected out[..., m, n] = a[..., m, k] @ b[..., k, n] with equal batch shapes and equal dtypes",
            )
        try:
            encode_matmul(self, out, a, b, bias, axis)
        except NeedsSplitting:
            self.large.matmul(out, a, b)
            if bias is not None and axis == "sum_rows":
                self.reduce("sum", bias, a, (1,))
            elif bias is not None:
                self.elementwise("add", out, [out, View(bias.storage, out.shape, (0, 1), bias.offset)])
        except BackendError:
            raise
        except TypeError as e:
            raise self._error(UnsupportedError, "matmul", [out, a, b], str(e)) from e
        except ValueError as e:
            raise self._error(InvalidArgumentError, "matmul", [out, a, b], str(e)) from e

    def _check_index_op(self, op: str, dense: View, target: View, dim: int, index: View) -> int:
        operands = [dense, target, index]
        rank = len(index.shape)
        if index.dtype is not int32:
            raise self._error(InvalidArgumentError, op, operands, "index must be int32")
        if not (len(dense.shape) == len(target.shape) == rank) or dense.shape != index.shape or not -rank <= dim < rank:
            raise self._error(InvalidArgumentError, op, operands, f"shapes/dim {dim} do not match {op}'s rules")
        dim %= rank
        if any(index.shape[d] > target.shape[d] for d in range(rank) if d != dim):
            raise self._error(InvalidArgumentError, op, operands, "index is larger than the indexed tensor")
        return dim

    def gather(self, out: View, x: View, dim: int, index: View) -> None:
        self._index_op("gather", "assign", out, x, dim, index)

    def scatter(self, op: str, out: View, dim: int, index: View, src: View) -> None:
        self._index_op("scatter", op, src, out, dim, index)

    def _index_op(self, kind: str, op: str, dense: View, target: View, dim: int, index: View) -> None:
        """gather (dense = out) or scatter (dense = src) over the whole target, or in index ranges over windows of
        a target larger than a binding (``large.py``)."""
        size = target.shape[dim] if -len(target.shape) <= dim < max(len(target.shape), 1) else 0

        def run(d: View, t: View, i: View, lo: int, hi: int) -> None:
            self._index_pass(kind, op, d, t, dim, i, lo, hi, size)

        try:
            run(dense, target, index, 0, size)
        except NeedsSplitting:
            self.large.index_op(kind, dense, target, dim % len(target.shape), index, run)

    def _index_pass(
        self, kind: str, op: str, dense: View, target: View, dim: int, index: View, lo: int, hi: int, size: int
    ) -> None:
        views = (dense, target, index) if kind == "gather" else (target, index, dense)
        key = (kind, op, dim, *(x for v in views for x in (v[0].dtype, v[1], v[2])))
        name = kind if kind == "gather" else "scatter " + op
        plan = self.plans.get(key)
        if plan is None:

            def build() -> Plan:
                if op not in SCATTER_OPS:
                    raise ValueError(f"unknown scatter op {op!r}; expected one of {SCATTER_OPS}")
                d = self._check_index_op(kind, dense, target, dim, index)
                if kind == "scatter" and target.dtype is not dense.dtype:
                    raise self._error(InvalidArgumentError, name, views, "out and src dtypes differ")
                return indexing.build(self.dev, kind, views, target, d, index, op)

            plan = self._plan(key, name, list(views), build)
        self.launch(name, plan, views, (size, lo, hi))

    def scan(self, op: str, out: View, x: View, axis: int) -> None:
        key = ("scan", op, axis, out[0].dtype, out[1], out[2], x[0].dtype, x[1], x[2])
        plan = self.plans.get(key)
        if plan is None:

            def build() -> Plan:
                if op not in SCAN_OPS:
                    raise ValueError(f"unknown scan {op!r}; expected one of {SCAN_OPS}")
                if not -len(x.shape) <= axis < len(x.shape):
                    raise ValueError(f"axis {axis} is out of range for shape {x.shape}")
                return scan.build(self.dev, op, out, x, axis % len(x.shape))

            plan = self._plan(key, "scan " + op, [out, x], build)
        if x.numel:
            try:
                self.launch("scan " + op, plan, (out, x))
            except NeedsSplitting:
                self.large.scan(op, out, x, axis % len(x.shape))

    def sort(self, values: View, indices: View, x: View, descending: bool) -> None:
        key = ("sort", bool(descending), values[0].dtype, values[1], values[2], indices[0].dtype, indices[2])
        key += (x[0].dtype, x[1], x[2])
        plan = self.plans.get(key)
        if plan is None:
            if not x.shape:
                raise self._error(InvalidArgumentError, "sort", [values, indices, x], "sort needs at least one dim")
            plan = self._plan(
                key, "sort", [values, indices, x], lambda: sort.build(self.dev, values, indices, x, descending)
            )
        if not x.numel:
            return
        sp: sort.SortPlan = plan
        ws = [View(self.alloc(sp.ws_numel or 1, d), (sp.ws_numel or 1,), (1,), 0) for d in (sp.key_dtype, int32)]
        views = (values, indices, x, *ws)
        try:  # every dispatch binds the same views: the first one tells whether they fit
            self.launch("sort", sp.first, views, (0,))
        except NeedsSplitting:
            self.large.sort(values, indices, x, descending)
            return
        if sp.global_step is None:
            return
        k = 2 * sp.block
        while k <= sp.n_padded:
            j = k // 2
            while j >= sp.block:
                self.launch("sort", sp.global_step, (values, *ws), (k, j))
                j //= 2
            self.launch("sort", sp.last_merge if k == sp.n_padded else sp.merge, views, (k,))
            k *= 2

    def random(self, out: View, distribution: str, seed: int, counter: int) -> None:
        key = ("random", distribution, out[0].dtype, out[1], out[2])
        plan = self.plans.get(key)
        if plan is None:
            if distribution not in RANDOM_DISTRIBUTIONS or not out.dtype.is_floating:
                raise self._error(
                    InvalidArgumentError,
                    "random",
                    [out],
                    f"distribution {distribution!r} into "
                    f"{out.dtype.name}; expected one of {RANDOM_DISTRIBUTIONS} into a float tensor",
                )
            plan = self._plan(key, "random", [out], lambda: random.build(self.dev, out, distribution))
        try:
            self.launch("random", plan, (out,), (random.pcg_host(seed & 0xFFFFFFFF), counter & 0xFFFFFFFF))
        except NeedsSplitting:
            self.large.random(out, distribution, seed, counter)

    # -- fused attention (kernels/attention.py)
    def _attention_plan(self, kind: str, views: Sequence[View], shape: tuple, flags: tuple) -> Plan:
        q, v = views[3], views[5]
        # the design preference is in the key: a benchmark or test that narrows it gets freshly chosen kernels
        key = (kind, flags, att.DESIGNS, att.BLOCK_TILES, *[(x[0].dtype, x[1], x[2]) for x in views])
        plan = self.plans.get(key)
        if plan is None:

            def build() -> Plan:
                causal, mask_kind, dropout = flags[:3]
                mask_grad = len(flags) > 3 and flags[3]
                cfg = att.Config(q.dtype, q.shape[-1], v.shape[-1], causal, mask_kind, dropout, mask_grad)
                limit = self.dev.limits["max-compute-workgroup-storage-size"]
                cfg = att.choose(kind, cfg, limit, self.dev.limits["max-compute-invocations-per-workgroup"])
                br = cfg.br
                fmt, _ = att.params_format(kind, cfg)
                b, h, n_q, n_k = shape[:4]
                strides = [views[i].strides for i in att.strided_slots(kind, cfg)]
                static = att.static_words(b, h, n_q, n_k, shape[4], shape[5], strides)
                rows = n_q if kind != "dkv" else n_k
                bh = b * h
                groups = (-(-rows // br), min(bh, 65535), -(-bh // 65535))
                spans = tuple(span(x.shape, x.strides) for x in views)
                return Plan(self.dev.kernel(att.source(kind, cfg), len(views)), fmt, static, groups, spans)

            plan = self._plan(key, "attention", list(views), build)
        return plan

    def _check_attention(
        self,
        q: View,
        k: View,
        v: View,
        mask: View | None,
        outs: Sequence[tuple[View, str]],
        flat: Sequence[View],
    ) -> None:
        """The inputs' shapes and dtypes; ``outs`` (view, the input whose shape it has, or ``out``): the strided
        (B, H, rows, dim) outputs (and the backward's saved ``out``), which must not overlap themselves; ``flat``:
        the outputs that stay contiguous."""
        ok = len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4
        if ok:
            b, h, n_q, e = q.shape
            n_k, ev = k.shape[2], v.shape[3]
            ok = k.shape == (b, h, n_k, e) and v.shape == (b, h, n_k, ev) and e > 0 and ev > 0
            ok = ok and q.dtype is k.dtype is v.dtype and q.dtype in (float32, float16)
            ok = ok and (mask is None or (mask.shape == (b, h, n_q, n_k) and mask.dtype in (bool_, q.dtype)))
        if not ok:
            raise self._error(
                InvalidArgumentError,
                "attention",
                [q, k, v, *([mask] if mask is not None else [])],
                "expected q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev) of one float dtype, E and Ev > 0, and a "
                "bool or same-dtype mask (B, H, L, S)",
            )
        shapes = {"q": q.shape, "k": k.shape, "v": v.shape, "out": (*q.shape[:3], v.shape[3])}
        for o, like in outs:
            want = shapes[like]
            if o.shape != want or o.dtype is not q.dtype or not o.is_non_overlapping():
                raise self._error(
                    InvalidArgumentError, "attention", [o], f"expected a non-overlapping {want} output of q's dtype"
                )
        for o in flat:
            if not o.is_contiguous():
                raise self._error(InvalidArgumentError, "attention", [o], "lse, rng and dmask must be contiguous")

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
        self._check_attention(q, k, v, mask, [(out, "out")], (lse, rng))
        flags = (bool(causal), None if mask is None else "bool" if mask.dtype is bool_ else "float", dropout_p > 0)
        views = [out, lse, rng, q, k, v] + ([mask] if mask is not None else [])
        shape = (*q.shape[:3], k.shape[2], float(scale), float(dropout_p))
        plan = self._attention_plan("forward", views, shape, flags)
        try:
            self.launch("attention", plan, views, (pcg_host(seed & 0xFFFFFFFF), counter & 0xFFFFFFFF))
        except NeedsSplitting:
            self.large.attention((out, lse, rng), (q, k, v, mask), causal, scale, dropout_p, seed, counter)
            return
        rec = self.rt.recording
        if rec is not None:  # a replay re-seeds this dispatch: its seed words follow the views' offsets
            rec.seed_words[len(rec.ops) - 1] = len(views)

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
        strided = [(dq, "q"), (dk, "k"), (dv, "v"), (out, "out")]
        self._check_attention(q, k, v, mask, strided, (lse, rng) + ((dmask,) if dmask is not None else ()))
        flags = (bool(causal), None if mask is None else "bool" if mask.dtype is bool_ else "float", dropout_p > 0)
        b, h, n_q, _ = q.shape
        delta = View(self.alloc(max(b * h * n_q, 1), float32), (b, h, n_q), (h * n_q, n_q, 1), 0)
        masks = [mask] if mask is not None else []
        shape = (*q.shape[:3], k.shape[2], float(scale), float(dropout_p))
        views = [dq, delta, rng, q, k, v, out, dout, lse] + masks + ([dmask] if dmask is not None else [])
        dq_flags = (*flags, dmask is not None)
        dkv_views = [dk, dv, rng, q, k, v, dout, lse, delta] + masks
        try:  # a dq recorded before dkv turns out not to fit is recomputed by the pieces (it is overwritten)
            self.launch("attention backward", self._attention_plan("dq", views, shape, dq_flags), views)
            self.launch("attention backward", self._attention_plan("dkv", dkv_views, shape, flags), dkv_views)
        except NeedsSplitting:
            saved = (q, k, v, out, dout, lse, rng, mask, dmask)
            self.large.attention_backward((dq, dk, dv), saved, causal, scale, dropout_p)

    # -- row normalisation (kernels/norm.py); a view of a large storage is left to the composition
    def _rows_plan(self, kind: str, views: Sequence[View | None], build: Any) -> tuple[Plan, list[View]]:
        parts: list[Any] = [kind]
        present = []
        for v in views:
            if v is None:
                parts.append(None)
            else:
                parts += (v[0].dtype, v[1], v[2])
                present.append(v)
        key = tuple(parts)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, kind, present, build)
        return plan, present

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
        views = (out, mean, rstd, x, weight, bias)
        plan, present = self._rows_plan("layer_norm", views, lambda: norm.build_forward(self.dev, *views))
        try:
            self.launch("layer_norm", plan, present, (float(eps),))
        except NeedsSplitting:
            return False
        return True

    def layer_norm_backward(
        self, dx: View, dy: View, x: View, weight: View | None, mean: View | None, rstd: View
    ) -> bool:
        views = (dx, dy, x, weight, mean, rstd)
        plan, present = self._rows_plan("layer_norm backward", views, lambda: norm.build_backward(self.dev, *views))
        try:
            self.launch("layer_norm backward", plan, present)
        except NeedsSplitting:
            return False
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
        if mean is not None and not (xent.mean_fits(x) and mean.shape == (2,) and mean.dtype is float32):
            return False
        views = (loss, lse, wk, x, target, weight, mean)
        smooth = label_smoothing > 0
        plan, present = self._rows_plan(
            "cross_entropy" + " smooth" * smooth,
            views,
            lambda: xent.build_forward(self.dev, *views[:6], smooth, mean),
        )
        c = label_smoothing / x.shape[1]
        try:
            self.launch("cross_entropy", plan, present, (int(ignore_index), 1.0 - label_smoothing, c))
        except NeedsSplitting:
            return False
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
        if den is not None and not (den.shape == () and den.dtype is scale.dtype is float32):
            return False  # the kernel divides in f32: another dtype's division would round differently
        views = (dx, scale, x, target, lse, weight, den)
        smooth = label_smoothing > 0
        plan, present = self._rows_plan(
            "cross_entropy backward" + " smooth" * smooth, views, lambda: xent.build_backward(self.dev, *views, smooth)
        )
        c = label_smoothing / x.shape[1]
        try:
            self.launch("cross_entropy backward", plan, present, (int(ignore_index), 1.0 - label_smoothing, c))
        except NeedsSplitting:
            return False
        return True

    def unfold(
        self,
        out: View,
        x: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        pad_value: float,
    ) -> None:
        self._window("unfold", out, x, (*kernel_size, *stride, *padding, *dilation), (float(pad_value),))

    def fold(
        self,
        out: View,
        cols: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
    ) -> None:
        self._window("fold", out, cols, (*kernel_size, *stride, *padding, *dilation), ())

    def _window(self, op: str, out: View, src: View, geometry: tuple[int, ...], scalars: tuple[float, ...]) -> None:
        geometry = tuple(int(g) for g in geometry)
        key = (op, out[0].dtype, out[1], out[2], src[0].dtype, src[1], src[2], geometry)
        plan = self.plans.get(key)
        if plan is None:
            k, s, p, d = geometry[0:2], geometry[2:4], geometry[4:6], geometry[6:8]
            plan = self._plan(key, op, [out, src], lambda: window.build(self.dev, op, out, src, k, s, p, d))
        try:
            self.launch(op, plan, (out, src), scalars)
        except NeedsSplitting:
            self.large.window_op(op, out, src, geometry, scalars)

    def convolution(
        self,
        kind: str,
        out: View,
        a: View,
        b: View,
        kernel_size: tuple[int, int],
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        bias: View | None = None,
    ) -> bool:
        views = [out, a, b] + ([bias] if bias is not None else [])
        if out[0].dtype not in (float32, float16) or any(v[0].dtype is not out[0].dtype for v in views):
            return False
        raw = (kernel_size, stride, padding, dilation)
        try:
            geometry = _GEOMETRIES[raw]
        except (KeyError, TypeError):  # new, or unhashable (lists)
            geometry = tuple(tuple(int(x) for x in g) for g in raw)
            if len(_GEOMETRIES) < 256:
                _GEOMETRIES[geometry] = geometry
        try:
            return encode_conv(self, kind, out, a, b, geometry, bias)  # type: ignore[arg-type]
        except NeedsSplitting:  # raised before anything is recorded
            return False
        except BackendError:
            raise
        except ValueError as e:
            raise self._error(InvalidArgumentError, f"convolution {kind}", views, str(e)) from e

    def max_pool2d(self, values: View, indices: View, x: View, kernel_size: tuple[int, int]) -> bool:
        n, c, h, w = x.shape
        oh, ow = h // kernel_size[0], w // kernel_size[1]
        if x[0].dtype not in (float32, float16, int32) or values.shape != (n, c, oh, ow) != indices.shape:
            return False
        return self._max_pool("max_pool2d", False, (values, indices, x), kernel_size)

    def max_pool2d_backward(self, grad_input: View, grad: View, indices: View, kernel_size: tuple[int, int]) -> bool:
        n, c, h, w = grad_input.shape
        pooled = (n, c, h // kernel_size[0], w // kernel_size[1])
        dtype = grad_input[0].dtype
        if dtype not in (float32, float16) or grad[0].dtype is not dtype or grad.shape != pooled != indices.shape:
            return False
        if not grad.numel:  # an empty batch or channel dim (a window never is empty): nothing to write
            return True
        return self._max_pool("max_pool2d backward", True, (grad_input, grad, indices), kernel_size)

    def _max_pool(self, op: str, backward: bool, views: tuple[View, View, View], kernel_size: tuple[int, int]) -> bool:
        """One dispatch of the max-pooling kernel (kernels/window.py); views beyond a binding: the composition."""
        a, b, c = views
        key = (op, a[0].dtype, a[1], a[2], b[0].dtype, b[1], b[2], c[0].dtype, c[1], c[2], tuple(kernel_size))
        plan = self.plans.get(key)
        if plan is None:
            build = lambda: window.build_max_pool(self.dev, backward, *views, kernel_size)  # noqa: E731
            plan = self._plan(key, op, list(views), build)
        try:
            self.launch(op, plan, views)
        except NeedsSplitting:
            return False
        return True

    def window_dispatch(
        self, op: str, out: View, src: View, geometry: tuple[int, ...], scalars: tuple[float, ...]
    ) -> None:
        """One unfold / fold over views that fit their bindings (large.py's pieces)."""
        self._window(op, out, src, geometry, scalars)
