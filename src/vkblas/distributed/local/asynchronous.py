"""Asynchronous SGD with bounded staleness: the runner holds the model (stepped by the host optimizer of
:mod:`.flatopt`: ~0.6 ms a step for the MLP, where vkblas's per-tensor optimizer on the cpu took ~3.5 ms and made
the runner the bottleneck) and applies each worker's gradient as it arrives; workers read the newest weights from
the seqlock board whenever they start a batch, without waiting for the runner or for each other.

* Every gradient carries the version it was computed from. The :class:`~vkblas.distributed.StalenessFilter`
  drops one more than ``max_staleness`` versions old (counted as ``stale``) and scales the learning rate of an
  accepted one by ``1 / (1 + s)`` (Zhang et al. 2016; see :mod:`vkblas.distributed.algorithms`). A gradient is
  checked first, whatever its age: a bad one is ``rejected`` (by reason) even when it is also too old, so what
  the run reports about a worker's gradients does not depend on how late a loaded machine made them.
* ``batch_size`` is the global batch, as in ``sync``: each worker's batch is its share of it, sized from the
  measured step times (:func:`~vkblas.distributed.sizing.split_for_time`) so that every worker's step takes
  about the same wall time. N workers then apply N steps per global batch, each scaled by ``1 / (1 + s)`` with
  s ~ N - 1, which is what makes asynchronous SGD with the staleness-dependent rate track synchronous SGD of the
  same global batch (Zhang et al., section 4). A step is also weighted by its batch over the mean share
  (``samples * N / batch_size``), so a slow worker's small, noisy batch moves the model less.
* A worker has one batch in hand: it gets the next when the runner has dealt with its gradient, so the weights it
  reads next already hold its own update and its staleness counts only the other workers' updates (with two in
  hand it would count its own pending one too: s ~ 3 instead of 1 with two workers, and steps a quarter as long).
* A dead worker's unfinished batches go back to the stream, to be handed to the others.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..algorithms import StalenessFilter
from ..validation import RejectedUpdateError
from .context import WorkerContext
from .flatopt import FlatOptimizer
from .handle import WorkerHandle
from .holder import Holder
from .protocol import Grad, Work
from .stream import Segment
from .transport import SeqlockBoard


class AsyncHolder(Holder):
    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train)
        self.opt = FlatOptimizer.training(config.train.optimizer, layout.size)
        self.model = self.opt.fresh(initial.copy())
        self.version = 0  # gradients applied
        self.board = SeqlockBoard.create(layout.size)
        self.board.publish(initial, 0)
        self.filter = StalenessFilter(config.staleness_bound, config.staleness_rule)
        self.outstanding: dict[str, dict[int, Segment]] = {}
        self.seq = 0

    @property
    def blocks(self) -> list[Any]:
        return [self.board.block]

    def busy(self, name: str) -> bool:
        return bool(self.outstanding.get(name))

    def params(self) -> np.ndarray:
        return self.model.params.copy()

    @property
    def done(self) -> bool:
        return self.stream.exhausted and not any(self.outstanding.values())

    # ------------------------------------------------------------------ membership
    def add(self, w: WorkerHandle) -> None:
        super().add(w)
        self.outstanding[w.name] = {}
        self._refill(w)

    def remove(self, w: WorkerHandle) -> None:
        super().remove(w)
        self.stream.give_back(self.outstanding.pop(w.name, {}).values())
        for other in self.workers.values():
            self._refill(other)

    def _refill(self, w: WorkerHandle) -> None:
        work = self.outstanding.get(w.name)
        if work is None or work:
            return
        seg = self.stream.take(self.share_for(w.name))
        if seg is not None:
            self.seq += 1
            work[self.seq] = seg
            w.send(Work(self.seq, seg))

    # ------------------------------------------------------------------ updates
    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        if not isinstance(msg, Grad) or msg.seq not in self.outstanding.get(w.name, {}):
            return
        del self.outstanding[w.name][msg.seq]
        judgement = self.filter.judge(msg.version, self.version)
        try:  # checked before its age: a bad gradient is rejected (by reason) however late it arrives
            grad = self.flat_update(w, 0, msg.layout)
        except RejectedUpdateError as e:
            self.validated(None, e)
            self.account(w, msg, "rejected")
        else:
            if judgement.accepted:
                self._apply(grad, msg, judgement.scale)
            self.account(w, msg, "accepted" if judgement.accepted else "stale", judgement.staleness)
        self.progressed(msg.samples)
        self._refill(w)

    def _apply(self, grad: np.ndarray, msg: Grad, scale: float) -> None:
        lr = self.lr_at(self.epoch_now) * scale * msg.samples / self.mean_share()
        self.opt.step(self.model, grad, lr)
        self.version += 1
        self.board.publish(self.model.params, self.version)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "updates": self.version, "max_staleness": self.filter.max_staleness}


# ---------------------------------------------------------------------------------------------------- worker
def run_worker(ctx: WorkerContext) -> None:
    board = ctx.board()
    while True:
        job: Work = ctx.recv()
        t0 = time.perf_counter()
        version = ctx.pull()
        loss_sum, correct = ctx.gradient(job.segment, 0)
        layout = ctx.put_gradient(0, board.version)
        fields = ctx.result(job.segment, loss_sum, correct, time.perf_counter() - t0, layout)
        ctx.send(Grad(**fields, seq=job.seq, version=version))
