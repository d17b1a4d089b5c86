"""Map-style datasets, as in ``torch.utils.data``.

Items are host data (numpy arrays and Python numbers); the :class:`~vkblas.data.DataLoader` assembles batches with
numpy and uploads them to the device. A dataset may define ``get_batch(indices)`` to build a whole batch at once
(vectorised); the default stacks items one by one.

>>> import numpy as np
>>> ds = TensorDataset(np.arange(6).reshape(3, 2), np.array([0, 1, 0]))
>>> len(ds), ds[1]
(3, (array([2, 3]), np.int64(1)))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class Dataset:
    """Subclass and define ``__getitem__`` and ``__len__`` (and optionally ``get_batch``)."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def get_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The items at ``indices`` stacked along a new first axis, one array per field."""
        items = [self[int(i)] for i in indices]
        if not items:
            raise ValueError("get_batch needs at least one index")
        if not isinstance(items[0], tuple):
            return (np.stack([np.asarray(x) for x in items]),)
        return tuple(np.stack([np.asarray(x) for x in field]) for field in zip(*items, strict=True))


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

    def get_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(t[indices] for t in self.tensors)


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int] | np.ndarray) -> None:
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[int(self.indices[index])]

    def get_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        return self.dataset.get_batch(self.indices[np.asarray(indices)])
