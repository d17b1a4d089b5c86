"""Datasets for the DataLoader tests, in a module without PyTorch: worker processes import it (spawn), and
importing PyTorch there would only slow them down."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from vkblas import data


def _torch_worker_info() -> Any:
    torch = sys.modules.get("torch")  # set in PyTorch's own workers (the comparison runs)
    return torch.utils.data.get_worker_info() if torch is not None else None


class Squares:
    """A map-style dataset that is not a subclass of anything: (x, x**2, name)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, int, str]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.array([i, i + 0.5], dtype=np.float32), i * i, f"item{i}"


class Broken(Squares):
    def __getitem__(self, i: int) -> Any:
        if i == 3:
            raise ValueError("item 3 is broken")
        return super().__getitem__(i)


class CountingStream:
    """range(start, stop), split between workers the way PyTorch's documentation does it (mixed into an
    IterableDataset of vkblas or of PyTorch)."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __iter__(self) -> Any:
        info = data.get_worker_info() or _torch_worker_info()
        if info is None:
            return iter(range(self.start, self.stop))
        per = int(np.ceil((self.stop - self.start) / info.num_workers))
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.stop)))

    def __len__(self) -> int:
        return self.stop - self.start


class WhoAmI:
    """Items say which worker process made them."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[int, int, int]:
        info = data.get_worker_info()
        return i, -1 if info is None else info.id, os.getpid()


def keep_order(batch: list[Any]) -> list[Any]:
    """A collate_fn that returns the samples as they are."""
    return batch


def shifted_init(worker_id: int) -> None:
    np.random.seed(1000 + worker_id)


class RandomItems:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> float:
        return float(np.random.random())
