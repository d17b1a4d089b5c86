"""Worker processes: started with ``multiprocessing``'s spawn context (a fresh interpreter, no inherited device
handles or threads), each with a pipe to the runner, its BLAS thread count set in its environment before it
starts, and its exit visible to the runner through its process sentinel at once.

BLAS threads: numpy's BLAS reads ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` … once, when
it loads, so they must be in the environment the child starts with. A ``cpu`` worker gets the run's
``threads_per_worker``; a Vulkan worker, which only assembles batches on the host, gets 1.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ...backend import parse
from .handle import WorkerHandle
from .protocol import Stop, WorkerSpec
from .transport import SharedArrays

BLAS_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
JOIN_S = 5.0


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``values`` inside the block (a spawned child copies it at start)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def spawn(
    target: Callable[[WorkerSpec, Any], None], spec: WorkerSpec, mailboxes: list[SharedArrays], threads: int
) -> WorkerHandle:
    """Start ``target(spec, pipe)`` (the worker's body) in a new process."""
    ctx = mp.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    blas = threads if parse(spec.device)[0] == "cpu" else 1
    proc = ctx.Process(target=target, args=(spec, child_conn), name=f"vkblas-{spec.name}", daemon=True)
    with environ({v: str(blas) for v in BLAS_THREAD_VARS}):
        proc.start()
    child_conn.close()
    return WorkerHandle(spec.name, spec.index, spec.device, proc, parent_conn, mailboxes, blas)


def stop(handles: list[WorkerHandle], timeout: float = JOIN_S) -> None:
    """Ask every live worker to stop, wait up to ``timeout`` for all, then kill the rest; always joins."""
    for h in handles:
        if h.process.is_alive():
            h.send(Stop())
    deadline = time.monotonic() + timeout
    for h in handles:
        h.process.join(max(0.0, deadline - time.monotonic()))
    for h in handles:
        if h.process.is_alive():
            h.process.kill()
            h.process.join(JOIN_S)
        with contextlib.suppress(OSError):
            h.conn.close()
        h.alive = False
