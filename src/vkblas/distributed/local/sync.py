"""Synchronous data parallel: step k's batch (the k-th batch of ``vkblas train``'s shuffled order) is cut into
shares that every worker is predicted to finish at the same moment, from its measured time per step (a fixed cost
plus a cost per sample: :func:`~vkblas.distributed.sizing.split_for_time`); each worker computes the mean-loss
gradient of its share, the runner checks every gradient, and the accepted ones are averaged weighted by share
size — the whole batch's gradient, up to fp32 rounding — and stepped once.

Who steps (``sync_apply``): ``sharded`` (the default) — every worker steps its slice of the parameters
(:mod:`.sharded`), so no one waits for a central step and no replica drifts; ``holder`` — the runner steps the
:class:`~vkblas.distributed.GlobalModel` while the workers wait (kept to measure the difference).

A worker that dies during a step: the step is planned again (``attempt + 1``) over the survivors, from version k,
which nobody has overwritten. A joining worker takes part from the next step. A rejected gradient's share is left
out of that step's average.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms import GlobalModel, weighted_mean
from ..validation import RejectedUpdateError
from .context import WorkerContext
from .handle import WorkerHandle
from .holder import Holder
from .protocol import Applied, Plan, Ready, Reduce
from .sharded import ShardStep, shard_bounds, state_keys, state_spec
from .stream import Segment
from .transport import SharedArrays

PROBE = 50  # steps between measurements of a worker that gets no share (too slow to help)


def cut(batch: Segment, sizes: list[int]) -> list[Segment | None]:
    """``batch`` cut into consecutive shares of ``sizes`` (None where a share is empty)."""
    out: list[Segment | None] = []
    lo = batch.lo
    for size in sizes:
        out.append(Segment(batch.epoch, lo, lo + size) if size else None)
        lo += size
    return out


class SyncHolder(Holder):
    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train)
        self.sharded = config.sync_apply == "sharded"
        self.keys = state_keys(config.train.optimizer)
        self.block = SharedArrays.create(state_spec(layout.size, self.keys))
        self.block["params"][0] = initial
        self.model = (
            None
            if self.sharded
            else GlobalModel(layout.views(initial), "sync", config.train.optimizer, config.train.learning_rate)
        )
        self.read, self.version = 0, 0
        self.step, self.attempt = -1, 0
        self.batch: Segment | None = None
        self.phase: str | None = None  # "grad", "reduce" or None (between steps)
        self.members: list[str] = []
        self.pending: set[str] = set()
        self.results: dict[str, tuple[Ready, bool]] = {}
        self.replans = 0

    @property
    def blocks(self) -> list[SharedArrays]:
        return [self.block]

    def start(self) -> None:
        super().start()
        self._next_step()

    def busy(self, name: str) -> bool:
        return name in self.pending

    def params(self) -> np.ndarray:
        return self.block["params"][self.read].copy()

    # ------------------------------------------------------------------ membership
    def add(self, w: WorkerHandle) -> None:
        super().add(w)  # takes part from the next plan
        if self.phase is None and self.batch is not None:
            self._plan()

    def remove(self, w: WorkerHandle) -> None:
        super().remove(w)
        if w.name in self.members and self.phase is not None:
            self.attempt += 1
            self.replans += 1
            self._plan()

    # ------------------------------------------------------------------ a step
    def _next_step(self) -> None:
        self.step += 1
        self.attempt = 0
        self.batch = self.stream.take(self.batch_size)
        if self.batch is None:
            self.phase, self.finished = None, True
            return
        self._plan()

    def _plan(self) -> None:
        assert self.batch is not None
        self.members = sorted(self.workers, key=lambda n: self.workers[n].index)
        self.results = {}
        if not self.members:
            self.phase, self.pending = None, set()  # waits for a worker to join (the runner fails if none can)
            return
        # a worker too slow to help gets no share; every PROBE steps each gets one, so it keeps being measured
        minimum = 1 if self.step % PROBE == 0 and self.batch.size >= len(self.members) else 0
        shares = cut(self.batch, self.shares(self.batch.size, self.members, minimum))
        shards = shard_bounds(self.layout.size, len(self.members)) if self.sharded else [None] * len(self.members)
        self.pending = set()
        for name, share, shard in zip(self.members, shares, shards, strict=True):
            self.workers[name].send(Plan(self.step, self.attempt, share, self.read, self.version, shard))
            if share is not None:
                self.pending.add(name)
        self.phase = "grad"

    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        if getattr(msg, "step", None) != self.step or getattr(msg, "attempt", None) != self.attempt:
            return  # from an abandoned attempt
        if isinstance(msg, Ready) and self.phase == "grad" and w.name in self.pending:
            self.pending.discard(w.name)
            self.results[w.name] = (msg, self._check(w, msg))
            if not self.pending:
                self._gradients_in()
        elif isinstance(msg, Applied) and self.phase == "reduce" and w.name in self.pending:
            self.pending.discard(w.name)
            self.observe_stats(w, msg.stats)
            if not self.pending:
                self._finish(applied=True)

    def _check(self, w: WorkerHandle, msg: Ready) -> bool:
        try:
            update = self.read_update(w, 0, msg.layout)
        except RejectedUpdateError as e:
            return self.validated(None, e)
        return self.validated(update)

    def _accepted(self) -> list[tuple[str, Ready]]:
        return [(n, msg) for n, (msg, ok) in self.results.items() if ok]

    def _gradients_in(self) -> None:
        accepted = self._accepted()
        if not accepted:
            self._finish(applied=False)
            return
        write = 1 - self.read
        lr = self.lr_at(self.batch.epoch)  # type: ignore[union-attr]
        if self.model is not None:
            mean = weighted_mean(
                [(self.read_update(self.workers[n], 0, msg.layout), msg.samples) for n, msg in accepted]
            )
            self.model.set_lr(lr)
            self.model.apply_gradient(mean)
            self.layout.flatten(self.model.params(), out=self.block["params"][write])
            self._finish(applied=True)
            return
        contributions = tuple((self.workers[n].mailboxes[0].handle, float(msg.samples)) for n, msg in accepted)
        reduce = Reduce(self.step, self.attempt, contributions, self.version, self.read, write, lr)
        for name in self.members:
            self.workers[name].send(reduce)
        self.pending = set(self.members)
        self.phase = "reduce"

    def _finish(self, applied: bool) -> None:
        for name, (msg, ok) in self.results.items():
            w = self.workers.get(name)
            if w is not None:
                self.account(w, msg, "accepted" if ok else "rejected", 0 if ok else None)
        if applied:
            self.read, self.version = 1 - self.read, self.version + 1
        self.phase = None
        self.progressed(self.batch.size)  # type: ignore[union-attr]
        self._next_step()

    def summary(self) -> dict[str, Any]:
        return {
            **super().summary(),
            "steps": self.version,
            "replans": self.replans,
            "sync_apply": self.config.sync_apply,
        }


# ---------------------------------------------------------------------------------------------------- worker
def run_worker(ctx: WorkerContext) -> None:
    cfg = ctx.config
    block = ctx.board_block  # the parameter and optimizer-state buffers
    sharded = cfg.sync_apply == "sharded"
    step = ShardStep(cfg.train.optimizer, block, state_keys(cfg.train.optimizer)) if sharded else None
    boxes: dict[str, np.ndarray] = {}  # other workers' mailboxes, as float32, attached on first use
    loaded: tuple[int, int] | None = None
    shard: tuple[int, int] | None = None
    while True:
        msg = ctx.recv()
        if isinstance(msg, Plan):
            shard = msg.shard
            if msg.segment is None:  # no share this step: no need for the weights on the device either
                continue
            if loaded != (msg.version, msg.read):
                ctx.load(block["params"][msg.read])
                loaded = (msg.version, msg.read)
            loss_sum, correct, grads, compute_s = ctx.gradient(msg.segment)
            layout = ctx.put(grads, 0, lambda v=msg.version: v)
            ctx.send(
                Ready(
                    **ctx.result(msg.segment, loss_sum, correct, compute_s, layout), step=msg.step, attempt=msg.attempt
                )
            )
        elif isinstance(msg, Reduce):
            assert shard is not None
            assert step is not None
            grads = []
            for handle, weight in msg.contributions:
                if handle.name not in boxes:
                    boxes[handle.name] = ctx.attach(handle)["bytes"].view(np.float32)
                grads.append((boxes[handle.name][: ctx.layout.size], weight))
            step.apply(shard, grads, msg.version, msg.read, msg.write, msg.lr)
            n = shard[1] - shard[0]
            ctx.bytes_received += 4 * n * len(grads)
            ctx.bytes_sent += 4 * n
            ctx.send(Applied(msg.step, msg.attempt, ctx.stats()))
