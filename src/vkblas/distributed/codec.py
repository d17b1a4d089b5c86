"""What travels between workers and the holder of the model: updates (gradients, pseudo-gradients) and weights,
as safetensors payloads in one of three codecs.

* ``fp32``: as is.
* ``fp16``: half the bytes; refused (ValueError naming the tensor) if a value is beyond fp16's range, rather than
  silently turned into Inf.
* ``int8``: a quarter of the bytes plus one float32 scale per ``block`` values: the tensor is flattened in C order
  and cut into blocks; each block stores ``q = round(x / s)`` with ``s = max|x| / 127``, so ``|x - q*s| <= s/2``
  (INTELLECT-1 sent its pseudo-gradients this way). The scales of tensor ``name`` are the entry
  ``name + SCALE_SUFFIX``.

:class:`ErrorFeedback` keeps, on the sender, what compression lost and adds it to the next update, so the error
does not accumulate over rounds (Seide et al. 2014; Karimireddy et al., "Error Feedback Fixes SignSGD", 2019).

Payloads come from untrusted peers: :func:`from_payload` and :func:`decode` check sizes, names, dtypes and shapes
and raise :class:`CodecError` (a ValueError) with a message, never anything else.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

Params = dict[str, np.ndarray]
CODECS = ("fp32", "fp16", "int8")
SCALE_SUFFIX = ".__scale__"
FORMAT = "vkblas-update/1"
DEFAULT_BLOCK = 256
MAX_BLOCK = 1 << 20
FP16_MAX = float(np.finfo(np.float16).max)
MAX_SCALE = float(np.finfo(np.float32).max) / 127  # larger scales overflow float32 when decoded


class CodecError(ValueError):
    """A payload that cannot be decoded (malformed, truncated, of the wrong layout)."""


def encode(update: Mapping[str, np.ndarray], codec: str = "fp32", block: int = DEFAULT_BLOCK) -> tuple[Params, dict]:
    """``update`` (name -> float array) as (safetensors tensors, metadata) in ``codec``."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}: choose from {', '.join(CODECS)}")
    if codec == "int8" and not 1 <= block <= MAX_BLOCK:
        raise ValueError(f"int8 block size must be in [1, {MAX_BLOCK}], got {block}")
    tensors: Params = {}
    for name, value in update.items():
        if name.endswith(SCALE_SUFFIX):
            raise ValueError(f"tensor name {name!r} ends with the reserved suffix {SCALE_SUFFIX!r}")
        x = np.ascontiguousarray(value, np.float32).reshape(np.shape(value))  # (it makes 0-d 1-d)
        if codec == "fp32":
            tensors[name] = x
        elif codec == "fp16":
            big = np.abs(x) > FP16_MAX
            if big.any():
                raise ValueError(
                    f"{name!r}: {int(big.sum())} value(s) beyond fp16's range (max |x| {float(np.abs(x).max()):.4g} "
                    f"> {FP16_MAX}); send this update as fp32 or int8"
                )
            tensors[name] = x.astype(np.float16)
        else:
            q, scales = _int8_blocks(x, block)
            tensors[name], tensors[name + SCALE_SUFFIX] = q, scales
    meta = {"format": FORMAT, "codec": codec}
    if codec == "int8":
        meta["block"] = str(block)
    return tensors, meta


def _int8_blocks(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    flat = x.reshape(-1)
    n = flat.size
    nb = -(-n // block)
    padded = np.zeros(nb * block, np.float32)
    padded[:n] = flat
    blocks = padded.reshape(nb, block)
    scales = (np.abs(blocks).max(axis=1) / 127.0).astype(np.float32) if nb else np.zeros(0, np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    q = np.clip(np.rint(blocks / safe[:, None]), -127, 127).astype(np.int8)
    return q.reshape(-1)[:n].reshape(x.shape), scales


def decode(tensors: Mapping[str, np.ndarray], meta: Mapping[str, str]) -> Params:
    """The float32 update that :func:`encode` encoded. Raises :class:`CodecError` for anything malformed."""
    return dict(LazyUpdate(tensors, meta))


class LazyUpdate(Mapping[str, np.ndarray]):
    """:func:`decode`'s result, each tensor decoded when it is read (and not kept): a check that reads the tensors
    one after another (``validation.check_update``) holds one decoded tensor at a time, not the whole update."""

    def __init__(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, str]) -> None:
        self.tensors, self.meta = tensors, meta
        codec = _codec_of(meta)
        if codec == "int8":
            RangeDecoder(tensors.get, meta)  # checks the block size
            self.names = [k for k in tensors if not k.endswith(SCALE_SUFFIX)]
            extra = set(tensors) - set(self.names) - {k + SCALE_SUFFIX for k in self.names}
            if extra:
                raise CodecError(f"int8 payload holds scales without their tensor: {sorted(extra)}")
        else:
            self.names = list(tensors)
        self._set = set(self.names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._set:
            raise KeyError(name)
        return decode_one(self.tensors.get, self.meta, name)

    def __contains__(self, name: object) -> bool:
        return name in self._set

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def _codec_of(meta: Mapping[str, str]) -> str:
    if meta.get("format") != FORMAT:
        raise CodecError(f"unknown payload format {meta.get('format')!r} (expected {FORMAT!r})")
    codec = meta.get("codec")
    if codec not in CODECS:
        raise CodecError(f"unknown codec {codec!r}: expected one of {', '.join(CODECS)}")
    return codec


def decode_one(get: Callable[[str], np.ndarray | None], meta: Mapping[str, str], name: str) -> np.ndarray:
    """One tensor of an encoded update, ``get(entry)`` reading the payload's entries (a dict's ``get``, or a
    lazily read file's)."""
    q = get(name)
    if q is None:
        raise CodecError(f"payload lacks tensor {name!r}")
    return RangeDecoder(get, meta).values(name, 0, q.size).reshape(q.shape)


class RangeDecoder:
    """Values ``start .. stop`` of one tensor of an encoded update (flattened in C order), decoded: what a reader
    that must not hold whole float32 tensors (the coordinator applying a round of a large model) decodes, a block
    at a time. The encoded tensor being read is kept (an int8 one is a quarter of its float32 size), unless
    ``file`` is the payload's :class:`PayloadFile`: then only the values asked for are read from it (and the
    tensor's scales, 1/64 of its float32 size with blocks of 256)."""

    def __init__(
        self, get: Callable[[str], np.ndarray | None], meta: Mapping[str, str], file: PayloadFile | None = None
    ) -> None:
        self.get, self.codec, self.file = get, _codec_of(meta), file
        self.block = 0
        if self.codec == "int8":
            try:
                self.block = int(meta.get("block", ""))
            except ValueError:
                raise CodecError(f"int8 payload with a bad block size {meta.get('block')!r}") from None
            if not 1 <= self.block <= MAX_BLOCK:
                raise CodecError(f"int8 block size {self.block} outside [1, {MAX_BLOCK}]")
        self._name: str | None = None
        self._size = 0
        self._q: np.ndarray | None = None
        self._scales: np.ndarray | None = None

    def _load(self, name: str) -> None:
        if self.file is not None:  # the header's dtype and shape; the values are read when asked for
            if name not in self.file:
                raise CodecError(f"payload lacks tensor {name!r}")
            dtype, shape = self.file.info(name)
            q = None
        else:
            q = self.get(name)
            if q is None:
                raise CodecError(f"payload lacks tensor {name!r}")
            dtype, shape = q.dtype, q.shape
        size = math.prod(shape)
        scales = None
        if self.codec in ("fp32", "fp16"):
            want = np.float32 if self.codec == "fp32" else np.float16
            if dtype != want:
                raise CodecError(f"{name!r}: dtype {dtype.name} in a {self.codec} payload")
        else:
            scales = self.get(name + SCALE_SUFFIX)
            if scales is None:
                raise CodecError(f"{name!r}: int8 tensor without its scales")
            nb = -(-size // self.block)
            if dtype != np.int8 or scales.dtype != np.float32 or scales.shape != (nb,):
                raise CodecError(
                    f"{name!r}: expected int8 values and {nb} float32 scales, got {dtype.name} {tuple(shape)} and "
                    f"{scales.dtype.name} {scales.shape}"
                )
            if not np.all((scales >= 0) & (scales <= MAX_SCALE)):  # NaN fails too
                raise CodecError(f"{name!r}: int8 scales must be finite, >= 0 and <= {MAX_SCALE:.4g}")
        self._name, self._size, self._scales = name, size, scales
        self._q = None if q is None else q.reshape(-1)

    def values(self, name: str, start: int, stop: int) -> np.ndarray:
        if name != self._name:
            self._load(name)
        if not 0 <= start <= stop <= self._size:
            raise CodecError(f"{name!r}: values [{start}, {stop}) outside its {self._size}")
        q = self.file.read(name, start, stop) if self._q is None else self._q[start:stop]  # type: ignore[union-attr]
        out = q.astype(np.float32)
        if self._scales is not None:  # q * s, each value with its block's scale (as decode: float32 products)
            _scale(out, self._scales, self.block, start)
        return out


def _scale(out: np.ndarray, scales: np.ndarray, block: int, start: int) -> None:
    """``out[i] *= scales[(start + i) // block]`` in place, without an index or scale array the size of ``out``:
    the partial block at each end on its own, the whole blocks between as rows of a [blocks, block] view."""
    stop = start + out.size
    head = min(stop, -(-start // block) * block)  # the first block boundary at or after start
    if head > start:
        out[: head - start] *= scales[start // block]
    whole = (stop - head) // block
    if whole:
        rows = out[head - start : head - start + whole * block].reshape(whole, block)
        rows *= scales[head // block : head // block + whole, None]
    tail = head + whole * block
    if tail < stop:
        out[tail - start :] *= scales[tail // block]


class ErrorFeedback:
    """Compression with error feedback: what one update lost to the codec is added to the next one."""

    def __init__(self, codec: str = "int8", block: int = DEFAULT_BLOCK) -> None:
        encode({}, codec, block)  # validates the settings
        self.codec, self.block = codec, block
        self.residual: Params = {}

    def compress(self, update: Mapping[str, np.ndarray]) -> tuple[Params, dict]:
        corrected = {k: np.asarray(v, np.float32) + self.residual.get(k, 0.0) for k, v in update.items()}
        tensors, meta = encode(corrected, self.codec, self.block)
        sent = decode(tensors, meta)
        self.residual = {k: corrected[k] - sent[k] for k in corrected}
        return tensors, meta


def to_payload(tensors: Mapping[str, np.ndarray], meta: Mapping[str, str] | None = None) -> bytes:
    """Tensors and string metadata as the bytes of a safetensors file."""
    from safetensors.numpy import save

    # np.ascontiguousarray makes a 0-d array 1-d; reshape keeps scalars (a version, a step count) scalars
    return save(
        {k: np.ascontiguousarray(v).reshape(np.shape(v)) for k, v in tensors.items()}, metadata=dict(meta or {})
    )


def from_payload(data: bytes, max_bytes: int | None = None, max_header: int = 1 << 20) -> tuple[Params, dict]:
    """Parse safetensors bytes from an untrusted peer into (tensors, metadata); :class:`CodecError` if they are
    oversized, truncated or malformed."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    if max_bytes is not None and len(data) > max_bytes:
        raise CodecError(f"payload of {len(data)} bytes is above the limit of {max_bytes}")
    if len(data) < 8:
        raise CodecError(f"payload of {len(data)} bytes is too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > max_header or 8 + header_len > len(data):
        raise CodecError(f"safetensors header of {header_len} bytes is truncated or above {max_header}")
    try:
        header = json.loads(data[8 : 8 + header_len])
        if not isinstance(header, dict):
            raise CodecError("safetensors header is not a JSON object")
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise CodecError("safetensors metadata must map strings to strings")
        tensors = load(bytes(data))
    except CodecError:
        raise
    except (SafetensorError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise CodecError(f"not a readable safetensors payload ({e})") from e
    return tensors, meta


#: safetensors' names of the dtypes a payload file may hold (little-endian, as the format stores them)
_FILE_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}  # fmt: skip


class PayloadFile(Mapping[str, np.ndarray]):
    """A safetensors file on disk (an upload spooled there, a stored result or shard), read a tensor or a range of
    values at a time and never whole: ``self[name]`` is one tensor (a copy in memory), :meth:`read` values
    ``start .. stop`` of one, flattened. Opening checks what :func:`from_payload` checks (size, header, metadata)
    and the entries' layout (known dtypes, shapes, offsets that tile the data exactly, as safetensors requires);
    :class:`CodecError` for anything malformed. Close it (or use ``with``) to release the file."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int | None = None, max_header: int = 1 << 20) -> None:
        self._fd = -1  # __del__ has nothing to close if the open below fails
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self._open(max_bytes, max_header)
        except BaseException:
            self.close()
            raise

    def _open(self, max_bytes: int | None, max_header: int) -> None:
        size = os.fstat(self._fd).st_size
        if max_bytes is not None and size > max_bytes:
            raise CodecError(f"payload of {size} bytes is above the limit of {max_bytes}")
        if size < 8:
            raise CodecError(f"payload of {size} bytes is too short for a safetensors header")
        (header_len,) = struct.unpack("<Q", os.pread(self._fd, 8, 0))
        if header_len > max_header or 8 + header_len > size:
            raise CodecError(f"safetensors header of {header_len} bytes is truncated or above {max_header}")
        try:
            header = json.loads(os.pread(self._fd, header_len, 8))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise CodecError(f"not a readable safetensors payload ({e})") from e
        if not isinstance(header, dict):
            raise CodecError("safetensors header is not a JSON object")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise CodecError("safetensors metadata must map strings to strings")
        self.meta: dict[str, str] = meta
        self._base = 8 + header_len
        self._entries: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {}
        spans = []
        for name, entry in header.items():
            if not isinstance(entry, dict) or entry.get("dtype") not in _FILE_DTYPES:
                raise CodecError(f"not a readable safetensors payload (entry {name[:80]!r}: {str(entry)[:80]})")
            shape, offsets = entry.get("shape"), entry.get("data_offsets")
            ok = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
            ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            dtype = np.dtype(_FILE_DTYPES[entry["dtype"]])
            if not ok or offsets[1] - offsets[0] != dtype.itemsize * math.prod(shape):
                raise CodecError(f"not a readable safetensors payload (entry {name[:80]!r}: bad shape or offsets)")
            self._entries[name] = (dtype, tuple(shape), offsets[0])
            spans.append((offsets[0], offsets[1]))
        at = 0
        for begin, end in sorted(spans):
            if begin != at:
                raise CodecError("not a readable safetensors payload (its tensors' offsets overlap or leave gaps)")
            at = end
        if self._base + at != size:
            raise CodecError(f"not a readable safetensors payload ({size - self._base} data bytes, its tensors {at})")

    def info(self, name: str) -> tuple[np.dtype, tuple[int, ...]]:
        """(dtype, shape) of entry ``name``, from the header (nothing read)."""
        dtype, shape, _ = self._entries[name]
        return dtype, shape

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        """Values ``start .. stop`` of entry ``name``, flattened in C order (only those bytes are read)."""
        dtype, shape, offset = self._entries[name]
        if not 0 <= start <= stop <= math.prod(shape):
            raise CodecError(f"{name!r}: values [{start}, {stop}) outside its {math.prod(shape)}")
        out = np.empty(stop - start, dtype)
        view, pos = memoryview(out).cast("B"), self._base + offset + start * dtype.itemsize
        while view.nbytes:
            n = os.preadv(self._fd, [view], pos)
            if n <= 0:
                raise CodecError(f"{name!r}: the payload file ends early")
            view, pos = view[n:], pos + n
        return out

    def __getitem__(self, name: str) -> np.ndarray:
        dtype, shape, _ = self._entries[name]
        return self.read(name, 0, math.prod(shape)).reshape(shape)

    def __contains__(self, name: object) -> bool:  # Mapping's default would read the tensor
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PayloadFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


_ST_DTYPES = {np.dtype(k): v for k, v in (
    (np.float32, "F32"), (np.float64, "F64"), (np.float16, "F16"), (np.int64, "I64"), (np.int32, "I32"),
    (np.int8, "I8"), (np.uint8, "U8"),
)}  # fmt: skip


def payload_chunks(
    entries: Sequence[tuple[str, np.dtype, tuple[int, ...]]],
    get: Callable[[str], np.ndarray],
    meta: Mapping[str, str] | None = None,
) -> Iterator[bytes | memoryview]:
    """The bytes of a safetensors file, written tensor by tensor (``get(name)`` reads one when its turn comes):
    a writer of a large state holds one tensor, never the whole file. :func:`from_payload` reads the result."""
    header: dict = {"__metadata__": dict(meta)} if meta else {}
    offset = 0
    for name, dtype, shape in entries:
        n = np.dtype(dtype).itemsize * math.prod(shape)
        header[name] = {
            "dtype": _ST_DTYPES[np.dtype(dtype)],
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # safetensors aligns the data to 8 bytes
    yield struct.pack("<Q", len(head)) + head
    for name, dtype, shape in entries:
        arr = np.asarray(get(name), dtype)
        if arr.shape != tuple(shape):
            raise ValueError(f"{name!r}: announced shape {tuple(shape)}, read {arr.shape}")
        yield memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
