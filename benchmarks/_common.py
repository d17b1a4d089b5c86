"""Helpers shared by the benchmark scripts: timing, device discovery, table printing, per-phase memory peaks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


def best_of(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> float:
    """Smallest wall time in seconds of ``fn()`` over ``repeat`` runs (fn must include its own sync)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def vkblas_devices() -> list[str]:
    import vkblas

    return vkblas.devices()


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        title,
        " | ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)),
        "-|-".join("-" * w for w in widths),
    ]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells[1:]]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def mnist_example_cnn(nn: Any, num_classes: int = 10) -> Any:
    """PyTorch's examples/mnist net (conv 1->32, conv 32->64, max-pool, fc 9216->128->10) without its dropout, for
    ``nn`` = ``vkblas.nn`` or ``torch.nn`` (the same layers in the same order)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


class PhasePeaks:
    """Bytes above a step's baseline, per phase, from an allocator's counters: ``sync`` waits for the device,
    ``reset`` restarts its peak, ``peak`` and ``allocated`` read it (vkblas's backend statistics, or
    ``torch.cuda``'s). ``res`` collects the figures by name."""

    def __init__(
        self, sync: Callable[[], Any], reset: Callable[[], Any], peak: Callable[[], int], allocated: Callable[[], int]
    ) -> None:
        self.sync, self.reset, self.peak, self.allocated = sync, reset, peak, allocated
        self.res: dict[str, Any] = {}

    @classmethod
    def of_backend(cls, backend: Any) -> PhasePeaks:
        """A vkblas backend's ``memory_stats`` (live storages on cpu, the buffer pool's buckets on Vulkan)."""
        return cls(
            backend.synchronize,
            backend.reset_peak_memory_stats,
            lambda: backend.memory_stats()["peak_allocated"],
            lambda: backend.memory_stats()["allocated"],
        )

    def start(self) -> None:
        """The step's baseline: what is allocated now."""
        self.sync()
        self.res["baseline"] = self.allocated()

    def measure(self, phase: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, recording its peak above the baseline as ``phase``."""
        self.sync()
        self.reset()
        out = fn()
        self.sync()
        self.res[phase] = self.peak() - self.res["baseline"]
        return out

    def live(self, name: str) -> None:
        """What is allocated now above the baseline, as ``name`` (after a ``measure``, which ended in a sync)."""
        self.res[name] = self.allocated() - self.res["baseline"]
