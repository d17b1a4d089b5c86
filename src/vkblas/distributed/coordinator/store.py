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

from ..codec import PayloadFile

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
        with self.spool() as spool:
            for chunk in chunks:
                spool.write(chunk)
            return spool.keep(), spool.bytes

    def spool(self) -> Spool:
        """A new file to write into the store (an upload as it arrives): see :class:`Spool`."""
        return Spool(self)

    def stale_temporaries(self, older_than: float) -> int:
        """Delete spool files left by a process that died mid-write (``kill -9``), last written before
        ``older_than`` (a time); returns how many."""
        removed = 0
        for p in self.blobs.glob(".tmp-*"):
            try:
                if p.stat().st_mtime < older_than:
                    p.unlink()
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

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

    def open_payload(self, sha: str, max_bytes: int | None = None) -> PayloadFile:
        """A stored safetensors file, checked against its name, to read tensor by tensor (close it after)."""
        self.verify(sha)
        return PayloadFile(self.path(sha), max_bytes=max_bytes)

    def has(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def delete(self, sha: str) -> None:
        try:
            self.path(sha).unlink()
        except FileNotFoundError:
            pass

    def all(self) -> list[str]:
        return [p.name for p in self.blobs.glob("*/*") if _SHA.match(p.name)]


class Spool:
    r"""A file being written into the store's directory, hashed as it is written, never held in memory: an upload's
    body as it arrives, its parts joined. :meth:`keep` gives it its name (the sha256 of its bytes) by a rename;
    leaving the ``with`` block without keeping it deletes it. Readable (``path``) once :meth:`finish`\ ed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        fd, tmp = tempfile.mkstemp(dir=store.blobs, prefix=".tmp-")
        self.path = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.bytes = 0
        self._sha: str | None = None
        self._kept = False

    def write(self, chunk: bytes | memoryview) -> None:
        self._hash.update(chunk)
        self._file.write(chunk)
        self.bytes += len(chunk) if isinstance(chunk, bytes) else chunk.nbytes

    def finish(self) -> str:
        """Close the file; return the sha256 of what was written."""
        if self._sha is None:
            self._file.close()
            self._sha = self._hash.hexdigest()
        return self._sha

    def keep(self) -> str:
        """Move the file to its name in the store; return that sha256 (already there: the same bytes, replaced)."""
        sha = self.finish()
        target = self.store.path(sha)
        target.parent.mkdir(exist_ok=True)
        os.replace(self.path, target)
        self._kept = True
        return sha

    def discard(self) -> None:
        if not self._kept:
            self._file.close()
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()
