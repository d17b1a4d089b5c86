"""``DataLoader``: batches of a dataset as vkblas tensors on a device, with ``torch.utils.data.DataLoader``'s
arguments and semantics.

How a batch is made:

- **vkblas's own datasets** (``TensorDataset``, ``MNIST`` …, and ``Subset`` / ``ConcatDataset`` of them) build a
  whole batch with one numpy gather (``get_batch``); with ``num_workers=0`` a background thread prepares the next
  ``prefetch`` batches, and uploads them too where the device allows uploads from another thread.
- **Any other map-style dataset** (an object with ``__getitem__`` and ``__len__``) is read item by item and
  collated with ``collate_fn`` (default: :func:`~vkblas.data.default_collate`), on the calling thread.
- **Iterable datasets** (:class:`~vkblas.data.IterableDataset`) are read as a stream, ``batch_size`` items a batch.
- ``num_workers > 0`` does the reading in worker processes (:mod:`vkblas.data.worker`).

Differences from PyTorch: batches made by the default collation are tensors on ``device`` (default: vkblas's
default device; PyTorch gives CPU tensors), floats as float32 and integers as int32. ``pin_memory`` is accepted and
does nothing (uploads are one buffer write each; there is no page-locked host memory to ask for). vkblas extensions:
``seed=`` (a shuffle seeded once: the same seed gives the same epochs), ``device=``, ``prefetch=`` and ``convert=``
(applied to each uploaded array instead of making a vkblas tensor).

>>> import numpy as np
>>> from vkblas.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(np.arange(5.0), np.arange(5)), batch_size=2, device="cpu", prefetch=0)
>>> [y.tolist() for _, y in loader]
[[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..device import DeviceLike, resolve
from ..device import device as Device
from ..random import Generator, default_generator
from .collate import to_tensors
from .dataset import IterableDataset, vectorised
from .fetch import Fetcher
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from .worker import Exhausted, Failure, WorkerPool


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def prefetch(items: Iterator[Any], depth: int) -> Iterator[Any]:
    """Yield from ``items``, computed by a background thread that runs up to ``depth`` items ahead.

    An exception in the thread is re-raised here; leaving the loop early stops the thread.
    """
    ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # handed to the consumer, re-raised there
            put(_Failure(e))

    worker = threading.Thread(target=work, name="vkblas-dataloader", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        worker.join()


def _check_args(
    dataset: Any,
    batch_size: int | None,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    num_workers: int,
    drop_last: bool,
    timeout: float,
    prefetch_factor: int | None,
    persistent_workers: bool,
) -> None:
    """PyTorch's argument rules, with its messages."""
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to enable "
            "multiprocessing, otherwise set prefetch_factor to None."
        )
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if isinstance(dataset, IterableDataset):
        for name, value in (("shuffle", shuffle), ("sampler", sampler), ("batch_sampler", batch_sampler)):
            if value not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified {name} option, but got {name}={value}"
                )
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
        raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")
    if batch_sampler is None and batch_size is None and drop_last:
        raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")


class DataLoader:
    """Iterate over ``dataset`` in batches (see the module documentation for how they are made)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[int] | Iterable[int] | None = None,
        batch_sampler: Sampler[list[int]] | Iterable[list[int]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        device: DeviceLike = None,
        prefetch: int = 2,
        convert: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        _check_args(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            drop_last,
            timeout,
            prefetch_factor,
            persistent_workers,
        )
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if seed is not None and (sampler is not None or batch_sampler is not None or generator is not None):
            raise ValueError(
                "seed= seeds the loader's own shuffle; it cannot be combined with sampler=, "
                "batch_sampler= or generator="
            )
        self.dataset = dataset
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None else prefetch_factor
        self.persistent_workers, self.in_order = persistent_workers, in_order
        self.pin_memory, self.pin_memory_device = pin_memory, pin_memory_device  # accepted; see the module notes
        self.multiprocessing_context, self.generator = multiprocessing_context, generator
        self.device = Device(device) if device is not None else None
        self.prefetch, self.convert = prefetch, convert
        self._iterable = isinstance(dataset, IterableDataset)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        self.batch_size, self.drop_last = batch_size, drop_last
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator, seed=seed) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore[arg-type]
        self.batch_sampler = batch_sampler
        auto_batch = batch_sampler is not None or (self._iterable and batch_size is not None)
        self.collate_fn = collate_fn
        self._fetcher = Fetcher(dataset, collate_fn, auto_batch, batch_size, drop_last)
        self._pool: WorkerPool | None = None
        self._epoch = itertools.count()

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)  # type: ignore[arg-type]

    def _tasks(self) -> Iterator[Any]:
        if self._iterable:
            return itertools.repeat(None)
        return iter(self.batch_sampler if self.batch_sampler is not None else self.sampler)  # type: ignore[arg-type]

    def _finish(self, out: Any) -> Any:
        """The batch as the user gets it: host data of the default collation uploaded."""
        return to_tensors(out, self.device, self.convert) if self._fetcher.host_output else out

    def _upload_in_thread(self) -> bool:
        if self.convert is not None:
            return True
        backend = resolve(self.device)
        return bool(getattr(backend, "thread_safe_upload", backend.name == "cpu"))

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers > 0:
            return self._from_workers()
        self._fetcher.reset()
        host = map(self._fetcher, self._tasks())
        if self.prefetch == 0 or not (self._fetcher.host_output and vectorised(self.dataset)):
            return map(self._finish, host)  # other datasets' items are read on this thread, as in PyTorch
        if self._upload_in_thread():
            return prefetch(map(self._finish, host), self.prefetch)
        return map(self._finish, prefetch(host, self.prefetch))

    # ------------------------------------------------------------------ worker processes
    def _base_seed(self) -> int:
        seed, counter = (self.generator or default_generator).take(1)
        return ((seed << 32) | counter) % 2**62  # worker i gets base + i

    def _workers(self) -> WorkerPool:
        if self._pool is not None:
            return self._pool
        pool = WorkerPool(
            self._fetcher, self.worker_init_fn, self.num_workers, self._base_seed(), self.multiprocessing_context
        )
        if self.persistent_workers:
            self._pool = pool
        return pool

    def _from_workers(self) -> Iterator[Any]:
        pool, epoch = self._workers(), next(self._epoch)
        try:
            yield from _ordered_results(self, pool, epoch)
        finally:
            if not self.persistent_workers:
                pool.close()


def _ordered_results(loader: DataLoader, pool: WorkerPool, epoch: int) -> Iterator[Any]:
    """Send tasks round-robin to the workers that still have data, up to ``prefetch_factor`` per worker ahead,
    and yield the batches in task order (in arrival order with ``in_order=False``)."""
    n = loader.num_workers
    tasks, active, cycle = loader._tasks(), [True] * n, itertools.cycle(range(n))
    owner: dict[int, int] = {}
    ready: dict[int, Any] = {}
    sent = done = 0

    def send() -> bool:
        nonlocal sent
        worker = next((w for w in itertools.islice(cycle, n) if active[w]), None)
        task = next(tasks, _END) if worker is not None else _END
        if task is _END:
            return False
        pool.send(worker, (epoch, sent, task))  # type: ignore[arg-type]
        owner[sent] = worker  # type: ignore[assignment]
        sent += 1
        return True

    for _ in range(max(1, (loader.prefetch_factor or 1) * n)):
        if not send():
            break
    while done < sent:
        key = done if loader.in_order else next(iter(ready), None)
        if key is None or key not in ready:
            got_epoch, task_id, out = pool.receive(loader.device, loader.timeout)
            if isinstance(out, Failure):
                out.reraise()
            if got_epoch == epoch:  # results of an abandoned earlier epoch are dropped
                ready[task_id] = out  # type: ignore[index]
            continue
        out = ready.pop(key)
        done += 1
        if isinstance(out, Exhausted):
            active[owner[key]] = False
            send()
            continue
        send()
        yield loader._finish(out)
