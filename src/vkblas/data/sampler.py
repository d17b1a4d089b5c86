"""Samplers: the order in which a :class:`~vkblas.data.DataLoader` visits a map-style dataset, as in
``torch.utils.data``.

Random orders come from numpy, seeded from a vkblas :class:`~vkblas.Generator` (by default the global one, so
``vkblas.manual_seed`` makes them reproducible; each pass takes one value from it, as PyTorch's samplers draw from
``torch``'s generator). The orders are not PyTorch's numbers, only its rules. ``seed=`` (a vkblas extension) seeds
one numpy generator once instead: the same seed then gives the same sequence of epochs.

>>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from typing import Generic, TypeVar

import numpy as np

from ..random import Generator, default_generator

T = TypeVar("T")


class Sampler(Generic[T]):
    """Base class: ``__iter__`` yields indices (or lists of indices); ``__len__`` says how many where it can."""

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _check(generator: Generator | None) -> Generator | None:
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"generator must be a vkblas.Generator, got {type(generator).__name__}")
    return generator


def numpy_rng(generator: Generator | None = None) -> np.random.Generator:
    """A fresh numpy generator seeded from one draw of ``generator`` (default: vkblas's global generator)."""
    seed, counter = (_check(generator) or default_generator).take(1)
    return np.random.default_rng((seed, counter))


class _Randomness:
    """Where a sampler's random numbers come from: a fresh numpy generator per pass (:func:`numpy_rng`), or with
    ``seed`` one numpy generator seeded once."""

    def __init__(self, generator: Generator | None, seed: int | None) -> None:
        if generator is not None and seed is not None:
            raise ValueError("pass either generator= or seed=, not both")
        self.generator = _check(generator)
        self.fixed = np.random.default_rng(seed) if seed is not None else None

    def rng(self) -> np.random.Generator:
        return self.fixed if self.fixed is not None else numpy_rng(self.generator)


class RandomSampler(Sampler[int]):
    """A random permutation of the indices each pass; with ``replacement=True``, ``num_samples`` independent
    draws. Without replacement, ``num_samples`` larger than the dataset takes several permutations in a row."""

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Generator | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        self._random = _Randomness(generator, seed)
        if not isinstance(self.num_samples, int) or isinstance(self.num_samples, bool) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), self._random.rng()
        if self.replacement:
            return iter(rng.integers(0, n, size=self.num_samples).tolist())
        whole, rest = divmod(self.num_samples, n)
        parts = [rng.permutation(n) for _ in range(whole)] + ([rng.permutation(n)[:rest]] if rest else [])
        return iter(np.concatenate(parts).tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in a random order each pass, without replacement."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None, *, seed: int | None = None) -> None:
        self.indices = indices
        self.generator = generator
        self._random = _Randomness(generator, seed)

    def __iter__(self) -> Iterator[int]:
        return iter([self.indices[i] for i in self._random.rng().permutation(len(self.indices)).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler[list[int]]):
    """Lists of ``batch_size`` indices from ``sampler``; the last one shorter unless ``drop_last``."""

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        # the sampler's pass starts here, on the calling thread: a random order is drawn now, not later in the
        # loader's prefetch thread, where its draw would race the main thread's (dropout's) for the generator
        return self._batches(iter(self.sampler))

    def _batches(self, indices: Iterator[int]) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in indices:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
