"""Datasets, as in ``torch.utils.data``: map-style (``__getitem__`` and ``__len__``) and iterable-style.

Items are host data (numpy arrays and Python numbers, or tensors); the :class:`~vkblas.data.DataLoader` collates
them and uploads the batch. vkblas's own datasets also build a whole batch at once from their arrays
(``get_batch(indices)``, vectorised numpy): that is the loader's fast path. Any object with ``__getitem__`` and
``__len__`` works as a map-style dataset, subclass or not.

>>> import numpy as np
>>> ds = TensorDataset(np.arange(6).reshape(3, 2), np.array([0, 1, 0]))
>>> len(ds), ds[1]
(3, (array([2, 3]), np.int64(1)))
>>> [len(part) for part in random_split(ds, [2, 1])]
[2, 1]
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..random import Generator
from .collate import collate_numpy
from .sampler import numpy_rng


class Dataset:
    """Map-style dataset: subclass and define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def get_batch(self, indices: np.ndarray) -> Any:
        """The items at ``indices`` collated on the host (numpy arrays where ``default_collate`` makes tensors).

        A subclass that overrides this with a vectorised version promises host data only: the loader may then
        call it from a background thread or a worker process."""
        return collate_numpy([self[int(i)] for i in indices])

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """Iterable-style dataset: subclass and define ``__iter__``. In loader worker processes every worker iterates
    its own copy; split the stream with :func:`~vkblas.data.get_worker_info`, as in PyTorch."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __len__(self) -> int:  # a stream has no length unless the subclass gives it one (PyTorch's behaviour)
        raise TypeError(f"object of type '{type(self).__name__}' has no len()")


def fetch(dataset: Any, indices: Sequence[int] | np.ndarray) -> Any:
    """The host batch of any map-style ``dataset`` at ``indices``: ``get_batch`` where it has one, else its items
    (through ``__getitems__`` where defined, PyTorch's batched protocol) collated on the host."""
    if isinstance(dataset, Dataset):
        return dataset.get_batch(np.asarray(indices, dtype=np.int64))
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems([int(i) for i in indices]) if callable(getitems) else [dataset[int(i)] for i in indices]
    return collate_numpy(items)


def vectorised(dataset: Any) -> bool:
    """Whether ``dataset`` builds batches from whole arrays (a ``get_batch`` of its own): host data only, so the
    loader may prepare them ahead in a thread."""
    if isinstance(dataset, Subset):
        return vectorised(dataset.dataset)
    if isinstance(dataset, ConcatDataset):
        return all(vectorised(d) for d in dataset.datasets)
    return isinstance(dataset, Dataset) and type(dataset).get_batch is not Dataset.get_batch


def _host(x: Any) -> np.ndarray:
    """A numpy copy of an array-like (vkblas tensors included: they define ``__array__``)."""
    return np.asarray(x)


class TensorDataset(Dataset):
    """Rows of equally long arrays or tensors: ``TensorDataset(images, labels)[i] == (images[i], labels[i])``."""

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.tensors = tuple(_host(t) for t in tensors)
        lengths = {len(t) for t in self.tensors}
        if len(lengths) != 1:
            raise ValueError(f"size mismatch between tensors: first dimensions {[len(t) for t in self.tensors]}")

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def get_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        return [t[indices] for t in self.tensors]


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int] | np.ndarray) -> None:
        self.dataset = dataset
        self.indices = indices
        self._positions = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index: int | list[int]) -> Any:
        if isinstance(index, list):
            return self.dataset[[int(self._positions[i]) for i in index]]
        return self.dataset[int(self._positions[index])]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        inner = [int(self._positions[i]) for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        return getitems(inner) if callable(getitems) else [self.dataset[i] for i in inner]

    def get_batch(self, indices: np.ndarray) -> Any:
        return fetch(self.dataset, self._positions[np.asarray(indices, dtype=np.int64)])


class ConcatDataset(Dataset):
    """Several map-style datasets one after the other."""

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def _locate(self, index: int) -> tuple[int, int]:
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        part = bisect.bisect_right(self.cumulative_sizes, index)
        return part, index - (self.cumulative_sizes[part - 1] if part else 0)

    def __getitem__(self, index: int) -> Any:
        part, local = self._locate(index)
        return self.datasets[part][local]

    def get_batch(self, indices: np.ndarray) -> Any:
        located = [self._locate(int(i)) for i in indices]
        parts = sorted({p for p, _ in located})
        if len(parts) == 1:
            return fetch(self.datasets[parts[0]], [i for _, i in located])
        # fetch each part's rows in one go; row j of their concatenation belongs at position order[j]
        batches = [fetch(self.datasets[p], [i for q, i in located if q == p]) for p in parts]
        order = np.array([k for p in parts for k, (q, _) in enumerate(located) if q == p])
        return _merge_rows(batches, np.argsort(order))


def _merge_rows(batches: list[Any], take: np.ndarray) -> Any:
    """One batch from per-part batches of the same structure: their rows concatenated, then taken at ``take``."""
    first = batches[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(batches)[take]
    if isinstance(first, dict):
        return {k: _merge_rows([b[k] for b in batches], take) for k in first}
    if isinstance(first, (list, tuple)) and first and not isinstance(first[0], (str, bytes)):
        return type(first)(_merge_rows(list(parts), take) for parts in zip(*batches, strict=True))
    rows = [row for b in batches for row in b]  # strings, or tensors made by the datasets
    return [rows[i] for i in take]


def random_split(dataset: Any, lengths: Sequence[int | float], generator: Generator | None = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets of the given lengths, or of the given fractions of
    its length (which must sum to 1; what rounding leaves over goes round-robin to the first splits)."""
    n = len(dataset)
    sizes = list(lengths)
    if math.isclose(sum(sizes), 1) and sum(sizes) <= 1:
        for i, frac in enumerate(sizes):
            if not 0 <= frac <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        sizes = [int(math.floor(n * frac)) for frac in sizes]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.", stacklevel=2
                )
    if sum(sizes) != n:
        raise ValueError(f"Sum of input lengths does not equal the length of the input dataset! ({sum(sizes)} vs {n})")
    order = numpy_rng(generator).permutation(n).tolist()
    ends = np.cumsum(sizes).tolist()
    return [Subset(dataset, order[end - size : end]) for end, size in zip(ends, sizes, strict=True)]
