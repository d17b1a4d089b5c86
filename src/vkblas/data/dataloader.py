"""``DataLoader``: batches of a dataset as vkblas tensors on a device, prepared one or two ahead in a thread.

The order of a shuffled epoch comes from numpy's ``Generator`` seeded once per loader, so the same seed gives the
same batches in every run — and :class:`BatchOrder` alone gives that order to other code (the PyTorch side of
``benchmarks/train_vs_torch.py`` uses it to see identical batches).

>>> import numpy as np
>>> from vkblas.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(np.arange(5.0), np.arange(5)), batch_size=2, device="cpu", prefetch=0)
>>> [y.tolist() for _, y in loader]
[[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..creation import tensor
from ..device import DeviceLike, resolve
from ..device import device as Device
from ..dtypes import bool_, float32, int32
from ..random import initial_seed
from ..tensor import Tensor
from .dataset import Dataset


class BatchOrder:
    """The index batches of successive epochs: ``epoch()`` returns the next epoch's list of index arrays."""

    def __init__(
        self, n: int, batch_size: int, shuffle: bool = False, seed: int | None = None, drop_last: bool = False
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.n, self.batch_size, self.shuffle, self.drop_last = n, batch_size, shuffle, drop_last
        self.seed = initial_seed() if seed is None else seed
        self.rng = np.random.default_rng(self.seed)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def epoch(self) -> list[np.ndarray]:
        order = self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        return [order[i : i + self.batch_size] for i in range(0, len(self) * self.batch_size, self.batch_size)]


def to_device(array: np.ndarray, device: DeviceLike) -> Tensor:
    """Upload a host batch: floats as float32, integers as int32, booleans as bool."""
    array = np.asarray(array)
    dtype = {"f": float32, "b": bool_}.get(array.dtype.kind, int32)
    return tensor(array, dtype=dtype, device=device)


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


class DataLoader:
    """Iterate over ``dataset`` in batches of vkblas tensors on ``device``.

    ``shuffle`` draws a new permutation each epoch from a generator seeded with ``seed`` (default: the seed set by
    ``vkblas.manual_seed``). A background thread assembles the next ``prefetch`` batches with numpy while the
    current one is used, and uploads them too where the device allows uploads from another thread (the ``cpu``
    backend does; a backend says so with ``thread_safe_upload = True``); otherwise the upload — one buffer write —
    happens on the calling thread. ``prefetch=0`` does everything on the calling thread.

    ``collate_fn(dataset, indices)`` replaces ``dataset.get_batch(indices)`` and must return numpy arrays;
    ``convert(array)`` replaces the upload (the PyTorch side of the benchmark makes torch tensors with it). A batch
    is a tuple with one tensor per field of an item (a single tensor when items have one field).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        seed: int | None = None,
        drop_last: bool = False,
        device: DeviceLike = None,
        prefetch: int = 2,
        collate_fn: Callable[[Dataset, np.ndarray], tuple[np.ndarray, ...]] | None = None,
        convert: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.order = BatchOrder(len(dataset), batch_size, shuffle, seed, drop_last)
        self.device = Device(device) if device is not None else None
        self.prefetch = prefetch
        self.collate_fn = collate_fn
        self.convert = convert

    def __len__(self) -> int:
        return len(self.order)

    def host_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The numpy arrays of the batch at ``indices`` (before upload)."""
        if self.collate_fn is not None:
            return tuple(self.collate_fn(self.dataset, indices))
        return self.dataset.get_batch(indices)

    def upload(self, arrays: tuple[np.ndarray, ...]) -> Any:
        tensors = tuple(self.convert(a) if self.convert else to_device(a, self.device) for a in arrays)
        return tensors[0] if len(tensors) == 1 else tensors

    def _upload_in_thread(self) -> bool:
        if self.convert is not None:
            return True
        backend = resolve(self.device)
        return bool(getattr(backend, "thread_safe_upload", backend.name == "cpu"))

    def __iter__(self) -> Iterator[Any]:
        host = map(self.host_batch, self.order.epoch())
        if self.prefetch == 0:
            return map(self.upload, host)
        if self._upload_in_thread():
            return prefetch(map(self.upload, host), self.prefetch)
        return map(self.upload, prefetch(host, self.prefetch))
