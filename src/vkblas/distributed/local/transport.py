"""Shared memory between the runner and its worker processes. No array is ever pickled: processes exchange block
names and small layouts over pipes, and both sides work on numpy views of ``multiprocessing.shared_memory``.

* :class:`SharedArrays`: named arrays in one block, created by the runner and attached by workers by name.
* :class:`FlatLayout`: a model's parameters as one flat float32 vector with a view per parameter.
* :class:`SeqlockBoard`: parameters published by one writer and read by many readers with no lock, and no torn
  read (a seqlock over two slots).
* :func:`pack` / :func:`unpack`: an update (a dict of arrays) written into a byte mailbox with a declared layout
  (name, shape, dtype, offset), read back with bounds and dtype checks, since the layout comes from another
  process.
"""

from __future__ import annotations

import functools
import os
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from ..validation import RejectedUpdateError, Signature

Spec = tuple[tuple[str, tuple[int, ...], str], ...]  # (name, shape, dtype) of each array of a block
Layout = tuple[tuple[str, tuple[int, ...], str, int], ...]  # (name, shape, dtype, byte offset) in a mailbox
ALIGN = 64
#: dtypes a mailbox layout may declare (anything else is rejected before a byte is read)
MAILBOX_DTYPES = ("float32", "float16", "float64", "int8", "int32")
PREFIX = "vkb"


def block_prefix(pid: int | None = None) -> str:
    """The name prefix of every block created by process ``pid`` (tests look for leftovers with it)."""
    return f"{PREFIX}{os.getpid() if pid is None else pid}-"


@dataclass(frozen=True)
class BlockHandle:
    """What a worker needs to attach a block: its name and the arrays in it (picklable, small)."""

    name: str
    spec: Spec


def _offsets(spec: Spec) -> tuple[list[int], int]:
    offsets, end = [], 0
    for _, shape, dtype in spec:
        end = -(-end // ALIGN) * ALIGN
        offsets.append(end)
        end += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return offsets, max(end, 1)


class SharedArrays:
    """Named numpy arrays in one shared-memory block. The runner :meth:`create`\\ s (and finally :meth:`unlink`\\ s)
    it; workers :meth:`attach` to its :attr:`handle`."""

    def __init__(self, shm: shared_memory.SharedMemory, spec: Spec, owner: bool) -> None:
        self._shm, self.spec, self.owner = shm, spec, owner
        offsets, _ = _offsets(spec)
        self.arrays = {
            name: np.ndarray(shape, dtype=np.dtype(dtype), buffer=shm.buf, offset=off)
            for (name, shape, dtype), off in zip(spec, offsets, strict=True)
        }

    @classmethod
    def create(cls, spec: Spec) -> SharedArrays:
        _, size = _offsets(spec)
        name = f"{block_prefix()}{secrets.token_hex(4)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        block = cls(shm, spec, owner=True)
        for a in block.arrays.values():
            a.fill(0)
        return block

    @classmethod
    def attach(cls, handle: BlockHandle) -> SharedArrays:
        kwargs = {"track": False} if sys.version_info >= (3, 13) else {}  # the creator alone owns the block
        return cls(shared_memory.SharedMemory(name=handle.name, **kwargs), handle.spec, owner=False)

    @property
    def handle(self) -> BlockHandle:
        return BlockHandle(self._shm.name, self.spec)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    @property
    def nbytes(self) -> int:
        return self._shm.size

    def close(self) -> None:
        """Drop this process's mapping (views still held elsewhere keep it until process exit)."""
        self.arrays = {}
        try:
            self._shm.close()
        except BufferError:
            pass

    def unlink(self) -> None:
        """Remove the block's name (the creator does this once, at the end; mappings stay valid)."""
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class FlatLayout:
    """Parameters ``names`` of ``shapes`` as one flat float32 vector, in that order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, params: Mapping[str, np.ndarray]) -> FlatLayout:
        return cls(tuple(params), tuple(tuple(np.shape(v)) for v in params.values()))

    # cached: the runner asks for these on every update (np.prod per shape showed up in its profile)
    @functools.cached_property
    def sizes(self) -> list[int]:
        return [int(np.prod(s, dtype=np.int64)) for s in self.shapes]

    @functools.cached_property
    def size(self) -> int:
        return sum(self.sizes)

    @functools.cached_property
    def signature(self) -> Signature:
        return {n: (s, "float32") for n, s in zip(self.names, self.shapes, strict=True)}

    @functools.cached_property
    def mailbox(self) -> Layout:
        """The layout :func:`pack` gives these parameters as float32: one contiguous vector."""
        out, off = [], 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out.append((name, shape, "float32", off))
            off += 4 * size
        return tuple(out)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """A view of ``flat`` per parameter."""
        out, off = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = flat[off : off + size].reshape(shape)
            off += size
        return out

    def flatten(self, params: Mapping[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.size, np.float32) if out is None else out
        for name, view in self.views(out).items():
            view[...] = params[name]
        return out


def _fence() -> None:
    # CPython has no memory-fence primitive; a lock round trip is one (acquire/release atomics on ARM64; on
    # x86-64, whose stores and loads stay in order anyway, it costs ~0.1 us)
    _FENCE_LOCK.acquire()
    _FENCE_LOCK.release()


_FENCE_LOCK = threading.Lock()


class SeqlockBoard:
    """The global parameters, written by one process (the runner) and read by workers that never wait for it nor
    for each other, and never see a half-written vector.

    Two slots, each with a sequence number. ``publish`` writes the slot readers are *not* directed to: its
    sequence number goes odd, the data and version are written, it goes even, then the slot becomes the latest.
    ``read`` copies the latest slot and retries if its sequence number was odd or changed meanwhile (which takes
    two publishes during one copy). A worker killed mid-read holds nothing, unlike a lock it would never release.
    """

    def __init__(self, block: SharedArrays) -> None:
        self.block = block
        self.header, self.versions, self.data = block["header"], block["versions"], block["data"]

    @staticmethod
    def spec(size: int) -> Spec:
        return (("header", (3,), "int64"), ("versions", (2,), "int64"), ("data", (2, size), "float32"))

    @classmethod
    def create(cls, size: int) -> SeqlockBoard:
        return cls(SharedArrays.create(cls.spec(size)))

    def publish(self, flat: np.ndarray, version: int) -> None:
        slot = 1 - int(self.header[0])
        seq = 1 + slot
        self.header[seq] += 1  # odd: being written
        _fence()
        self.data[slot] = flat
        self.versions[slot] = version
        _fence()
        self.header[seq] += 1  # even: complete
        _fence()
        self.header[0] = slot

    def read(self, out: np.ndarray) -> int:
        """Copy the latest complete parameters into ``out``; return their version."""
        tries = 0
        while True:
            slot = int(self.header[0])
            before = int(self.header[1 + slot])
            _fence()
            if before % 2 == 0:
                out[...] = self.data[slot]
                version = int(self.versions[slot])
                _fence()
                if int(self.header[1 + slot]) == before:
                    return version
            tries += 1
            if tries % 16 == 0:
                time.sleep(0.0001)  # the writer is mid-publish: let it run

    def version(self) -> int:
        """The latest published version (no data copied)."""
        return int(self.versions[int(self.header[0])])


def pack(arrays: Mapping[str, np.ndarray], buf: np.ndarray) -> Layout:
    """Write ``arrays`` one after another (each aligned to its item size) into the byte array ``buf``; return the
    layout that :func:`unpack` reads them back with. Float32 arrays of a :class:`FlatLayout` in its order give
    :attr:`FlatLayout.mailbox`."""
    layout, off = [], 0
    for name, value in arrays.items():
        a = np.ascontiguousarray(value)
        off = -(-off // a.itemsize) * a.itemsize
        if off + a.nbytes > buf.nbytes:
            raise ValueError(f"update of {off + a.nbytes} bytes does not fit its mailbox of {buf.nbytes} bytes")
        buf[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
        layout.append((name, tuple(a.shape), a.dtype.name, off))
        off += a.nbytes
    return tuple(layout)


def layout_nbytes(layout: Layout) -> int:
    """The bytes of data a layout describes."""
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for _, shape, dtype, _ in layout)


def unpack(buf: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Views of the arrays ``layout`` declares in ``buf``. The layout comes from another process: a dtype outside
    :data:`MAILBOX_DTYPES` or an array outside the buffer raises :class:`RejectedUpdateError`."""
    out = {}
    for name, shape, dtype, off in layout:
        if dtype not in MAILBOX_DTYPES:
            raise RejectedUpdateError("dtype", f"update: {name!r} declares dtype {dtype!r}")
        dt = np.dtype(dtype)
        if any(d < 0 for d in shape) or off < 0 or off % dt.itemsize:
            raise RejectedUpdateError("shape", f"update: {name!r} declares shape {shape} at offset {off}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if off + nbytes > buf.nbytes:
            raise RejectedUpdateError(
                "shape", f"update: {name!r} ({shape}, {dtype}) at offset {off} ends beyond its {buf.nbytes}-byte box"
            )
        out[name] = buf[off : off + nbytes].view(dt).reshape(shape)
    return out
