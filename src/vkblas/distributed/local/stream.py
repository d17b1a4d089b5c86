"""Which training samples go where: the runner hands out :class:`Segment`\\ s (a range of one epoch's shuffled
order) and workers turn them into dataset indices. Only three integers travel per segment.

The order of epoch ``e`` is the ``e``-th pass of a :class:`~vkblas.data.sampler.RandomSampler` seeded with the run's
seed, i.e. exactly the order ``vkblas train``'s shuffled loader (``DataLoader(shuffle=True, seed=...)``) sees:
cutting an epoch into consecutive segments of the batch size gives its batches.

>>> s = SampleStream(n=5, epochs=2)
>>> [s.take(2), s.take(2), s.take(2)]
[Segment(epoch=0, lo=0, hi=2), Segment(epoch=0, lo=2, hi=4), Segment(epoch=0, lo=4, hi=5)]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...data.sampler import RandomSampler


@dataclass(frozen=True)
class Segment:
    """Positions ``lo:hi`` of epoch ``epoch``'s order."""

    epoch: int
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo

    def split(self, size: int) -> list[Segment]:
        """Consecutive pieces of at most ``size``."""
        return [Segment(self.epoch, a, min(a + size, self.hi)) for a in range(self.lo, self.hi, size)]


class SampleStream:
    """``epochs`` passes over ``n`` samples, handed out in order; a piece never crosses an epoch boundary. Pieces
    given back (a dead worker's unfinished work) are handed out again first."""

    def __init__(self, n: int, epochs: int) -> None:
        if n < 1 or epochs < 1:
            raise ValueError(f"a sample stream needs n >= 1 and epochs >= 1, got n={n}, epochs={epochs}")
        self.n, self.epochs = n, epochs
        self.epoch, self.pos = 0, 0
        self.returned: deque[Segment] = deque()

    @property
    def total(self) -> int:
        return self.n * self.epochs

    @property
    def exhausted(self) -> bool:
        return not self.returned and self.epoch >= self.epochs

    def take(self, count: int) -> Segment | None:
        """The next at most ``count`` samples (fewer at an epoch's end); None when all are handed out."""
        if count < 1:
            raise ValueError(f"take needs count >= 1, got {count}")
        if self.returned:
            seg = self.returned.popleft()
            if seg.size > count:
                head, tail = Segment(seg.epoch, seg.lo, seg.lo + count), Segment(seg.epoch, seg.lo + count, seg.hi)
                self.returned.appendleft(tail)
                return head
            return seg
        if self.epoch >= self.epochs:
            return None
        hi = min(self.pos + count, self.n)
        seg = Segment(self.epoch, self.pos, hi)
        self.pos = hi
        if self.pos == self.n:
            self.epoch, self.pos = self.epoch + 1, 0
        return seg

    def give_back(self, segments: Iterable[Segment]) -> None:
        self.returned.extend(s for s in segments if s.size > 0)


class EpochOrder:
    """Segments -> dataset indices, on the worker. Permutations are made in epoch order from ``seed`` and kept."""

    def __init__(self, n: int, seed: int) -> None:
        self._order = RandomSampler(range(n), seed=seed)
        self._perms: list[np.ndarray] = []
        self._n = n

    def indices(self, seg: Segment) -> np.ndarray:
        while len(self._perms) <= seg.epoch:
            self._perms.append(np.fromiter(iter(self._order), np.int64, count=self._n))
        return self._perms[seg.epoch][seg.lo : seg.hi]
