"""``VulkanBackend``: the backend contract (``backend/base.py``) on wgpu.

Each primitive validates its views on the host (dtypes, shapes, extents inside their storages -- kernels run
without bounds checks), looks up a cached launch plan for its (op, dtypes, shapes, strides), and records one
dispatch into the runtime's open compute pass. Nothing waits except ``to_numpy`` and ``synchronize``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...dtypes import DType, bool_, float16, float32, int32
from .. import elementwise as ew
from ..base import RANDOM_DISTRIBUTIONS, REDUCE_OPS, Backend, BackendError, Scalar, UnsupportedError, View
from .device import Device
from .kernels import elementwise as ew_kernels
from .kernels import indexing, random, reduce
from .kernels.plan import Plan, out_of_bounds
from .matmul import encode_matmul
from .memory import BufferPool, VulkanStorage
from .queue import Runtime

_PY_SCALARS = (bool, int, float)
_PLAN_CACHE = 16384


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


class VulkanBackend(Backend):
    name = "vulkan"

    def __init__(self, adapter_index: int | None = None) -> None:
        self.dev = Device(adapter_index)
        self.rt = Runtime(self.dev)
        lim = self.dev.limits
        self.pool = BufferPool(self.dev.device, lim["max-storage-buffer-binding-size"], lim["max-buffer-size"])
        self.pool.before_destroy = self.rt.drop_bind_groups
        self.plans: dict[Any, Any] = {}
        self._np_storage = {bool_: np.dtype(np.uint32)}

    @property
    def adapter_index(self) -> int:
        return self.dev.index

    def __repr__(self) -> str:
        return f"VulkanBackend({self.dev.info['name']!r}, {self.dev.info['adapter_type']})"

    # -- description
    def supports(self, dtype: DType) -> bool:
        return dtype in (float32, int32, bool_) or (dtype is float16 and self.dev.has_f16)

    def describe(self) -> dict[str, Any]:
        d = self.dev.describe()
        d["pool"] = {"allocated_bytes": self.pool.allocated_bytes, "cached_bytes": self.pool.cached_bytes}
        return d

    def _device_name(self) -> str:
        return f"vulkan ({self.dev.info['name']})"

    def _error(self, cls: type[BackendError], op: str, operands: Sequence[Any], why: str) -> BackendError:
        return cls(f"{op} on {self._device_name()}: {why}; operands: {_describe(operands)}")

    def _check_dtypes(self, op: str, operands: Sequence[Any]) -> None:
        for v in operands:
            if isinstance(v, View) and not self.supports(v.dtype):
                raise self._error(UnsupportedError, op, operands, f"dtype {v.dtype.name} is not supported here")
            if isinstance(v, View) and not isinstance(v.storage, VulkanStorage):
                raise self._error(BackendError, op, operands, "an operand does not live on this device")

    # -- memory
    def alloc(self, numel: int, dtype: DType) -> VulkanStorage:
        if not self.supports(dtype):
            raise UnsupportedError(f"alloc on {self._device_name()}: dtype {dtype.name} is not supported")
        return VulkanStorage(self.pool, dtype, numel)

    def from_numpy(self, array: np.ndarray, dtype: DType) -> VulkanStorage:
        if not self.supports(dtype):
            raise UnsupportedError(f"from_numpy on {self._device_name()}: dtype {dtype.name} is not supported")
        host = np.ascontiguousarray(np.asarray(array, dtype=dtype.np).reshape(-1))
        if dtype is bool_:
            host = host.astype(np.uint32)
        storage = VulkanStorage(self.pool, dtype, host.size)
        data = host.tobytes()
        if len(data) % 4:
            data += b"\0" * (4 - len(data) % 4)
        if data:
            self.rt.upload(storage.buffer, data)
        return storage

    def to_numpy(self, view: View) -> np.ndarray:
        self._check_dtypes("to_numpy", [view])
        n = view.numel
        if n == 0:
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
        raw = self.rt.read(src.storage.buffer, a0, a1 - a0)
        arr = np.frombuffer(raw, dtype=self._np_storage.get(view.dtype, view.dtype.np), count=n, offset=b0 - a0)
        arr = arr != 0 if view.dtype is bool_ else arr.copy()
        return arr.reshape(view.shape)

    def synchronize(self) -> None:
        self.rt.synchronize()

    def empty_cache(self) -> None:
        """Release cached free buffers back to the driver."""
        self.pool.empty_cache()

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
        try:
            bufs = [v.storage.buffer for v in views]
        except AttributeError:
            raise self._error(BackendError, op, views, "an operand does not live on this device") from None
        if out_of_bounds(views, plan.spans) >= 0:
            raise self._error(InvalidArgumentError, op, views, "a view reaches outside its storage")
        try:
            self.rt.dispatch(plan.kernel, bufs, plan.fmt, (*[v.offset for v in views], *scalars, *plan.static), groups)
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - struct.error for out-of-range scalars, wgpu errors
            raise self._error(BackendError, op, [*views, *scalars], f"recording the dispatch failed: {e}") from e

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
        key: list[Any] = [op, out.dtype, out.shape, out.strides]
        views = [out]
        for a in args:
            if isinstance(a, View):
                key.append((a.dtype, a.shape, a.strides))
                views.append(a)
            elif type(a) in _PY_SCALARS:
                key.append(type(a))
            else:  # numpy scalars and 0-d arrays act as Python numbers
                return self.elementwise(op, out, [a if isinstance(a, View) else np.asarray(a).item() for a in args])
        tkey = tuple(key)
        cached = self.plans.get(tkey)
        if cached is None:
            cached = self._plan(tkey, op, [out, *args], lambda: self._build_elementwise(op, out, args))
        plan, scalar_pos = cached
        self.launch(op, plan, views, [args[i] for i in scalar_pos])

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

    def reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> None:
        axes = tuple(sorted(a % len(x.shape) for a in axes)) if x.shape else ()
        key = ("reduce", op, out.dtype, out.shape, out.strides, x.dtype, x.shape, x.strides, axes)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, op, [out, x], lambda: self._build_reduce(op, out, x, axes))
        self.launch(op, plan, (out, x))

    def _build_reduce(self, op: str, out: View, x: View, axes: tuple[int, ...]) -> Plan:
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
        if len(set(axes)) != len(axes):
            raise ValueError(f"repeated axis in {axes}")
        if op in ("argmax", "argmin") and len(axes) != 1:
            raise ValueError(f"{op} takes exactly one axis, got {axes}")
        kept = tuple(n for d, n in enumerate(x.shape) if d not in axes)
        if out.shape != kept:
            raise ValueError(f"output shape {out.shape} should be {kept} (input shape without axes {axes})")
        if x.numel == 0 and op != "sum":
            raise ValueError(f"{op}() of an empty tensor of shape {x.shape} has no identity")
        return reduce.build(self.dev, op, out, x, axes)

    def matmul(self, out: View, a: View, b: View) -> None:
        if (
            out.shape
            and len(a.shape) >= 2
            and (a.shape[:-2], a.shape[-2], b.shape[-1]) == (out.shape[:-2], out.shape[-2], out.shape[-1])
            and a.shape[:-2] == b.shape[:-2]
            and a.shape[-1] == b.shape[-2]
            and a.dtype is b.dtype
        ):
            self._check_dtypes("matmul", [out, a, b])
        else:
            raise self._error(
                InvalidArgumentError,
                "matmul",
                [out, a, b],
                "expected out[..., m, n] = a[..., m, k] @ b[..., k, n] with equal batch shapes and equal dtypes",
            )
        try:
            encode_matmul(self, out, a, b)
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
        dim = self._check_index_op("gather", out, x, dim, index)
        key = ("gather", dim, *[(v.dtype, v.shape, v.strides) for v in (out, x, index)])
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(
                key,
                "gather",
                [out, x, index],
                lambda: indexing.build(self.dev, "gather", (out, x, index), x, dim, index),
            )
        self.launch("gather", plan, (out, x, index))

    def scatter_add(self, out: View, dim: int, index: View, src: View) -> None:
        dim = self._check_index_op("scatter_add", src, out, dim, index)
        if out.dtype is not src.dtype:
            raise self._error(InvalidArgumentError, "scatter_add", [out, index, src], "out and src dtypes differ")
        key = ("scatter_add", dim, *[(v.dtype, v.shape, v.strides) for v in (out, index, src)])
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(
                key,
                "scatter_add",
                [out, index, src],
                lambda: indexing.build(self.dev, "scatter_add", (out, index, src), out, dim, index),
            )
        self.launch("scatter_add", plan, (out, index, src))

    def random(self, out: View, distribution: str, seed: int, counter: int) -> None:
        if distribution not in RANDOM_DISTRIBUTIONS or not out.dtype.is_floating:
            raise self._error(
                InvalidArgumentError,
                "random",
                [out],
                f"distribution {distribution!r} into "
                f"{out.dtype.name}; expected one of {RANDOM_DISTRIBUTIONS} into a float tensor",
            )
        key = ("random", distribution, out.dtype, out.shape, out.strides)
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key, "random", [out], lambda: random.build(self.dev, out, distribution))
        self.launch("random", plan, (out,), (random.pcg_host(seed & 0xFFFFFFFF), counter & 0xFFFFFFFF))
