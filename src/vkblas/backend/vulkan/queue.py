"""Asynchronous batched execution: one open compute pass, many dispatches, submit at sync points.

Measured on lavapipe (LP_NUM_THREADS=0, 2000 dependent 16-element dispatches, direct cffi calls):

====================================================  ==================  =================
per-dispatch parameters passed as                     host encode / disp  end to end / disp
====================================================  ==================  =================
uniform ring buffer + dynamic offset (chosen)         1.3 us              2.8 us
push constants (``immediates``, SetImmediates call)   1.75 us             2.9 us
====================================================  ==================  =================

So parameters (element offsets, shapes, strides, scalar operands) go into a host ``bytearray`` mirror of one
uniform *ring* buffer; each dispatch binds its 256-byte window with a dynamic offset, and the used part of the ring
is uploaded with one ``queue.write_buffer`` per submit. Windows sit 256 bytes apart (the largest offset alignment
WebGPU allows), so the position is ``count * 256`` without a per-dispatch rounding, and a ring of
``FLUSH_DISPATCHES`` windows never overflows. That costs one C call less per dispatch than push
constants, needs no native-only feature and allows 256 bytes of params (``max-immediate-size`` is 128 on
lavapipe). Reusing the ring across submits is safe: a submit's ``write_buffer`` runs after all earlier submits.

The hot calls (set pipeline, set bind group, dispatch) go straight to wgpu-native through cffi (DESIGN.md: 1.2 us
vs 3.4 us through wgpu-py's methods). Bind groups are cached by (binding count, buffer uids): they never name the
kernel because all pipelines with k storage buffers share one layout; the key is the tuple of ``PoolBuffer``
objects itself (identity hashing, no ``uid`` lookups; the key keeps them alive, so identities are never reused
while cached).

``copy`` records a buffer-to-buffer copy in order with the dispatches (it ends the open compute pass; the next
dispatch opens a new pass on the same encoder).

Graphs (``vkblas.graphs``): while a :class:`Recording` is attached (``begin_capture``), ``record`` is replaced by
an instance attribute that also appends each dispatch's (pipeline, bind group, params window, grid) to it, so the
plain hot path pays nothing for the feature. ``replay`` copies a recording's params into the ring in one slice and
re-issues its dispatches with three C calls each. Host reads, uploads and copies raise during capture: they would
not be repeated by a replay.

Submission happens at sync points (``read``, ``synchronize``), before an upload that could race with pending work,
or when ``FLUSH_DISPATCHES`` dispatches or the params ring fill up. That count is small on purpose, so that the GPU
runs one batch while the host records the next. At 2048, a loop of eager training steps recorded ~60 steps before
the GPU saw any, and the sync point of every 64th device check then waited for all of them: host and GPU took turns
instead of overlapping (eager checks now sync every 1024th: ``device_checks.EAGER_SLOTS``). (Measured on an H200,
BENCHMARKS.md: 256 against 64 and 128; fewer submits matter to a replay loop's host.)

After a wait (a read or ``synchronize``) the device idles, so the next batch is small: ``FIRST_BATCH`` dispatches,
then each batch doubles up to ``FLUSH_DISPATCHES``. Those first batches are submitted on the calling thread. Handed
to the submit thread, they waited for the GIL while this thread recorded (Python hands the GIL over after its 5 ms
switch interval, or when the holder blocks), so a loop that reads its loss every step left the GPU idle until the
read (BENCHMARKS.md, "Reading the loss every step", 2026-12-04: 16 against 4, 8 and no small batches). Waiting maps
a read-back buffer through wgpu-native and polls the device from this thread (``_read_back``;
``on_submitted_work_done_sync`` is broken in wgpu-py 0.32, and its ``map_sync`` costs two thread hand-offs and a
submit more).

A full batch is handed to a *submit thread*, which uploads its params windows (a copy) and submits it.
wgpu-native validates and encodes a pass's commands in ``CommandEncoder.finish``: on an H200's host that was ~1.7 us
per dispatch, 40 of the MLP graph replay's 115 us a step, now overlapped with the recording of the next batch (cffi
releases the GIL in native calls). Every other queue operation waits for the thread first, so the queue's order is
the recording order: sync points submit inline after it, and an upload into a buffer that a handed-off batch may
read waits for it. A failed hand-off is raised at the next of those calls, naming the dispatches lost.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import wgpu
from wgpu.backends.wgpu_native import _ffi

from ..base import BackendError, Capture, GraphCaptureError
from .device import Device, Kernel
from .kernels.wgsl import PARAM_WORDS
from .memory import PoolBuffer, Window

FLUSH_DISPATCHES = 256
#: the first batch after a wait (the device then idles): handed off after this many dispatches, so that the GPU
#: starts while the host records the rest; each hand-off doubles the next batch, up to ``FLUSH_DISPATCHES``
FIRST_BATCH = 16
MAX_IN_FLIGHT = 2  # batches handed to the submit thread and not yet submitted (``Runtime._hand_off``)
_WINDOW = PARAM_WORDS * 4
_RING_BYTES = (FLUSH_DISPATCHES + 1) * _WINDOW
_BIND_GROUP_CACHE = 8192
#: a wait for the device polls it without blocking for this long, then blocks (``Runtime._read_back``)
SPIN_SECONDS = 0.02
_lib, _ffi_ = _ffi.lib, _ffi.ffi
_set_pipeline = _lib.wgpuComputePassEncoderSetPipeline
_set_bind_group = _lib.wgpuComputePassEncoderSetBindGroup
_dispatch = _lib.wgpuComputePassEncoderDispatchWorkgroups
_poll = _lib.wgpuDevicePoll


@_ffi_.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
def _mapped(status: int, _message: Any, cell: Any, _unused: Any) -> None:
    """A read-back's map finished: its status goes into the waiter's cell (0 while pending)."""
    _ffi_.cast("int *", cell)[0] = status


_FORBIDDEN = {
    "read": "reading a tensor on the host (.numpy(), .item(), .tolist(), printing it) is not allowed during graph "
    "capture: it would run once, not on every replay; read the graph's output tensors after replay()",
    "upload": "uploading host data into a new device tensor (vkblas.tensor(...), from_numpy, .to() from the cpu) is "
    "not allowed during graph capture: it would not be repeated on replay; create static input tensors before "
    "capture and copy each batch into them (static.copy_(batch)) outside the capture block",
    "copy": "device_copy (a buffer-to-buffer copy) is not allowed during graph capture: graphs record dispatches "
    "only; use an elementwise copy (dst.copy_(src)) inside the capture block",
    "synchronize": "synchronize() is not allowed during graph capture; synchronize after the capture block or "
    "after replay()",
}


def _lost(npending: int, error: Exception) -> BackendError:
    return BackendError(f"vulkan: submitting {npending} recorded dispatch(es) failed; their results are lost: {error}")


class Recording(Capture):
    """What a graph capture recorded: per dispatch (pipeline, bind group handle, x, y, z groups) in ``ops`` and its
    256-byte params window in ``blob``; ``bind_groups`` keeps the native bind groups alive (the runtime's cache may
    drop them), ``buffers`` names every buffer bound (the graph pins them in the pool). ``checks``/``flags`` are
    filled by the index checks (replayable), ``randoms`` by :meth:`note_random` (random-number dispatches to
    re-seed on each replay)."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, Any, int, int, int]] = []
        self.blob = bytearray()
        self.bind_groups: dict[tuple[PoolBuffer, ...], Any] = {}
        self.buffers: set[PoolBuffer] = set()
        self.checks: list[Any] = []
        self.flags: Any = None
        #: (op index, generator, numel): the dispatch's seed/counter words are re-taken from ``generator`` per replay
        self.randoms: list[tuple[int, Any, int]] = []
        #: op index -> params word of its (pcg(seed), counter) where that is not word 1 (fused attention)
        self.seed_words: dict[int, int] = {}

    @property
    def num_dispatches(self) -> int:
        return len(self.ops)

    def note_random(self, generator: Any, numel: int) -> None:
        self.randoms.append((len(self.ops) - 1, generator, numel))


class Runtime:
    def __init__(self, dev: Device) -> None:
        self.dev = dev
        #: host read-backs so far (tests use it to prove that a code path never waits for the device)
        self.reads = 0
        #: dispatches and copies in submitted batches; :attr:`dispatches` adds the open batch's (counted per
        #: batch, not per dispatch: the hot path stays as it is)
        self._submitted = 0
        self.device = dev.device
        self.queue = dev.device.queue
        if dev.limits["min-uniform-buffer-offset-alignment"] > _WINDOW:
            raise BackendError("vulkan: min-uniform-buffer-offset-alignment above 256 bytes is not supported")
        self.max_groups = dev.limits["max-compute-workgroups-per-dimension"]
        usage = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
        self.ring_gpu = self.device.create_buffer(size=_RING_BYTES, usage=usage)
        self.ring = bytearray(_RING_BYTES)
        #: (PoolBuffer, ...) -> native bind group handle; ``_bg_objects`` keeps the Python objects (and so the
        #: native bind groups) alive
        self._bind_groups: dict[tuple[PoolBuffer | Window, ...], Any] = {}
        self._bg_objects: dict[tuple[PoolBuffer, ...], Any] = {}
        self._offset = _ffi_.new("uint32_t[1]")
        self._staging: Any = None
        #: read-back buffers whose wait was interrupted, kept with the cell that their map may still write
        self._abandoned: list[tuple[Any, ...]] = []
        #: the thread that submits full batches, and its pending hand-offs (oldest first)
        self._submitter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vkblas-submit")
        self._in_flight: deque[Future[None]] = deque()
        #: the graph capture in progress, if any
        self.recording: Recording | None = None
        #: a dispatch whose recording waits for the next call (``hold``): a GEMM that the next elementwise op may
        #: fold into its epilogue (``epilogue.py``)
        self.held: Any = None
        #: dispatches after which the open batch is handed off (``FIRST_BATCH`` after a wait, doubling)
        self.limit = FIRST_BATCH
        self._reset()

    def _reset(self) -> None:
        self._encoder: Any = None
        self._pass: Any = None
        self._handle: Any = None
        self._last_pipeline: Any = None
        self.pos = 0
        self.count = 0

    @property
    def dispatches(self) -> int:
        """Dispatches (and buffer copies) recorded since the runtime started, replays included: what fusion
        reduces (benchmarks/speed.py prints it per training step). Counting records a held dispatch first."""
        self.emit_held()
        return self._submitted + self.count

    @property
    def pending(self) -> bool:
        """Recorded work not yet submitted: the open batch, or one handed to the submit thread."""
        return self._encoder is not None or bool(self._in_flight)

    def _open(self) -> Any:
        """Open a compute pass (and the batch's encoder if needed); returns the pass's native handle."""
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        self._pass = self._encoder.begin_compute_pass()
        self._handle = self._pass._internal
        self._last_pipeline = None
        return self._handle

    def _bind_group(self, bufs: tuple[PoolBuffer, ...]) -> Any:
        entries: list[dict[str, Any]] = [
            {"binding": 0, "resource": {"buffer": self.ring_gpu, "offset": 0, "size": _WINDOW}}
        ]
        for i, b in enumerate(bufs):  # a PoolBuffer from byte 0, a Window (large tensors) from its offset
            entries.append({"binding": i + 1, "resource": {"buffer": b.buf, "offset": b.offset, "size": b.size}})
            b.fresh = False
        layout = self.dev.bind_group_layout(len(bufs))
        bg = self.device.create_bind_group(layout=layout, entries=entries)
        self._bg_objects[bufs] = bg
        handle = self._bind_groups[bufs] = bg._internal
        return handle

    def hold(self, held: Any) -> None:
        """Keep ``held`` (an object with ``emit()``, which records its dispatch) back until the next call into the
        runtime, which emits it first: every entry point (record, copy, upload, read, synchronize, flush, capture
        and replay) does, so the held dispatch keeps its place in the order of the work. Meanwhile the caller may
        take it back with :meth:`take_held` and record something that replaces it."""
        if self.held is not None:
            self.emit_held()
        self.held = held

    def take_held(self) -> Any:
        held, self.held = self.held, None
        return held

    def emit_held(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.emit()

    def record(
        self, pipeline: Any, bufs: tuple[PoolBuffer, ...], packer: Any, args: Sequence[Any], groups: Sequence[int]
    ) -> None:
        """Record one dispatch of the native ``pipeline`` over ``bufs`` (bindings 1..k); ``args`` packed with
        ``packer`` (a ``struct.Struct``) become its params window. The hot path: keep it short."""
        if self.held is not None:
            self.emit_held()
        h = self._handle
        if h is None:
            h = self._open()
        bg = self._bind_groups.get(bufs)
        if bg is None:
            bg = self._bind_group(bufs)
        pos = self.pos
        packer.pack_into(self.ring, pos, *args)
        if pipeline is not self._last_pipeline:
            _set_pipeline(h, pipeline)
            self._last_pipeline = pipeline
        off = self._offset
        off[0] = pos
        _set_bind_group(h, 0, bg, 1, off)
        _dispatch(h, groups[0], groups[1], groups[2])
        self.pos = pos + _WINDOW
        self.count = n = self.count + 1
        if n >= self.limit:
            self._hand_off()

    def dispatch(
        self, kernel: Kernel, bufs: Sequence[PoolBuffer], fmt: str, args: Sequence[Any], groups: tuple[int, int, int]
    ) -> None:
        """Record one dispatch of ``kernel`` (convenience form of :meth:`record` for tools and tests)."""
        self.record(kernel.handle, tuple(bufs), struct.Struct(fmt), args, groups)

    # -- graphs
    def begin_capture(self, rec: Recording) -> None:
        """Record every dispatch into ``rec`` as well as executing it (see the module docstring)."""
        if self.recording is not None:
            raise GraphCaptureError("a graph capture is already in progress on this device (captures do not nest)")
        self.emit_held()  # eager work from before the capture is not part of it
        self.recording = rec
        self.record = self._record_captured  # type: ignore[method-assign]  # shadows the plain hot path

    def end_capture(self) -> Recording | None:
        if self.recording is not None:
            self.emit_held()  # the capture's last GEMM is part of it
        rec, self.recording = self.recording, None
        self.__dict__.pop("record", None)
        return rec

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Run eager, unrecorded work in the middle of a capture (autotuning, state set up once)."""
        rec = self.end_capture()
        try:
            yield
        finally:
            if rec is not None:
                self.begin_capture(rec)

    def _record_captured(
        self, pipeline: Any, bufs: tuple[PoolBuffer, ...], packer: Any, args: Sequence[Any], groups: Sequence[int]
    ) -> None:
        if self.held is not None:  # before this dispatch, in the recording as in the pass
            self.emit_held()
        rec = self.recording
        assert rec is not None
        window = packer.pack(*args)  # before anything is appended: a struct.error leaves rec unchanged
        if bufs not in self._bind_groups:
            self._bind_group(bufs)
        bg = rec.bind_groups[bufs] = self._bg_objects[bufs]
        rec.ops.append((pipeline, bg._internal, groups[0], groups[1], groups[2]))
        rec.blob += window.ljust(_WINDOW, b"\0")
        rec.buffers.update(b.base for b in bufs)
        Runtime.record(self, pipeline, bufs, packer, args, groups)

    def replay(self, rec: Recording) -> None:
        """Re-issue ``rec``'s dispatches into the open pass: one slice copy of the params per batch of dispatches,
        then set pipeline (when it changes), set bind group, dispatch."""
        self.emit_held()
        ops, blob, n, i = rec.ops, memoryview(rec.blob), len(rec.ops), 0
        ring, off = self.ring, self._offset
        while i < n:
            k = min(self.limit - self.count, n - i)
            h = self._handle
            if h is None:
                h = self._open()
            pos = self.pos
            ring[pos : pos + k * _WINDOW] = blob[i * _WINDOW : (i + k) * _WINDOW]
            last = self._last_pipeline
            for pipeline, bg, gx, gy, gz in ops[i : i + k]:
                if pipeline is not last:
                    _set_pipeline(h, pipeline)
                    last = pipeline
                off[0] = pos
                _set_bind_group(h, 0, bg, 1, off)
                _dispatch(h, gx, gy, gz)
                pos += _WINDOW
            self._last_pipeline = last
            self.pos = pos
            self.count += k
            i += k
            if self.count >= self.limit:
                self._hand_off()

    def _forbid(self, what: str) -> None:
        if self.recording is not None:
            raise GraphCaptureError(f"vulkan: {_FORBIDDEN[what]}")

    def copy(self, dst: PoolBuffer, dst_offset: int, src: PoolBuffer, src_offset: int, nbytes: int) -> None:
        """Record a buffer copy in order with the recorded dispatches (offsets and size multiples of 4)."""
        self._forbid("copy")
        self.emit_held()
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        if self._pass is not None:  # copies cannot be recorded inside a compute pass
            self._pass.end()
            self._pass = self._handle = None
        self._encoder.copy_buffer_to_buffer(src.buf, src_offset, dst.buf, dst_offset, nbytes)
        # an upload into either must now wait for this batch (see ``upload``)
        src.fresh = dst.fresh = False
        self.count = n = self.count + 1
        if n >= self.limit:
            self._hand_off()

    def _end_batch(self, extra: Any = None) -> tuple[Any, bytes, int]:
        """End the open pass, run ``extra(encoder)`` (copies) and take the batch: (encoder, its params windows, its
        dispatch count). The runtime is left with no open batch; the windows are a copy, so the ring can be refilled
        at once."""
        encoder, npending = self._encoder, self.count
        if encoder is None:
            encoder = self.device.create_command_encoder()
        try:
            if self._pass is not None:
                self._pass.end()
            if extra is not None:
                extra(encoder)
            return encoder, bytes(memoryview(self.ring)[: self.pos]), npending
        except Exception as e:  # noqa: BLE001 - wgpu validation errors come as several exception types
            raise _lost(npending, e) from e
        finally:
            self._submitted += npending
            self._reset()
            if len(self._bind_groups) > _BIND_GROUP_CACHE:  # safe: recorded commands hold their bind groups
                self._bind_groups.clear()
                self._bg_objects.clear()

    def _submit(self, encoder: Any, windows: bytes, npending: int) -> None:
        """Upload a batch's params windows into the ring and submit it (on the submit thread, or inline)."""
        try:
            if windows:
                self.queue.write_buffer(self.ring_gpu, 0, windows)
            self.queue.submit([encoder.finish()])
        except Exception as e:  # noqa: BLE001
            raise _lost(npending, e) from e

    def _hand_off(self) -> None:
        """Give the open batch to the submit thread (the dispatch-count threshold): wgpu-native validates and
        encodes a batch's commands in ``finish`` (about 1.7 us per dispatch on an H200's host, ~40 % of a graph
        replay's host time), which now overlaps the recording of the next batch. At most ``MAX_IN_FLIGHT``
        batches wait there: the host stays at most that far ahead of submission."""
        self.emit_held()
        if self.limit < FLUSH_DISPATCHES:  # a first, small batch: submitted here (``FIRST_BATCH``)
            self.limit = min(2 * self.limit, FLUSH_DISPATCHES)
            self._finish()
            return
        self._reap(keep=MAX_IN_FLIGHT - 1)
        if self._encoder is None:
            return
        batch = self._end_batch()
        try:
            future = self._submitter.submit(self._submit, *batch)
        except RuntimeError:  # no new work for threads (the interpreter is exiting): submit here, still in order
            self._reap()
            self._submit(*batch)
            return
        self._in_flight.append(future)

    def _reap(self, keep: int = 0) -> None:
        """Collect finished hand-offs, waiting until at most ``keep`` are pending; raise the first failure (its
        dispatches' results are lost, as the message says)."""
        pending, first = self._in_flight, None
        while pending and (len(pending) > keep or pending[0].done()):
            error = pending[0].exception()  # waits; an interrupt (Ctrl-C) leaves the hand-off pending
            pending.popleft()
            first = first or error
        if first is not None:
            raise first

    def _finish(self, extra: Any = None) -> None:
        """Submit everything recorded, in order: wait for the hand-offs, then end the open batch (``extra(encoder)``
        adds copies) and submit it on this thread. Leaves the runtime with no open pass, even when wgpu reports an
        error (the batch is then lost and we say so); only an interrupted wait (Ctrl-C) leaves the open batch for
        the next call, so that it is never submitted ahead of a hand-off."""
        self.emit_held()
        try:
            self._reap()
        finally:  # after a failed hand-off too: later work is not dropped unsaid (the error names what was lost)
            if not self._in_flight:
                self._submit(*self._end_batch(extra))

    def flush(self) -> None:
        """Submit recorded work without waiting for the device; on return everything recorded is submitted (in
        order with work that the caller then puts on the queue itself, as the autotuner does)."""
        self.emit_held()
        if self._encoder is not None:
            self._finish()
        else:
            self._reap()

    def _staging_buffer(self, nbytes: int) -> Any:
        if self._staging is None or self._staging.size < nbytes:
            size = max(1 << 12, 1 << (nbytes - 1).bit_length())
            usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            self._staging = self.device.create_buffer(size=size, usage=usage)
        return self._staging

    def read(self, pb: PoolBuffer, offset: int, nbytes: int) -> bytes:
        """Submit pending work plus a copy into a mapped staging buffer; wait; return the bytes. (Faster than
        ``queue.read_buffer`` on lavapipe.) ``offset`` and ``nbytes`` must be multiples of 4."""
        self._forbid("read")
        self.reads += 1
        staging = self._staging_buffer(max(nbytes, 4))
        if nbytes:
            self._finish(lambda enc: enc.copy_buffer_to_buffer(pb.buf, offset, staging, 0, nbytes))
        else:
            self.synchronize()
            return b""
        return self._read_back(staging, nbytes)

    def _read_back(self, staging: Any, nbytes: int) -> bytes:
        """Wait until ``staging`` (just copied into by the last submit) can be mapped; return its first ``nbytes``.

        wgpu-py's ``map_sync`` took ~370 us on an H200 for a read after one tiny dispatch (PyTorch's ``item()``:
        13 us): an empty submit first (a workaround for buffers never submitted to, which does not apply here) and
        the map's callback on wgpu-py's poll thread, handed back to this one. Mapped here through wgpu-native, with
        this thread polling the device (without blocking for ``SPIN_SECONDS``, as CUDA spins in a sync), it took
        128-132 us. The device is then idle, so the next batch starts small (``FIRST_BATCH``)."""
        buf, cell = staging._internal, _ffi_.new("int[1]")
        info = _ffi_.new("WGPUBufferMapCallbackInfo *")
        info.mode, info.callback, info.userdata1 = _lib.WGPUCallbackMode_AllowProcessEvents, _mapped, cell
        _lib.wgpuBufferMapAsync(buf, _lib.WGPUMapMode_Read, 0, nbytes, info[0])
        device, spin_until = self.device._internal, time.perf_counter() + SPIN_SECONDS
        try:
            while not cell[0]:
                _poll(device, time.perf_counter() > spin_until, _ffi_.NULL)
        except BaseException:  # interrupted: the pending map may still call back into ``cell`` and map the buffer
            self._abandoned.append((staging, cell, info))
            self._staging = None  # the next read makes a new one
            raise
        self.limit = FIRST_BATCH
        if cell[0] != _lib.WGPUMapAsyncStatus_Success:
            self._staging = None
            raise BackendError(f"vulkan: mapping the read-back buffer failed (WGPUMapAsyncStatus {cell[0]})")
        try:
            return bytes(_ffi_.buffer(_lib.wgpuBufferGetConstMappedRange(buf, 0, nbytes), nbytes))
        finally:
            _lib.wgpuBufferUnmap(buf)

    def synchronize(self) -> None:
        """Submit pending work and wait for everything submitted so far (mapping waits for the queue)."""
        self._forbid("synchronize")
        staging = self._staging_buffer(4)
        self._finish(lambda enc: enc.copy_buffer_to_buffer(self.ring_gpu, 0, staging, 0, 4))
        self._read_back(staging, 4)

    def upload(self, pb: PoolBuffer, data: bytes | memoryview) -> None:
        """Host -> buffer. ``write_buffer`` executes at the next submit *before* that submit's dispatches, so a
        recycled buffer still read by pending dispatches would be overwritten too early: submit those first."""
        self._forbid("upload")
        self.emit_held()  # it may read pb: it must be recorded before the write is ordered against the batch
        if not pb.fresh:  # also a batch on the submit thread may read it
            self.flush()
        self.queue.write_buffer(pb.buf, 0, data)

    def drop_bind_groups(self) -> None:
        """Forget cached bind groups (before pooled buffers are destroyed)."""
        self.flush()
        self._bind_groups.clear()
        self._bg_objects.clear()
