"""The runner's side of an algorithm: a :class:`Holder` hands out work, receives updates, applies or drops them,
and keeps the accounting every algorithm shares (samples seen per epoch, rates, metrics, epoch snapshots).

The runner drives it with a handful of calls: ``start``, ``add`` (a worker said Hello), ``remove`` (a worker
died), ``on_message``, ``tick`` (time passed); it reads ``done``, ``busy`` (is a worker expected to report?) and
``next_wakeup``. Subclasses: :class:`~.sync.SyncHolder`, :class:`~.asynchronous.AsyncHolder`,
:class:`~.diloco.DilocoHolder`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...training.fit import cosine_lr
from ..metrics import RunMetrics
from ..sizing import RateMeter, StepTimeModel, split_for_time
from ..validation import RejectedUpdateError, check_update
from .checks import flat_update
from .config import LocalConfig
from .handle import WorkerHandle
from .protocol import Result
from .shares import plan_shares, quantise_one
from .stream import SampleStream
from .transport import FlatLayout, Layout, unpack


@dataclass
class Snapshot:
    """The weights at the end of an epoch, evaluated after training (so evaluation never stalls the workers)."""

    epoch: int
    params: np.ndarray | None  # None until the weights of that version reach the runner (replicated sync)
    train_seconds: float
    bytes_sent: int
    workers_alive: int


@dataclass
class EpochSums:
    loss: float = 0.0
    correct: float = 0.0
    samples: int = 0


class Holder:
    """The shared part of every algorithm's runner side: a run of ``config`` over ``n_train`` samples of a model
    with ``layout``."""

    def __init__(self, config: LocalConfig, layout: FlatLayout, n_train: int) -> None:
        self.config, self.layout, self.n_train = config, layout, n_train
        self.metrics = RunMetrics()
        self.stream = SampleStream(self.n_train, self.config.train.epochs)
        self.workers: dict[str, WorkerHandle] = {}  # alive and set up
        self.rates: dict[str, RateMeter] = {}  # samples/s, for the metrics
        self.times: dict[str, StepTimeModel] = {}  # seconds per step of n samples, for sizing work
        self.arrived = 0  # samples whose update has arrived (accepted, stale or rejected)
        self.processed = 0  # ... and been dealt with (applied or not): what epochs are counted in
        self.epoch_sums: dict[int, EpochSums] = {}
        self.snapshots: list[Snapshot] = []
        self.rejections: Counter[str] = Counter()
        self.started_at = time.monotonic()
        self.batch_size = self.config.train.batch_size
        self.expected = layout.mailbox  # the layout of a flat float32 update
        self.quanta: dict[str, int] = {}  # each worker's share multiple (LocalConfig.quantum)
        self.last_share: dict[str, int] = {}  # each graph worker's previous share (reused while balanced)
        self.finished = False

    # ------------------------------------------------------------------ the runner's calls
    def start(self) -> None:
        self.started_at = time.monotonic()

    def add(self, w: WorkerHandle) -> None:
        self.workers[w.name] = w
        self.rates.setdefault(w.name, RateMeter())
        self.times.setdefault(w.name, StepTimeModel())
        self.quanta[w.name] = self.config.quantum(w.device)
        self.metrics.worker(w.name, w.device).alive = True

    def remove(self, w: WorkerHandle) -> None:
        self.workers.pop(w.name, None)
        if w.name in self.metrics.workers:
            self.metrics.workers[w.name].alive = False

    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        raise NotImplementedError

    def tick(self, now: float) -> None:
        """Time-driven decisions (diloco's round deadline)."""

    def next_wakeup(self) -> float | None:
        """When :meth:`tick` next has something to decide (monotonic time), if ever."""
        return None

    def busy(self, name: str) -> bool:
        """Whether worker ``name`` has work outstanding (silence from an idle worker is normal)."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        return self.finished

    def params(self) -> np.ndarray:
        """The current global weights, flat (a copy)."""
        raise NotImplementedError

    def snapshot_params(self) -> np.ndarray | None:
        """The weights for an epoch's snapshot now (None: the holder fills them in later)."""
        return self.params()

    # ------------------------------------------------------------------ shared helpers
    def lr_at(self, epoch: int) -> float:
        """``vkblas train``'s schedule: cosine decay by epoch, epochs counted in samples."""
        train = self.config.train
        return cosine_lr(train.learning_rate, min(epoch, train.epochs - 1), train.epochs)

    @property
    def epoch_now(self) -> int:
        return self.processed // self.n_train

    def read_update(self, w: WorkerHandle, box: int, layout: Layout) -> dict[str, np.ndarray]:
        """Views of the update ``layout`` declares in ``w``'s mailbox ``box``."""
        return unpack(w.mailboxes[box]["bytes"], layout)

    def flat_update(self, w: WorkerHandle, box: int, layout: Layout) -> np.ndarray:
        """The gradient ``layout`` declares in ``w``'s mailbox ``box``, checked, as a flat vector (a view when it
        has the run's flat layout). Raises :class:`~vkblas.distributed.RejectedUpdateError` (not yet counted:
        pass it to :meth:`validated`)."""
        return flat_update(w.mailboxes[box]["bytes"], layout, self.layout, self.expected)

    def validated(self, update: Mapping[str, np.ndarray] | None, error: RejectedUpdateError | None = None) -> bool:
        """Check ``update`` against the model's signature; count a rejection (by reason) and return False if it
        fails."""
        try:
            if error is not None:
                raise error
            assert update is not None
            check_update(update, self.layout.signature)
            return True
        except RejectedUpdateError as e:
            self.rejections[e.reason] += 1
            return False

    def account(self, w: WorkerHandle, msg: Result, outcome: str, staleness: int | None = None) -> None:
        """Count one update of ``w`` (``accepted``, ``stale`` or ``rejected``) and what it carried."""
        self.arrived += msg.samples
        m = self.metrics.worker(w.name, w.device)
        m.count(outcome, staleness)
        m.samples += msg.samples
        m.batch_size = msg.samples // msg.steps
        self.rates.setdefault(w.name, RateMeter()).observe(msg.samples, msg.compute_s)
        self.times.setdefault(w.name, StepTimeModel()).observe(msg.samples // msg.steps, msg.compute_s / msg.steps)
        self.observe_stats(w, msg.stats)
        sums = self.epoch_sums.setdefault(msg.epoch, EpochSums())
        sums.loss += msg.loss_sum
        sums.correct += msg.correct
        sums.samples += msg.samples

    def observe_stats(self, w: WorkerHandle, stats: Any) -> None:
        m = self.metrics.worker(w.name, w.device)
        m.wall_s, m.idle_s = stats.wall_s, stats.idle_s
        m.bytes_sent, m.bytes_received = stats.bytes_sent, stats.bytes_received
        m.samples_per_s = m.samples / m.wall_s if m.wall_s > 0 else 0.0

    def progressed(self, samples: int) -> None:
        """``samples`` more have been processed; snapshot the weights at every epoch boundary crossed."""
        self.processed += samples
        while len(self.snapshots) < self.config.train.epochs and self.processed >= self.n_train * (
            len(self.snapshots) + 1
        ):
            totals = self.metrics.totals()
            self.snapshots.append(
                Snapshot(
                    epoch=len(self.snapshots) + 1,
                    params=self.snapshot_params(),
                    train_seconds=time.monotonic() - self.started_at,
                    bytes_sent=sum(w.bytes_sent for w in self.metrics.workers.values()),
                    workers_alive=totals["workers_alive"],
                )
            )

    def shares(self, total: int, names: list[str], minimum: int = 1) -> list[int]:
        """``total`` samples shared among ``names`` so that all are predicted to finish together
        (:func:`~vkblas.distributed.sizing.split_for_time`: a step costs each worker a fixed time plus a time per
        sample, both measured; even shares until every worker has been measured), the shares of graph-captured
        workers kept to few sizes (:func:`~.shares.plan_shares`)."""
        models = [self.times.setdefault(n, StepTimeModel()) for n in names]
        quanta = [self.quanta.get(n, 1) for n in names]
        out = plan_shares(total, models, quanta, [self.last_share.get(n) for n in names], minimum)
        self.last_share.update((n, k) for n, k, q in zip(names, out, quanta, strict=True) if q > 1 and k > 0)
        return out

    def share_for(self, name: str) -> int:
        """Worker ``name``'s batch when the live workers share the global batch by speed, so every worker's step
        takes about the same wall time (``async`` batches, ``diloco`` inner batches); a multiple of its quantum."""
        names = sorted(self.workers, key=lambda n: self.workers[n].index)
        if name not in names:
            names.append(name)
        models = [self.times.setdefault(n, StepTimeModel()) for n in names]
        total = self.batch_size * len(names) if self.config.batch_per_worker else self.batch_size
        exact = split_for_time(max(total, len(names)), models, 1)[names.index(name)]
        share = quantise_one(exact, self.quanta.get(name, 1), self.last_share.get(name))
        self.last_share[name] = share
        return share

    def step_seconds(self, name: str, samples: int) -> float | None:
        """Predicted seconds of a step of ``samples`` on worker ``name`` (None until measured)."""
        model = self.times.get(name)
        return model.predict(samples) if model is not None else None

    def mean_share(self) -> float:
        """The mean batch of a worker: the global batch over the workers (``batch_per_worker``: the batch size)."""
        return self.batch_size / (1 if self.config.batch_per_worker else max(1, len(self.workers)))

    def summary(self) -> dict[str, Any]:
        """Algorithm-specific figures for ``metrics.json`` (subclasses extend)."""
        return {"rejected_by_reason": dict(self.rejections)}
