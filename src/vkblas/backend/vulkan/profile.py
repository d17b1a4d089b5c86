"""GPU time of every dispatch of a graph capture, from timestamp queries (``vkblas.graphs.Graph.profile``).

A replay issues all of a recording's dispatches in one compute pass, so the GPU's timestamps can only bracket the
whole. To see where the time goes, :func:`profile` issues the recording again with *one pass per dispatch*, each
bracketed by a begin and an end timestamp, and reads them back: ``(kernel label, grid, seconds)`` per dispatch in
recording order. The kernel label says what compiled it (``Kernel.label``: the plan builder's module, function and
op). Separate passes add the pass boundaries' small cost per dispatch (about a microsecond on NVIDIA), and the
dispatches no longer overlap, so the sum is an upper bound on a replay's GPU time; the ratios between kernels are
what a profile is for. Random dispatches are not re-seeded (the numbers do not matter for timing), and the work
really runs: a profiled training step updates the model like a replay does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import wgpu
from wgpu.backends.wgpu_native import _ffi

from ..base import BackendError
from .queue import _WINDOW, Recording, Runtime

#: dispatches per submit: two timestamps each, within WebGPU's query-set limit of 4096
_CHUNK = 1024
_lib = _ffi.lib


@dataclass(frozen=True, slots=True)
class DispatchTime:
    kernel: str
    grid: tuple[int, int, int]
    seconds: float


def profile(rt: Runtime, rec: Recording, labels: dict[Any, str]) -> list[DispatchTime]:
    """Per-dispatch GPU times of ``rec`` (``labels``: native pipeline handle -> kernel label)."""
    if "timestamp-query" not in rt.dev.features:
        raise BackendError("vulkan: profiling needs the adapter feature 'timestamp-query', which this one lacks")
    rt.synchronize()  # the ring is about to be overwritten from offset 0
    device, out = rt.device, []
    for start in range(0, len(rec.ops), _CHUNK):
        ops = rec.ops[start : start + _CHUNK]
        n = len(ops)
        rt.queue.write_buffer(rt.ring_gpu, 0, memoryview(rec.blob)[start * _WINDOW : (start + n) * _WINDOW])
        qs = device.create_query_set(type="timestamp", count=2 * n)
        enc = device.create_command_encoder()
        off = _ffi.ffi.new("uint32_t[1]")
        for i, (pipeline, bg, gx, gy, gz) in enumerate(ops):
            writes = {"query_set": qs, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1}
            cpass = enc.begin_compute_pass(timestamp_writes=writes)
            h = cpass._internal
            _lib.wgpuComputePassEncoderSetPipeline(h, pipeline)
            off[0] = i * _WINDOW
            _lib.wgpuComputePassEncoderSetBindGroup(h, 0, bg, 1, off)
            _lib.wgpuComputePassEncoderDispatchWorkgroups(h, gx, gy, gz)
            cpass.end()
        nbytes = 16 * n
        resolve = device.create_buffer(size=nbytes, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        read = device.create_buffer(size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        enc.resolve_query_set(qs, 0, 2 * n, resolve, 0)
        enc.copy_buffer_to_buffer(resolve, 0, read, 0, nbytes)
        rt.queue.submit([enc.finish()])
        read.map_sync(wgpu.MapMode.READ, 0, nbytes)
        stamps = struct.unpack(f"<{2 * n}Q", bytes(read.read_mapped(0, nbytes)))
        read.unmap()
        for i, (pipeline, _, gx, gy, gz) in enumerate(ops):
            # wgpu-native reports nanoseconds (it applies the adapter's timestamp period)
            dt = max(0, stamps[2 * i + 1] - stamps[2 * i]) * 1e-9
            out.append(DispatchTime(labels.get(pipeline, "?"), (gx, gy, gz), dt))
    return out
