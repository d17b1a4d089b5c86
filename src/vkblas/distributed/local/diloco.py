"""DiLoCo (Douillard et al. 2023) on one machine: each worker takes inner AdamW steps from the global weights and
sends its pseudo-gradient ``start - end`` through the codec; the runner's outer Nesterov SGD applies the
sample-weighted mean of a round's accepted pseudo-gradients.

Rounds and heterogeneous workers:

* A round's work is sized by speed: every worker takes ``inner_steps`` (H) steps, each on its share of the
  global batch sized from its measured step times (:func:`~vkblas.distributed.sizing.split_for_time`; an even
  share until measured), so all are planned to
  finish together and a round covers H global batches, as H steps of ``vkblas train`` would. (Averaging N
  replicas each trained on a 1/N share of every batch is, to first order, training on the whole batch; giving
  every worker the whole batch would make a round count N batches per outer step.)
* A round closes (:class:`RoundState`) when all its planned workers have reported, when ``round_quorum`` of its
  planned samples have arrived on time, or at the deadline, ``round_deadline`` times its predicted duration after
  it opened — not when the slowest worker is done.
* A pseudo-gradient computed from version v arriving at version v + s (s rounds late) is judged by the
  :class:`~vkblas.distributed.StalenessFilter`: dropped (``stale``) if s > ``max_staleness``, else added to the
  open round scaled by ``1 / (1 + s)``, with its full sample weight. It is decoded and checked first, whatever
  its age: a bad one is ``rejected`` even when it is also too old.
* A worker that reports after its round closed is planned into the open round for the time the round has left
  (so it is on time again), or waits for the next round if that is less than one step. A joining worker takes
  the current global weights at the next round. Workers keep their inner optimizer state (and their error-feedback
  residual) between rounds.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...training.fit import make_optimizer
from ...training.loop import GraphedStep, train_epoch
from ..algorithms import GlobalModel, StalenessFilter, pseudo_gradient, weighted_mean
from ..codec import CodecError, ErrorFeedback, decode, encode
from ..validation import RejectedUpdateError
from .context import WorkerContext
from .handle import WorkerHandle
from .holder import Holder
from .protocol import Pseudo, Round
from .transport import SeqlockBoard


@dataclass
class RoundState:
    """One open round: who was planned for how many samples and how long, who reported, what was accepted.

    >>> r = RoundState(number=0, opened_at=0.0, quorum=0.5, deadline_factor=2.0)
    >>> r.plan("a", 100, 1.0); r.plan("b", 100, 1.0)
    >>> r.close_reason(now=0.5) is None
    True
    >>> r.report("a"); r.add({"w": np.zeros(1, np.float32)}, 100, staleness=0); r.close_reason(now=0.5)
    'quorum'
    """

    number: int
    opened_at: float
    quorum: float
    deadline_factor: float
    planned: dict[str, int] = field(default_factory=dict)
    predicted_s: dict[str, float | None] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    contributions: list[tuple[Mapping[str, np.ndarray], float]] = field(default_factory=list)
    on_time_samples: int = 0
    late: int = 0
    arrivals: list[tuple[str, str, int]] = field(default_factory=list)  # (worker, outcome, staleness)

    def plan(self, name: str, samples: int, predicted_s: float | None) -> None:
        self.planned[name] = self.planned.get(name, 0) + samples
        self.predicted_s[name] = predicted_s
        self.reported.discard(name)  # planned (again): the round waits for it

    def report(self, name: str) -> None:
        if name in self.planned:
            self.reported.add(name)

    def forget(self, name: str) -> None:
        """A planned worker died: the round no longer waits for it."""
        if name not in self.reported:
            self.planned.pop(name, None)
            self.predicted_s.pop(name, None)

    def add(self, update: Mapping[str, np.ndarray], samples: int, staleness: int) -> None:
        self.contributions.append((update, samples))
        if staleness == 0:
            self.on_time_samples += samples
        else:
            self.late += 1

    @property
    def expected_close(self) -> float | None:
        """When the round should be complete, if every planned worker's speed is known."""
        times = list(self.predicted_s.values())
        if not times or any(t is None for t in times):
            return None
        return self.opened_at + max(t for t in times if t is not None)

    @property
    def deadline(self) -> float | None:
        close = self.expected_close
        return None if close is None else self.opened_at + self.deadline_factor * (close - self.opened_at)

    def close_reason(self, now: float) -> str | None:
        """``complete``, ``quorum`` or ``deadline`` once the round should close; None while it waits."""
        if set(self.planned) <= self.reported:  # nobody left to wait for
            return "complete" if self.planned or self.contributions else None
        if not self.contributions:
            return None
        if self.planned and self.on_time_samples >= self.quorum * sum(self.planned.values()):
            return "quorum"
        deadline = self.deadline
        if deadline is not None and now >= deadline:
            return "deadline"
        return None


class DilocoHolder(Holder):
    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train)
        self.model = GlobalModel(
            layout.views(initial),
            "diloco",
            outer_lr=config.outer_lr,
            outer_momentum=config.outer_momentum,
            nesterov=config.outer_momentum > 0,  # momentum 0: plain averaging steps (lr 1: FedAvg)
        )
        self.board = SeqlockBoard.create(layout.size)
        self.board.publish(initial, 0)
        self.filter = StalenessFilter(config.staleness_bound, config.staleness_rule)
        self.round: RoundState | None = None
        self.working: dict[str, Any] = {}  # name -> the Segment of its current round
        self.closed: Counter[str] = Counter()
        self.log: list[dict[str, Any]] = []  # one entry per closed round: who arrived, how late, what happened
        self.unapplied = 0  # samples reported since the last close (counted as processed when it closes)

    @property
    def blocks(self) -> list[Any]:
        return [self.board.block]

    def busy(self, name: str) -> bool:
        return name in self.working

    def params(self) -> np.ndarray:
        return self.layout.flatten(self.model.params())

    def start(self) -> None:
        super().start()
        self._open(time.monotonic())

    def next_wakeup(self) -> float | None:
        return self.round.deadline if self.round is not None else None

    # ------------------------------------------------------------------ membership
    def add(self, w: WorkerHandle) -> None:
        super().add(w)
        if self.round is not None and not self.working:
            self._plan(w, self.config.inner_steps)  # nobody is working: no reason to wait for a round
        # otherwise it starts at the next round

    def remove(self, w: WorkerHandle) -> None:
        super().remove(w)
        seg = self.working.pop(w.name, None)
        if seg is not None:
            self.stream.give_back([seg])
        if self.round is not None:
            self.round.forget(w.name)
            self.tick(time.monotonic())

    # ------------------------------------------------------------------ planning
    def _plan(self, w: WorkerHandle, steps: int) -> bool:
        """Send ``w`` ``steps`` inner steps of its share of the global batch in the open round."""
        assert self.round is not None
        batch = self.share_for(w.name)
        seg = self.stream.take(steps * batch)
        if seg is None:
            return False
        step_s = self.step_seconds(w.name, batch)
        self.round.plan(w.name, seg.size, None if step_s is None else step_s * -(-seg.size // batch))
        self.working[w.name] = seg
        w.send(Round(self.round.number, seg, batch, self.lr_at(seg.epoch)))
        return True

    def _open(self, now: float) -> None:
        q = self.config
        self.round = RoundState(self.model.version, now, q.round_quorum, q.round_deadline)
        self._put_idle_to_work()
        if not self.working and self.stream.exhausted:
            self._finish()

    def _put_idle_to_work(self) -> None:
        for w in sorted(self.workers.values(), key=lambda h: h.index):
            if w.name not in self.working:
                self._plan(w, self.config.inner_steps)

    def _finish(self) -> None:
        self.progressed(self.unapplied)
        self.unapplied = 0
        self.finished = True

    def _rejoin(self, w: WorkerHandle, now: float) -> None:
        """``w`` reported late: plan it for what is left of the open round (at least one step), else it waits."""
        assert self.round is not None
        if not self.round.planned:  # nobody works on the open round: join it whole
            self._plan(w, self.config.inner_steps)
            return
        close = self.round.expected_close
        step_s = self.step_seconds(w.name, self.share_for(w.name))
        if close is None or not step_s:
            return
        steps = min(self.config.inner_steps, math.floor((close - now) / step_s))
        if steps >= 1:
            self._plan(w, steps)

    # ------------------------------------------------------------------ updates
    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        if not isinstance(msg, Pseudo) or self.working.pop(w.name, None) is None:
            return
        assert self.round is not None
        on_time = msg.round == self.round.number
        if on_time:
            self.round.report(w.name)
        judgement = self.filter.judge(msg.round, self.model.version)
        update = self._decoded(w, msg)  # checked before its age: a bad one is rejected however late it arrives
        outcome = "rejected" if update is None else "accepted" if judgement.accepted else "stale"
        if update is not None and judgement.accepted:
            if judgement.scale != 1.0:
                update = {k: v * np.float32(judgement.scale) for k, v in update.items()}
            self.round.add(update, msg.samples, judgement.staleness)
        self.account(w, msg, outcome, None if outcome == "rejected" else judgement.staleness)
        self.round.arrivals.append((w.name, outcome, judgement.staleness))
        self.unapplied += msg.samples
        now = time.monotonic()
        self.tick(now)
        if not on_time and w.name not in self.working and self.round is not None and not self.finished:
            self._rejoin(w, now)

    def _decoded(self, w: WorkerHandle, msg: Pseudo) -> dict[str, np.ndarray] | None:
        try:
            update = decode(self.read_update(w, 0, msg.layout), msg.meta)
        except RejectedUpdateError as e:
            self.validated(None, e)
            return None
        except CodecError as e:
            self.validated(None, RejectedUpdateError("codec", str(e)))
            return None
        return update if self.validated(update) else None

    def tick(self, now: float) -> None:
        if self.round is None or self.finished:
            return
        reason = self.round.close_reason(now)
        if reason is None and not self.working:  # nobody is computing: nothing more will arrive for this round
            if not self.round.contributions:
                self._put_idle_to_work()  # (the planned ones died, or their updates were dropped)
                if not self.working and self.stream.exhausted:
                    self._finish()
                return
            reason = "complete"
        if reason is None:
            return
        if self.round.contributions:
            self.model.apply_pseudo_gradient(weighted_mean(self.round.contributions))
            self.board.publish(self.params(), self.model.version)
            self.closed[reason] += 1
            self.closed["late_contributions"] += self.round.late
        else:
            reason = "empty"
            self.closed[reason] += 1
        self.log.append(
            {
                "round": self.round.number,
                "closed_by": reason,
                "seconds": round(now - self.round.opened_at, 4),
                "arrivals": [list(a) for a in self.round.arrivals],
            }
        )
        self.progressed(self.unapplied)
        self.unapplied = 0
        self._open(now)

    def summary(self) -> dict[str, Any]:
        return {
            **super().summary(),
            "rounds": self.model.version,
            "rounds_closed_by": dict(self.closed),
            "round_log": self.log,
            "max_staleness": self.filter.max_staleness,
            "codec": self.config.codec,
        }


# ---------------------------------------------------------------------------------------------------- worker
def run_worker(ctx: WorkerContext) -> None:
    cfg = ctx.config
    graph = cfg.train.graph and GraphedStep.supported(ctx.model)
    inner = make_optimizer("adamw", ctx.params, cfg.train.learning_rate, capturable=graph)
    graphed = GraphedStep(ctx.model, inner, ctx.loss_fn) if graph else None
    feedback = ErrorFeedback(cfg.codec, cfg.codec_block) if cfg.error_feedback else None
    board = ctx.board()
    while True:
        msg: Round = ctx.recv()
        version = ctx.pull()
        start = ctx.flat.copy()
        for group in inner.param_groups:
            group["lr"] = msg.lr
        t0 = time.perf_counter()
        batches = (ctx.batch(piece) for piece in msg.segment.split(msg.batch_size))
        result = train_epoch(ctx.model, batches, inner, ctx.loss_fn, show=False, graphed=graphed)
        update = pseudo_gradient(ctx.layout.views(start), ctx.weights())
        compute_s = time.perf_counter() - t0
        tensors, meta = feedback.compress(update) if feedback else encode(update, cfg.codec, cfg.codec_block)
        layout = ctx.put(tensors, 0, board.version)
        steps = -(-msg.segment.size // msg.batch_size)
        fields = ctx.result(
            msg.segment, result.loss * result.samples, result.accuracy * result.samples, compute_s, layout, steps
        )
        ctx.send(Pseudo(**fields, round=version, meta=meta))
