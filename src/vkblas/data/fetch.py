"""One batch from one task: what the loader's main thread, its prefetch thread or a worker process runs.

A task is a list of indices (map-style, batched), one index (``batch_size=None``) or nothing (iterable-style: the
next batch of the stream). The result is host data when the default collation is used — the loader uploads it —
and whatever ``collate_fn`` returns otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .collate import collate_numpy, convert_numpy, default_collate, default_convert
from .dataset import IterableDataset, fetch


class Fetcher:
    def __init__(
        self,
        dataset: Any,
        collate_fn: Callable[[Any], Any] | None,
        auto_batch: bool,
        batch_size: int | None,
        drop_last: bool,
    ) -> None:
        self.dataset, self.auto_batch, self.batch_size, self.drop_last = dataset, auto_batch, batch_size, drop_last
        default = default_collate if auto_batch else default_convert
        #: None: the default collation, done on the host (numpy) and uploaded by the loader afterwards
        self.collate_fn = None if collate_fn is None or collate_fn is default else collate_fn
        self.iterable = isinstance(dataset, IterableDataset)
        self._stream: Iterator[Any] | None = None

    @property
    def host_output(self) -> bool:
        """Whether results are host data that the loader still has to upload."""
        return self.collate_fn is None

    def reset(self) -> None:
        """Start a new pass over an iterable dataset."""
        self._stream = iter(self.dataset) if self.iterable else None

    def _collate(self, items: list[Any]) -> Any:
        return collate_numpy(items) if self.collate_fn is None else self.collate_fn(items)

    def _convert(self, item: Any) -> Any:
        return convert_numpy(item) if self.collate_fn is None else self.collate_fn(item)

    def __call__(self, task: Any) -> Any:
        """The batch of ``task``; raises StopIteration when an iterable dataset has no more batches."""
        if self.iterable:
            return self._next_of_stream()
        if not self.auto_batch:
            return self._convert(self.dataset[task])
        if self.collate_fn is None:
            return fetch(self.dataset, task)
        getitems = getattr(self.dataset, "__getitems__", None)
        return self._collate(getitems(list(task)) if callable(getitems) else [self.dataset[i] for i in task])

    def _next_of_stream(self) -> Any:
        if self._stream is None:
            self.reset()
        assert self._stream is not None
        if not self.auto_batch or self.batch_size is None:
            return self._convert(next(self._stream))
        items = []
        for item in self._stream:
            items.append(item)
            if len(items) == self.batch_size:
                break
        if not items or (self.drop_last and len(items) < self.batch_size):
            raise StopIteration
        return self._collate(items)
