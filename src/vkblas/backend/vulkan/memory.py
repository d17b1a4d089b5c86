"""Device storage and the size-bucketed caching buffer pool.

Creating a wgpu buffer costs far more than a small kernel, so freed buffers go back to a pool keyed by bucket size
and are handed out again. Buckets: powers of two from 256 B up to 1 MiB, above that eighths of a power of two
(at most 12.5 % waste). Reuse is safe without tracking: every later use of a recycled buffer is recorded after the
work that used it before, and the queue executes in order. The one exception, host uploads via
``queue.write_buffer`` (they run *before* the next submit's dispatches), is handled by ``Runtime.upload``.

A buffer returns to the pool from ``VulkanStorage.__del__`` (cheaper than ``weakref.finalize`` on the hot path).

Graphs pin the buffers their recorded dispatches bind (``pin``): a pinned buffer whose storage is freed is parked
instead of being handed out again (a replay would overwrite the new owner's data), and goes back to the free lists
when the last graph naming it is deleted (``unpin``).
"""

from __future__ import annotations

import itertools
from typing import Any

import wgpu

from ...dtypes import DType
from ..base import DeviceOutOfMemoryError, Storage, UnsupportedError

_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_MIN_BUCKET = 256
_uids = itertools.count(1)


class PoolBuffer:
    """A wgpu buffer with a stable identity (``uid``) used as the bind-group cache key."""

    __slots__ = ("buf", "size", "uid", "fresh")

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.uid = next(_uids)
        #: never bound to a dispatch yet: an upload into it cannot race with pending work
        self.fresh = True


def bucket_size(nbytes: int) -> int:
    if nbytes <= _MIN_BUCKET:
        return _MIN_BUCKET
    p = 1 << (nbytes - 1).bit_length()
    if p <= 1 << 20:
        return p
    step = p >> 3
    return -(-nbytes // step) * step


class BufferPool:
    def __init__(self, device: Any, max_binding: int, max_buffer: int) -> None:
        self.device = device
        self.limit = min(max_binding, max_buffer)
        self._free: dict[int, list[PoolBuffer]] = {}
        self.cached_bytes = 0
        self.allocated_bytes = 0
        #: called before cached buffers are destroyed (the runtime flushes and drops bind groups naming them)
        self.before_destroy: Any = None
        #: buffer -> number of graphs that bind it; ``_parked``: pinned buffers whose storage was freed
        self._pinned: dict[PoolBuffer, int] = {}
        self._parked: set[PoolBuffer] = set()

    def acquire(self, nbytes: int, what: Any) -> PoolBuffer:
        """A buffer of at least ``nbytes``; ``what`` is (dtype, numel) of the tensor, named in errors."""
        if nbytes > self.limit:
            what = f"a {what[0].name} tensor of {what[1]} elements" if isinstance(what, tuple) else what
            raise UnsupportedError(
                f"vulkan: {what} needs {nbytes} bytes, above this adapter's limit of {self.limit} bytes per buffer "
                "(max-storage-buffer-binding-size / max-buffer-size); chunking large tensors is not implemented"
            )
        size = _MIN_BUCKET if nbytes <= _MIN_BUCKET else min(bucket_size(nbytes), self.limit & ~3)
        free = self._free.get(size)
        if free:
            self.cached_bytes -= size
            return free.pop()
        try:
            buf = self.device.create_buffer(size=size, usage=_USAGE)
        except Exception:  # noqa: BLE001 - retry once with the cache released
            what = f"a {what[0].name} tensor of {what[1]} elements" if isinstance(what, tuple) else what
            self.empty_cache()
            try:
                buf = self.device.create_buffer(size=size, usage=_USAGE)
            except Exception as e:  # noqa: BLE001
                raise DeviceOutOfMemoryError(
                    f"vulkan: allocating {size} bytes for {what} failed ({self.allocated_bytes} bytes in use): {e}"
                ) from e
        self.allocated_bytes += size
        return PoolBuffer(buf, size)

    def release(self, pb: PoolBuffer) -> None:
        if self._pinned and pb in self._pinned:
            self._parked.add(pb)
            return
        size = pb.size
        free = self._free.get(size)
        if free is None:
            free = self._free[size] = []
        free.append(pb)
        self.cached_bytes += size

    def pin(self, buffers: Any) -> None:
        """Keep ``buffers`` from being handed out again until ``unpin`` (a graph's buffers). Buffers already freed
        (intermediates of the captured work) leave the free lists now."""
        for pb in buffers:
            n = self._pinned.get(pb, 0)
            self._pinned[pb] = n + 1
            if n == 0:
                free = self._free.get(pb.size)
                if free is not None and any(x is pb for x in free):
                    free.remove(pb)
                    self.cached_bytes -= pb.size
                    self._parked.add(pb)

    def unpin(self, buffers: Any) -> None:
        """Undo one ``pin``; buffers no graph names any more and whose storage is gone return to the free lists."""
        for pb in buffers:
            n = self._pinned.pop(pb, 0) - 1
            if n > 0:
                self._pinned[pb] = n
            elif pb in self._parked:
                self._parked.discard(pb)
                self.release(pb)

    @property
    def pinned_bytes(self) -> int:
        """Bytes held by graphs although no tensor uses them any more."""
        return sum(pb.size for pb in self._parked)

    def empty_cache(self) -> None:
        """Destroy every cached (free) buffer."""
        if not self.cached_bytes:
            return
        if self.before_destroy is not None:
            self.before_destroy()
        for free in self._free.values():
            for pb in free:
                self.allocated_bytes -= pb.size
                pb.buf.destroy()
        self._free.clear()
        self.cached_bytes = 0


class VulkanStorage(Storage):
    """``numel`` elements of ``dtype`` in a pooled device buffer (bool as u32 words, float16 as f16)."""

    __slots__ = ("buffer", "_pool")

    def __init__(self, pool: BufferPool, dtype: DType, numel: int) -> None:
        # Storage.__init__ inlined (allocation is on every op's path)
        self.dtype = dtype
        self.numel = numel
        self.version = 0
        self._pool = None
        # storage bindings need a non-zero, 4-byte multiple size
        self.buffer = pool.acquire((numel * dtype.itemsize + 3) & ~3 or 4, (dtype, numel))
        self._pool = pool

    def __del__(self) -> None:
        pool = self._pool
        if pool is not None:
            self._pool = None
            try:
                pool.release(self.buffer)
            except Exception:  # noqa: BLE001, S110 - interpreter shutdown
                pass
