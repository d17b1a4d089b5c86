"""The store directory: files named by the sha256 of their bytes (model shards, optimizer state, data shards and
recorded update payloads), written atomically (a temporary file, then ``os.replace``), so a reader sees a whole
file or none, and a name can never point at other bytes: caches keyed by it are never stale (huggingface_hub's
rule), and the hash is the HTTP ETag."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

_SHA = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Store:
    """``root/blobs/ab/abcdef...``: one file per distinct content."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)

    def path(self, sha: str) -> Path:
        if not _SHA.match(sha):  # names come from URLs: nothing but 64 hex digits reaches the file system
            raise ValueError(f"not a sha256 name: {sha[:80]!r}")
        return self.blobs / sha[:2] / sha

    def put(self, data: bytes, sha: str | None = None) -> str:
        """Store ``data``; return its sha256 (already there: nothing is written). ``sha``: the caller has just
        computed it (an upload's checksum), so it is not computed again."""
        sha = sha or sha256_hex(data)
        target = self.path(sha)
        if target.is_file():
            return sha
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return sha

    def put_stream(self, chunks: Iterable[bytes | memoryview]) -> tuple[str, int]:
        """Store the concatenation of ``chunks`` without holding it: hashed and written as they come, then renamed
        to its name; returns (sha256, bytes)."""
        h, n = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    f.write(chunk)
                    n += len(chunk) if isinstance(chunk, bytes) else chunk.nbytes
            sha = h.hexdigest()
            target = self.path(sha)
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp, target)  # the same bytes again: the same name, replaced by identical content
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return sha, n

    def get(self, sha: str) -> bytes:
        """The bytes named ``sha``, checked against the name (a damaged file raises rather than being used)."""
        data = self.path(sha).read_bytes()
        if sha256_hex(data) != sha:
            raise OSError(f"store file {sha} is damaged (its content hashes differently)")
        return data

    def verify(self, sha: str) -> None:
        """Check a stored file against its name, reading it in blocks (OSError if damaged or missing)."""
        h = hashlib.sha256()
        with open(self.path(sha), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != sha:
            raise OSError(f"store file {sha} is damaged (its content hashes differently)")

    def open_payload(self, sha: str) -> StoredPayload:
        """A stored safetensors file, checked against its name, to read tensor by tensor."""
        self.verify(sha)
        return StoredPayload(self.path(sha))

    def has(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def delete(self, sha: str) -> None:
        try:
            self.path(sha).unlink()
        except FileNotFoundError:
            pass

    def all(self) -> list[str]:
        return [p.name for p in self.blobs.glob("*/*") if _SHA.match(p.name)]


class StoredPayload:
    """A safetensors file read one tensor at a time (``get``), never whole: what the applier reads a round's
    stored uploads with, so a round of large updates holds one tensor of each at a time."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self._file = safe_open(str(path), framework="numpy")
        self.meta: dict[str, str] = self._file.metadata() or {}
        self._keys = set(self._file.keys())

    def get(self, name: str) -> np.ndarray | None:
        return self._file.get_tensor(name) if name in self._keys else None
