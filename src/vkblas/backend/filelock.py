"""An advisory lock on a file, for caches that several processes share (the GEMM tuner's table, a worker's
downloaded shards). The lowest layer has it so that everything above can use it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path``, created if missing (POSIX ``flock``; where there is none, e.g.
    Windows, the lock is the process's own: processes sharing the file may then each do the guarded work, and
    callers must stay correct if they do)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
