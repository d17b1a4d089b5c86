"""The global generator: a seed and a counter. Random numbers are made on the device by a counter-based hash
(see backend/base.py), so ``manual_seed(s)`` gives the same numbers on every backend."""

from __future__ import annotations

import threading


class Generator:
    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> Generator:
        if not isinstance(seed, int):
            raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
        with self._lock:
            self.seed, self.counter = seed & 0xFFFFFFFF, 0
        return self

    def initial_seed(self) -> int:
        return self.seed

    def take(self, n: int) -> tuple[int, int]:
        """Reserve ``n`` counters; returns (seed, first counter)."""
        with self._lock:
            start = self.counter
            self.counter = (self.counter + max(n, 1)) & 0xFFFFFFFF
            return self.seed, start

    def get_state(self) -> tuple[int, int]:
        return self.seed, self.counter

    def set_state(self, state: tuple[int, int]) -> None:
        with self._lock:
            self.seed, self.counter = int(state[0]), int(state[1])


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    return default_generator.manual_seed(seed)


def initial_seed() -> int:
    return default_generator.initial_seed()
