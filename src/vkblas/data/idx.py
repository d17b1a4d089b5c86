"""Reading IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/).

An IDX file is a big-endian header — two zero bytes, a type code, the number of dimensions, then one uint32 per
dimension — followed by the values in C order. Files ending in ``.gz`` are decompressed on the fly.

>>> import io, numpy as np
>>> raw = bytes([0, 0, 0x08, 1]) + (3).to_bytes(4, "big") + bytes([7, 8, 9])
>>> parse_idx(raw).tolist()
[7, 8, 9]
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from pathlib import Path

import numpy as np


class DataError(RuntimeError):
    """A data file that is missing, corrupt or not what it claims to be. The message names the file."""


# IDX type code -> numpy dtype (big-endian, as stored)
_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode the bytes of an (uncompressed) IDX file into a native-endian numpy array."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(f"{name}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    dtype, ndim = _DTYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated IDX header ({len(raw)} bytes, expected at least {header})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        kind = "truncated" if len(raw) < expected else "has trailing bytes"
        raise DataError(f"{name}: IDX file {kind}: {len(raw)} bytes, expected {expected} for shape {shape}")
    array = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The contents of ``path``, decompressed when it ends in ``.gz``."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                return f.read()
        return p.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{p}: cannot read ({e})") from e


def read_idx(path: str | os.PathLike[str], sha256: str | None = None) -> np.ndarray:
    """Read an IDX file (``.gz`` or not); with ``sha256``, first check the file's digest."""
    if sha256 is not None:
        verify_sha256(path, sha256)
    return parse_idx(read_bytes(path), name=str(path))


def sha256_of(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected: str) -> None:
    """Raise :class:`DataError` naming the file, the expected and the actual digest when they differ."""
    actual = sha256_of(path)
    if actual != expected.lower():
        raise DataError(f"{path}: sha256 mismatch: expected {expected.lower()}, got {actual} (corrupt or wrong file)")
