"""One epoch of training and one pass of evaluation, with a tqdm bar that reads the device only every few steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from ..autograd import no_grad as vkblas_no_grad
from ..tensor import Tensor

Batches = Iterable[tuple[Tensor, Tensor]]


@dataclass
class PassResult:
    """Mean loss, accuracy (0–1), samples seen and seconds of one pass over a loader."""

    loss: float
    accuracy: float
    samples: int
    seconds: float

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("nan")


class _Totals:
    """Loss and correct-count sums kept on the device; read back only when asked (a read is a sync)."""

    def __init__(self) -> None:
        self.loss: Tensor | None = None
        self.correct: Tensor | None = None
        self.samples = 0

    def add(self, loss: Tensor, logits: Tensor, targets: Tensor) -> None:
        n = targets.shape[0]
        batch_loss = loss.detach() * float(n)
        batch_correct = (logits.detach().argmax(1) == targets).float().sum()
        self.loss = batch_loss if self.loss is None else self.loss + batch_loss
        self.correct = batch_correct if self.correct is None else self.correct + batch_correct
        self.samples += n

    def read(self) -> tuple[float, float]:
        if not self.samples or self.loss is None or self.correct is None:
            return float("nan"), float("nan")
        return self.loss.item() / self.samples, self.correct.item() / self.samples


def _bar(batches: Batches, desc: str, show: bool) -> Any:
    total = len(batches) if hasattr(batches, "__len__") else None
    return tqdm(batches, total=total, desc=desc, unit="batch", leave=False, disable=not show, dynamic_ncols=True)


def train_epoch(
    model: Any,
    batches: Batches,
    optimizer: Any,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    desc: str = "train",
    show: bool = True,
    refresh_every: int = 25,
) -> PassResult:
    """Train ``model`` for one pass over ``batches``; the bar shows loss, accuracy and samples/s."""
    model.train()
    totals, start = _Totals(), time.perf_counter()
    bar = _bar(batches, desc, show)
    for step, (x, y) in enumerate(bar, 1):
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        totals.add(loss, logits, y)
        if show and step % refresh_every == 0:
            mean_loss, acc = totals.read()
            rate = totals.samples / (time.perf_counter() - start)
            bar.set_postfix(loss=f"{mean_loss:.4f}", acc=f"{100 * acc:.2f}%", samples_s=f"{rate:,.0f}")
    mean_loss, acc = totals.read()  # a sync: the epoch's work is done when it returns
    bar.close()
    return PassResult(mean_loss, acc, totals.samples, time.perf_counter() - start)


def evaluate(
    model: Any,
    batches: Batches,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    desc: str = "eval",
    show: bool = True,
    no_grad: Callable[[], Any] | None = None,
) -> PassResult:
    """Mean loss and accuracy of ``model`` over ``batches``, without gradients (``no_grad``: the framework's
    context manager, vkblas's by default)."""
    model.eval()
    totals, start = _Totals(), time.perf_counter()
    bar = _bar(batches, desc, show)
    with (no_grad or vkblas_no_grad)():
        for x, y in bar:
            logits = model(x)
            totals.add(loss_fn(logits, y), logits, y)
    mean_loss, acc = totals.read()
    bar.close()
    return PassResult(mean_loss, acc, totals.samples, time.perf_counter() - start)
