"""Fault injection for tests and benchmarks: what a worker does wrong, and when.

Faults are passed to :func:`~vkblas.distributed.local.run_local` as an explicit argument (``faults=[...]``); no
environment variable or command-line flag turns them on, so a user cannot trip one by accident. A fault fires on
the worker's ``at``-th update (0-based; an update is a gradient in ``sync``/``async``, a pseudo-gradient in
``diloco``):

* ``nan`` / ``inf``: one value of the first tensor becomes NaN / +Inf;
* ``shape``: the first tensor is sent flattened (or as a row, if it is already flat);
* ``dtype``: the first tensor is sent as float16;
* ``kill``: the worker sends itself SIGKILL (``kill -9``) instead of sending the update;
* ``delay``: the worker sleeps ``seconds`` before sending (a straggler);
* ``hold``: the worker holds the update until the global model's version reaches ``version`` (a late worker,
  deterministically late: the holder has moved on by exactly that much).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

KINDS = ("nan", "inf", "shape", "dtype", "kill", "delay", "hold")
_CORRUPT = ("nan", "inf", "shape", "dtype")


@dataclass(frozen=True)
class Fault:
    """Worker number ``worker`` (its index in the run's worker list; replacements continue the numbering) does
    ``kind`` at its ``at``-th update."""

    worker: int
    kind: str
    at: int = 0
    seconds: float = 0.0  # delay
    version: int = 0  # hold

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}: choose from {', '.join(KINDS)}")
        if self.worker < 0 or self.at < 0:
            raise ValueError(f"fault worker and at must be >= 0, got worker={self.worker}, at={self.at}")


class FaultPlan:
    """The faults of one worker, applied by its update path."""

    def __init__(self, faults: Iterable[Fault]) -> None:
        self.faults = list(faults)
        self.updates = 0  # updates prepared so far

    def _due(self) -> list[Fault]:
        return [f for f in self.faults if f.at == self.updates]

    def corrupts(self) -> bool:
        """Whether this update is to be corrupted (so must travel as separate arrays, not as the flat vector)."""
        return any(f.kind in _CORRUPT for f in self._due())

    def corrupt(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``arrays`` as this update should (mis)travel."""
        out = dict(arrays)
        for f in self._due():
            if f.kind in _CORRUPT:
                first = next(iter(out))
                out[first] = _corrupt(out[first], f.kind)
        return out

    def before_send(self, version: Callable[[], int]) -> None:
        """Side effects due before this update is sent (``version`` reads the global model's version); then count
        the update."""
        for f in self._due():
            if f.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif f.kind == "delay":
                time.sleep(f.seconds)
            elif f.kind == "hold":
                while version() < f.version:
                    time.sleep(0.005)
        self.updates += 1


def _corrupt(a: np.ndarray, kind: str) -> np.ndarray:
    if kind in ("nan", "inf"):
        a = np.array(a, copy=True)
        a.reshape(-1)[0] = np.nan if kind == "nan" else np.inf
        return a
    if kind == "shape":
        return a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1)
    return a.astype(np.float16)
