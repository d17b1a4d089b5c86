"""Device storage and the size-bucketed caching buffer pool.

Creating a wgpu buffer costs far more than a small kernel, so freed buffers go back to a pool keyed by bucket size
and are handed out again. Buckets: powers of two from 256 B up to 1 MiB, above that sixteenths of the next power
of two (at most 12.5 % waste, just above a power of two; eighths wasted up to 25 %, and kept the CNN step of
issue 15 at 293 MiB against 264.5 with sixteenths, on the same tensors). Reuse is safe without tracking: every
later use of a recycled buffer is recorded after the work that used it before, and the queue executes in order. The
one exception, host uploads via ``queue.write_buffer`` (they run *before* the next submit's dispatches), is handled
by ``Runtime.upload``.

A buffer returns to the pool from ``VulkanStorage.__del__`` (cheaper than ``weakref.finalize`` on the hot path).

Graphs pin the buffers their recorded dispatches bind (``pin``): a pinned buffer whose storage is freed is parked
instead of being handed out again (a replay would overwrite the new owner's data), and goes back to the free lists
when the last graph naming it is deleted (``unpin``).

**Tensors larger than one binding.** A storage up to ``max-storage-buffer-binding-size`` (the common case) is one
buffer bound whole. A larger one is a :class:`LargeStorage`: one buffer per ``segment`` of at most
``max-buffer-size`` bytes, never bound whole. Kernels see it through :class:`Window` s -- a byte range of one
segment, at most a binding long, bound at an aligned offset -- made by ``large.py``, which splits each op on such a
tensor into pieces that fit. ``LargeStorage`` has no ``buffer``, so the per-dispatch path of small tensors pays
nothing for this: an attempt to bind one whole raises :class:`NeedsSplitting` before anything is recorded.
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


class NeedsSplitting(Exception):  # noqa: N818 - a signal between the backend's primitives, not an error
    """A view of a :class:`LargeStorage` reached a kernel binding: the primitive must run through ``large.py``."""


class TooLargeForABinding(Exception):  # noqa: N818 - a signal: allocate a LargeStorage instead
    """A storage of more bytes than one binding may span was asked of :meth:`BufferPool.acquire`."""


class PoolBuffer:
    """A wgpu buffer with a stable identity (``uid``) used as the bind-group cache key; bound from byte 0."""

    __slots__ = ("buf", "size", "uid", "fresh")
    offset = 0  # where its binding starts (a Window binds part of a buffer)

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.size = size
        self.uid = next(_uids)
        #: never bound to a dispatch yet: an upload into it cannot race with pending work
        self.fresh = True

    @property
    def base(self) -> PoolBuffer:
        """The pooled buffer itself (a Window's is the buffer it is part of)."""
        return self


class Window:
    """``size`` bytes of a pooled buffer from byte ``offset`` (aligned), bound as one storage binding."""

    __slots__ = ("base", "offset", "size")

    def __init__(self, base: PoolBuffer, offset: int, size: int) -> None:
        self.base, self.offset, self.size = base, offset, size

    @property
    def buf(self) -> Any:
        return self.base.buf

    @property
    def fresh(self) -> bool:
        return self.base.fresh

    @fresh.setter
    def fresh(self, value: bool) -> None:
        self.base.fresh = value


def bucket_size(nbytes: int) -> int:
    if nbytes <= _MIN_BUCKET:
        return _MIN_BUCKET
    p = 1 << (nbytes - 1).bit_length()
    if p <= 1 << 20:
        return p
    step = p >> 4
    return -(-nbytes // step) * step


class BufferPool:
    def __init__(self, device: Any, max_binding: int, max_buffer: int, memory: int | None = None) -> None:
        self.device = device
        #: bytes one binding may span, and one buffer may hold (a segment of a LargeStorage)
        self.binding = min(max_binding, max_buffer)
        self.limit = max_buffer & ~255
        #: bytes no allocation may exceed (the host's memory on a CPU adapter): refused at once, not attempted
        self.memory = memory
        self._free: dict[int, list[PoolBuffer]] = {}
        self.cached_bytes = 0
        self.allocated_bytes = 0
        #: bytes of the buffers tensors hold now (bucket sizes), and the most since ``reset_peak``: what
        #: ``vkblas.accelerator.memory_allocated`` / ``max_memory_allocated`` report
        self.live_bytes = 0
        self.peak_bytes = 0
        #: called before cached buffers are destroyed (the runtime flushes and drops bind groups naming them)
        self.before_destroy: Any = None
        #: buffer -> number of graphs that bind it; ``_parked``: pinned buffers whose storage was freed
        self._pinned: dict[PoolBuffer, int] = {}
        self._parked: set[PoolBuffer] = set()
        #: every buffer allocated and not destroyed. A storage that dies in a garbage cycle returns its buffer from
        #: its __del__; were the wgpu buffer object reachable only through that cycle, the collector would finalize
        #: (release) it in the same pass, and the pool would hand out a dead buffer ("initializer for ctype
        #: 'struct WGPUBufferImpl *' must be a cdata pointer, not NoneType", or a wgpu-native panic binding it).
        #: Held here, the buffer objects are never part of a cycle's garbage.
        self._owned: set[PoolBuffer] = set()

    def check_fits(self, nbytes: int, what: Any) -> None:
        """Refuse at once a tensor larger than the device's memory (``DeviceOutOfMemoryError``)."""
        if self.memory is not None and nbytes > self.memory - self.allocated_bytes + self.cached_bytes:
            raise DeviceOutOfMemoryError(
                f"vulkan: {_what(what)} needs {nbytes} bytes; this device has {self.memory} bytes of memory "
                f"({self.allocated_bytes - self.cached_bytes} in use)"
            )

    def acquire(self, nbytes: int, what: Any, segment: bool = False) -> PoolBuffer:
        """A buffer of at least ``nbytes``: at most a binding (else ``TooLargeForABinding``), or for a ``segment``
        of a LargeStorage at most ``limit``; ``what`` is (dtype, numel) of the tensor, named in errors."""
        if nbytes > (self.limit if segment else self.binding):
            if not segment:
                raise TooLargeForABinding
            raise UnsupportedError(
                f"vulkan: {_what(what)} needs a buffer of {nbytes} bytes, above this adapter's max-buffer-size "
                f"of {self.limit} bytes"
            )
        size = _MIN_BUCKET if nbytes <= _MIN_BUCKET else min(bucket_size(nbytes), self.limit)
        free = self._free.get(size)
        self.live_bytes += size
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        if free:
            self.cached_bytes -= size
            return free.pop()
        try:
            self.check_fits(size, what)  # only a new buffer adds to what the device holds
            buf = self._create(size, what)
        except BaseException:
            self.live_bytes -= size  # nothing was handed out
            raise
        self.allocated_bytes += size
        pb = PoolBuffer(buf, size)
        self._owned.add(pb)
        return pb

    def _create(self, size: int, what: Any) -> Any:
        try:
            return self.device.create_buffer(size=size, usage=_USAGE)
        except Exception:  # noqa: BLE001 - retry once with the cache released
            what = _what(what)
            self.empty_cache()
            try:
                return self.device.create_buffer(size=size, usage=_USAGE)
            except Exception as e:  # noqa: BLE001
                raise DeviceOutOfMemoryError(
                    f"vulkan: allocating {size} bytes for {what} failed ({self.allocated_bytes} bytes in use): {e}"
                ) from e

    def reset_peak(self) -> None:
        """Start measuring ``peak_bytes`` again from what is held now."""
        self.peak_bytes = self.live_bytes

    def release(self, pb: PoolBuffer) -> None:
        self.live_bytes -= pb.size  # a buffer a graph still pins is no tensor's any more
        if self._pinned and pb in self._pinned:
            self._parked.add(pb)
            return
        self._to_free_list(pb)

    def _to_free_list(self, pb: PoolBuffer) -> None:
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
                self._to_free_list(pb)

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
                self._owned.discard(pb)
                pb.buf.destroy()
        self._free.clear()
        self.cached_bytes = 0


def _what(what: Any) -> str:
    return f"a {what[0].name} tensor of {what[1]} elements" if isinstance(what, tuple) else str(what)


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


class LargeStorage(VulkanStorage):
    """A storage larger than one binding: ``segments`` buffers of ``segment_bytes`` each (the last one shorter),
    reached only through :class:`Window` s (``window``). It has no ``buffer``: binding it whole is impossible."""

    __slots__ = ("segments", "segment_bytes", "_windows")

    def __init__(self, pool: BufferPool, dtype: DType, numel: int) -> None:
        self.dtype = dtype
        self.numel = numel
        self.version = 0
        self._pool = None
        self._windows: dict[tuple[int, int, int], Window] = {}
        nbytes = numel * dtype.itemsize
        pool.check_fits(nbytes, (dtype, numel))
        self.segment_bytes = pool.limit
        self.segments: list[PoolBuffer] = []
        try:
            for start in range(0, nbytes, self.segment_bytes):
                self.segments.append(pool.acquire(min(self.segment_bytes, nbytes - start), (dtype, numel), True))
        except BaseException:
            for pb in self.segments:  # an allocation that fails part way holds nothing
                pool.release(pb)
            raise
        self._pool = pool

    def window(self, first: int, last: int, align: int) -> tuple[Window, int] | None:
        """A binding that reaches elements ``first..last``, and the element of the storage it starts at; None when
        they do not lie in one segment or span more than one binding."""
        item = self.dtype.itemsize
        seg = first * item // self.segment_bytes
        if (last * item) // self.segment_bytes != seg:
            return None
        start = first * item - seg * self.segment_bytes
        offset = start - start % align
        end = min(-(-((last + 1) * item - seg * self.segment_bytes) // 16) * 16, self.segments[seg].size)
        if end - offset > self._pool.binding:
            return None
        key = (seg, offset, end - offset)
        w = self._windows.get(key)
        if w is None:  # kept: later ops over the same tensor reuse the window, and its cached bind groups
            w = self._windows[key] = Window(self.segments[seg], offset, end - offset)
        return w, (seg * self.segment_bytes + offset) // item

    def __del__(self) -> None:
        pool = self._pool
        if pool is not None:
            self._pool = None
            try:
                for pb in self.segments:
                    pool.release(pb)
            except Exception:  # noqa: BLE001, S110 - interpreter shutdown
                pass
