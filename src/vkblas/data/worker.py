"""Loader worker processes (``DataLoader(num_workers=N)``), with ``torch.utils.data``'s semantics.

Each worker is a real process, started with ``spawn`` by default (safe with the threads a GPU runtime keeps; another
``multiprocessing_context`` may be given): it receives the dataset and ``collate_fn`` once, pickled with
:mod:`vkblas.pickling`, then fetches the batches of the tasks it is sent and sends them back pickled the same way.
Tensors made in a worker live on the ``cpu`` device (PyTorch's workers make CPU tensors); the main process makes
them again on the loader's device. Every worker seeds Python's ``random``, numpy's global generator and vkblas's
with ``base_seed + worker_id`` and then calls ``worker_init_fn(worker_id)``; :func:`get_worker_info` tells code
running in a worker which one it is. As with ``spawn`` in PyTorch, the main script is imported again in every
worker, so code that must run once belongs under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import random
import sys
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import pickling
from ..device import DeviceLike
from ..random import manual_seed

_POLL_S = 0.2  # how often a waiting worker checks that its parent lives, and the parent that its workers do


class Exhausted:
    """The answer to a task when an iterable dataset's stream has ended in that worker."""


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    num_workers: int
    seed: int
    dataset: Any


_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a loader worker process: its id, the number of workers, its seed and its copy of the dataset; None in
    the main process."""
    return _info


class Failure:
    """An exception raised in a worker, re-raised in the main process with the worker's traceback in the message
    (as PyTorch's ``ExceptionWrapper`` does)."""

    def __init__(self, worker_id: int, what: str = "") -> None:
        err = sys.exc_info()[0] or RuntimeError
        self.name = err.__name__
        self.message = f"in DataLoader worker process {worker_id}{what}.\nOriginal {traceback.format_exc()}"
        try:
            pickle.dumps(err)
            self.exc_type: type[BaseException] = err
        except Exception:  # a class that cannot travel: RuntimeError carries the message
            self.exc_type = RuntimeError

    def reraise(self) -> None:
        msg = f"Caught {self.name} {self.message}"
        try:
            error = self.exc_type(msg)
        except Exception:
            error = RuntimeError(msg)
        raise error


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    manual_seed(seed & 0xFFFFFFFF)


def _loop(payload: bytes, tasks: Any, results: Any, worker_id: int, num_workers: int, seed: int) -> None:
    global _info
    os.environ["VKBLAS_DEVICE"] = "cpu"  # tensors made here stay on the host, like PyTorch's CPU tensors in workers
    results.cancel_join_thread()  # exiting must not wait for a parent that stopped reading
    _seed(seed)
    try:
        fetcher, init_fn = pickling.loads(payload, device="cpu")
        _info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
        if init_fn is not None:
            init_fn(worker_id)
    except Exception:
        results.put(pickling.dumps((None, None, Failure(worker_id, " while starting"))))
        return
    epoch, parent = None, multiprocessing.parent_process()
    while True:
        try:
            msg = tasks.get(timeout=_POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if msg is None:
            return
        msg_epoch, task_id, task = msg
        if msg_epoch != epoch:
            epoch = msg_epoch
            fetcher.reset()
        try:
            out: Any = fetcher(task)
        except StopIteration:
            out = Exhausted()
        except Exception:
            out = Failure(worker_id)
        try:
            data = pickling.dumps((msg_epoch, task_id, out))
        except Exception:
            data = pickling.dumps((msg_epoch, task_id, Failure(worker_id, " while sending a batch")))
        results.put(data)


def _shutdown(procs: list[Any], tasks: list[Any], results: Any) -> None:
    for q in tasks:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
            p.join(timeout=1)
    for q in [*tasks, results]:
        q.cancel_join_thread()
        q.close()


class WorkerPool:
    """``num_workers`` processes, each with its own task queue, sending results to one shared queue."""

    def __init__(
        self,
        fetcher: Any,
        init_fn: Callable[[int], None] | None,
        num_workers: int,
        base_seed: int,
        context: Any = None,
    ) -> None:
        ctx = multiprocessing.get_context(context or "spawn") if not hasattr(context, "Process") else context
        try:
            payload = pickling.dumps((fetcher, init_fn))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise RuntimeError(
                f"DataLoader(num_workers={num_workers}): the dataset ({type(fetcher.dataset).__name__}) or "
                f"collate_fn/worker_init_fn cannot be sent to a worker process: {e}. Define them at module level "
                "(not inside a function), or use num_workers=0"
            ) from e
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(num_workers)]
        self.procs = [
            ctx.Process(
                target=_loop,
                args=(payload, q, self.results, i, num_workers, base_seed + i),
                daemon=True,
                name=f"vkblas-dataloader-{i}",
            )
            for i, q in enumerate(self.tasks)
        ]
        for p in self.procs:
            p.start()
        self._finalizer = weakref.finalize(self, _shutdown, self.procs, self.tasks, self.results)

    def send(self, worker: int, msg: tuple[int, int, Any]) -> None:
        self.tasks[worker].put(msg)

    def receive(self, device: DeviceLike, timeout: float = 0) -> tuple[int | None, int | None, Any]:
        """The next (epoch, task id, result) from any worker, tensors made on ``device``. Raises when a worker
        died, and after ``timeout`` seconds without a result (0: wait as long as the workers live)."""
        deadline = time.monotonic() + timeout if timeout > 0 else None
        while True:
            try:
                data = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    self.close()
                    codes = ", ".join(f"pid {p.pid}: exit code {p.exitcode}" for p in dead)
                    raise RuntimeError(f"DataLoader worker(s) exited unexpectedly ({codes})") from None
                if deadline is not None and time.monotonic() > deadline:
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
                continue
            return pickling.loads(data, device=device)

    def close(self) -> None:
        self._finalizer()
