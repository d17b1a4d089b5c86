"""One epoch of training and one pass of evaluation, with a tqdm bar that reads the device only every few steps.

On a Vulkan device the training step can run as a captured graph (:class:`GraphedStep`, ``vkblas.graphs``): the
first batch runs eagerly (it creates the optimizer state and plans the matmuls), the second is captured on static
input tensors, every later full batch is copied into those and replayed. Loss and accuracy sums are accumulated on
the device inside the step. A batch of another shape (the last partial batch) runs eagerly."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from .. import graphs
from ..autograd import no_grad as vkblas_no_grad
from ..creation import zeros
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
    """Loss and correct-count sums kept on the device; read back only when asked (a read is a sync). Given
    ``loss``/``correct`` tensors, the sums are added into those in place (a captured step can do that)."""

    def __init__(self, loss: Tensor | None = None, correct: Tensor | None = None) -> None:
        self.loss = loss
        self.correct = correct
        self.inplace = loss is not None
        self.samples = 0

    def add(self, loss: Tensor, logits: Tensor, targets: Tensor) -> None:
        n = targets.shape[0]
        batch_loss = loss.detach() * float(n)
        batch_correct = (logits.detach().argmax(1) == targets).float().sum()
        if self.inplace:
            self.loss.add_(batch_loss)  # type: ignore[union-attr]
            self.correct.add_(batch_correct)  # type: ignore[union-attr]
        else:
            self.loss = batch_loss if self.loss is None else self.loss + batch_loss
            self.correct = batch_correct if self.correct is None else self.correct + batch_correct
        self.samples += n

    def read(self) -> tuple[float, float]:
        if not self.samples or self.loss is None or self.correct is None:
            return float("nan"), float("nan")
        return self.loss.item() / self.samples, self.correct.item() / self.samples


class GraphedStep:
    """The training step of ``model``/``optimizer``/``loss_fn`` as a ``vkblas.graphs`` graph, kept across epochs
    (the optimizer must be built with ``capturable=True``; a changed ``group["lr"]`` reaches the graph by itself)."""

    def __init__(self, model: Any, optimizer: Any, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> None:
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.device = next(iter(model.parameters())).device
        self.graph = graphs.Graph()
        self.static: tuple[Tensor, Tensor] | None = None
        self.warm = False
        self.sums = (zeros((), device=self.device), zeros((), device=self.device))

    @staticmethod
    def supported(model: Any) -> bool:
        """Whether ``model`` lives on a device that can capture graphs (Vulkan)."""
        params = list(model.parameters())
        return bool(params) and graphs.can_capture(params[0].device)

    def totals(self) -> _Totals:
        for t in self.sums:
            t.zero_()
        return _Totals(*self.sums)

    def _eager(self, x: Tensor, y: Tensor, totals: _Totals) -> None:
        self.optimizer.zero_grad()
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        loss.backward()
        self.optimizer.step()
        totals.add(loss, logits, y)

    def __call__(self, x: Tensor, y: Tensor, totals: _Totals) -> None:
        if not self.warm or (
            self.static is not None and (x.shape, y.shape) != (self.static[0].shape, self.static[1].shape)
        ):
            self._eager(x, y, totals)  # the warm-up step, or a batch of another shape
            self.warm = True
        elif self.static is None:
            self.static = (x.clone(), y.clone())
            with graphs.capture(self.graph, device=self.device):
                self._eager(*self.static, totals)  # capture runs the step once: this batch is trained on
        else:
            self.static[0].copy_(x)
            self.static[1].copy_(y)
            self.graph.replay()
            totals.samples += y.shape[0]


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
    graphed: GraphedStep | None = None,
) -> PassResult:
    """Train ``model`` for one pass over ``batches``; the bar shows loss, accuracy and samples/s. ``graphed``: run
    the steps through that captured graph (see :class:`GraphedStep`)."""
    model.train()
    totals, start = (graphed.totals() if graphed else _Totals()), time.perf_counter()
    bar = _bar(batches, desc, show)
    for step, (x, y) in enumerate(bar, 1):
        if graphed is not None:
            graphed(x, y, totals)
        else:
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
