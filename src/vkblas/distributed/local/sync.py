"""Synchronous data parallel: step k's batch (the k-th batch of ``vkblas train``'s shuffled order) is cut into
shares that every worker is predicted to finish at the same moment, from its measured time per step (a fixed cost
plus a cost per sample: :func:`~vkblas.distributed.sizing.split_for_time`; quantised for graph-captured workers,
:mod:`.shares`); each worker computes the mean-loss gradient of its share, the runner checks every gradient, and
the accepted ones are averaged weighted by share size — the whole batch's gradient, up to fp32 rounding — and
stepped once.

Who steps (``sync_apply``), each with the same host optimizer (:class:`~.flatopt.FlatOptimizer`):

* ``replicated`` (the default): every worker holds the whole model and its optimizer state, and steps it from the
  same averaged gradient: the same bits everywhere, whatever device computed the gradients. A step is one message
  each way: the runner's ``Step`` says "apply step k-1 with these gradients, then compute your share of step k";
  the worker's ``Ready`` says its gradient is in its mailbox. Gradients alternate between two mailboxes per worker
  (step parity), so a worker writing step k's gradient never overwrites one that another is still averaging: a
  step ends only once every worker that applied the previous one has answered, a worker without a share included
  (``Applied``; see :attr:`~.protocol.Step.answered`), however far behind the others a loaded machine leaves it.
  When the runner needs the weights (an epoch's snapshot, the end) or a worker joins, the lowest-numbered worker
  exports its model into a shared buffer after its step.
* ``sharded``: every worker steps its slice of the parameters in shared memory (:mod:`.sharded`): the step's cost
  is divided, but each step takes two rounds of messages (gradients in; slices written).
* ``holder``: the runner steps the model while the workers wait.

A worker that dies during a step: the step is planned again (``attempt + 1``) over the survivors, from version k,
which nobody has lost. A joining worker takes part from the next step (``replicated``: once an export of the
current version exists). A rejected gradient's share is left out of that step's average.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..validation import RejectedUpdateError
from .context import WorkerContext
from .flatopt import FlatOptimizer, FlatState, state_keys, weighted_sum
from .handle import WorkerHandle
from .holder import Holder
from .protocol import Applied, Contributions, Ready, Reduce, Step
from .sharded import buffered, copy_state, shard_bounds, state_spec, step_shard
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
    """What the three modes share: a step's shares, its gradients in and checked, re-plans after a death. A mode
    says what a worker is told (:meth:`_message`), what happens once every reply is in (:meth:`_replies_in`) and
    at the end of the data (:meth:`_last`)."""

    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train)
        self.keys = state_keys(config.train.optimizer)
        self.block = SharedArrays.create(state_spec(layout.size, self.keys))
        self.block["params"][0] = initial
        self.version = 0
        self.step, self.attempt = -1, 0
        self.batch: Segment | None = None
        self.phase: str | None = None  # "grad", "apply", "last" or None (waiting for a worker)
        self.members: list[str] = []
        self.pending: set[str] = set()
        self.results: dict[str, tuple[Ready, np.ndarray | None]] = {}
        self.replans = 0

    @property
    def blocks(self) -> list[SharedArrays]:
        return [self.block]

    def start(self) -> None:
        super().start()
        self._next_step()

    def busy(self, name: str) -> bool:
        return name in self.pending

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
            self._last() if self.phase == "last" else self._plan()

    # ------------------------------------------------------------------ a step
    def _next_step(self) -> None:
        self.step += 1
        self.attempt = 0
        self.batch = self.stream.take(self.batch_size)
        if self.batch is None:
            self._last()
            return
        self._plan()

    def _eligible(self, name: str) -> bool:
        """Whether worker ``name`` can take part in the step being planned."""
        return True

    def _plan(self) -> None:
        assert self.batch is not None
        self.members = [n for n in sorted(self.workers, key=lambda n: self.workers[n].index) if self._eligible(n)]
        self.results = {}
        if not self.members:
            self.phase, self.pending = None, set()  # waits for a worker to join (the runner fails if none can)
            return
        # a worker too slow to help gets no share; every PROBE steps each gets one, so it keeps being measured
        minimum = 1 if self.step % PROBE == 0 and self.batch.size >= len(self.members) else 0
        shares = cut(self.batch, self.shares(self.batch.size, self.members, minimum))
        self.pending = set()
        self.phase = "grad"
        for name, share in zip(self.members, shares, strict=True):
            msg = self._message(name, share)
            self.workers[name].send(msg)
            if msg.answered:  # with or without a share: see Step.answered
                self.pending.add(name)
        if not self.pending:  # nobody computes and nobody needs to answer (cannot happen with a batch)
            self._replies_in()

    def _message(self, name: str, share: Segment | None) -> Step:
        raise NotImplementedError

    def on_message(self, w: WorkerHandle, msg: Any) -> None:
        if getattr(msg, "step", None) != self.step or getattr(msg, "attempt", None) != self.attempt:
            return  # from an abandoned attempt
        if w.name not in self.pending or not isinstance(msg, (Ready, Applied)):
            return
        self.pending.discard(w.name)
        if isinstance(msg, Ready):
            self.results[w.name] = (msg, self._check(w, msg))
        else:
            self.observe_stats(w, msg.stats)
        if not self.pending:
            self._replies_in()

    def _check(self, w: WorkerHandle, msg: Ready) -> np.ndarray | None:
        """The worker's gradient as a flat vector (a view of its mailbox), or None if rejected (counted)."""
        try:
            return self.flat_update(w, self.step % 2, msg.layout)
        except RejectedUpdateError as e:
            self.validated(None, e)
            return None

    def _accepted(self) -> list[tuple[str, Ready, np.ndarray]]:
        return [(n, msg, vec) for n, (msg, vec) in self.results.items() if vec is not None]

    def _contributions(self) -> Contributions:
        """The accepted gradients of this step as (mailbox, samples), for the workers to average."""
        box = self.step % 2
        return tuple((self.workers[n].mailboxes[box].handle, float(msg.samples)) for n, msg, _ in self._accepted())

    def _replies_in(self) -> None:
        raise NotImplementedError

    def _last(self) -> None:
        """The data is used up."""
        self.phase, self.finished = None, True

    def _finish(self, applied: bool) -> None:
        for name, (msg, vec) in self.results.items():
            w = self.workers.get(name)
            if w is not None:
                self.account(w, msg, "accepted" if vec is not None else "rejected", 0 if vec is not None else None)
        if applied:
            self.version += 1
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


class ReplicatedSync(SyncHolder):
    """``replicated``: every worker steps its own copy; the runner only plans, checks and relays."""

    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train, initial)
        self.at_version: dict[str, int] = {}  # the version each worker's copy is at once it reads our messages
        self.carry: Contributions = ()  # the previous step's accepted gradients, applied with the next Step
        self.carry_lr = 0.0
        self.exported = (0, 0)  # (buffer, version) of the last complete export: the initial weights at first
        self.export_asked: tuple[str, int] | None = None  # (worker, buffer) of an export asked in this attempt
        self.unfilled: list[Any] = []  # snapshots waiting for the weights of their version

    def params(self) -> np.ndarray:
        return self.block["params"][self.exported[0]].copy()

    def snapshot_params(self) -> np.ndarray | None:
        return self.params() if self.exported[1] == self.version else None  # else filled by the next export

    def progressed(self, samples: int) -> None:
        before = len(self.snapshots)
        super().progressed(samples)
        new = [s for s in self.snapshots[before:] if s.params is None]
        self.unfilled.extend(new)

    def _eligible(self, name: str) -> bool:
        if name in self.at_version:
            return True
        return self.exported[1] in (self.version, self.version - 1)  # a joiner: loads an export, then catches up

    def _wants_export(self) -> bool:
        """A snapshot waits for its weights, or a worker waits to join."""
        return bool(self.unfilled) or any(n not in self.members for n in self.workers)

    def _message(self, name: str, share: Segment | None) -> Step:
        v = self.version
        load, at = None, self.at_version.get(name)
        if at is None:
            load, at = self.exported
        apply = self.carry if at == v - 1 else ()
        if at not in (v, v - 1) or (at == v - 1 and not apply):
            raise RuntimeError(f"sync: worker {name} holds version {at}, the step needs {v}")
        export = None
        if name == self.members[0] and self._wants_export():
            export = 1 - self.exported[0]  # the other buffer: a joiner may be loading this one
            self.export_asked = (name, export)
        self.at_version[name] = v
        return Step(self.step, self.attempt, v, share, load, apply, self.carry_lr, export)

    def _plan(self) -> None:
        self.export_asked = None
        super()._plan()

    def remove(self, w: WorkerHandle) -> None:
        self.at_version.pop(w.name, None)
        super().remove(w)

    def _replies_in(self) -> None:
        self._confirm_export()
        if self.phase == "last":
            self.phase, self.finished = None, True
            return
        accepted = self._accepted()
        self.carry = self._contributions()
        self.carry_lr = self.lr_at(self.batch.epoch)  # type: ignore[union-attr]
        self._finish(applied=bool(accepted))

    def _confirm_export(self) -> None:
        if self.export_asked is None:
            return
        name, buf = self.export_asked
        self.export_asked = None
        self.exported = (buf, self.at_version.get(name, self.version))
        for snap in self.unfilled:
            snap.params = self.params()
        self.unfilled = []

    def _last(self) -> None:
        """The data is used up: the lowest-numbered worker applies the last step and exports the final weights."""
        alive = [n for n in sorted(self.workers, key=lambda n: self.workers[n].index) if n in self.at_version]
        if self.exported[1] == self.version and not self.unfilled:
            self.phase, self.finished = None, True
            return
        if not alive:
            self.phase, self.pending = None, set()
            return
        self.members = alive[:1]
        self.results = {}
        self.phase = "last"
        name = self.members[0]
        at = self.at_version[name]
        apply = self.carry if at == self.version - 1 else ()
        self.export_asked = (name, 1 - self.exported[0])
        self.at_version[name] = self.version
        self.workers[name].send(
            Step(self.step, self.attempt, self.version, None, None, apply, self.carry_lr, self.export_asked[1])
        )
        self.pending = {name}


class ShardedSync(SyncHolder):
    """``sharded``: each worker steps its slice of the shared buffers (two rounds of messages per step)."""

    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train, initial)
        self.read = 0

    def params(self) -> np.ndarray:
        return self.block["params"][self.read].copy()

    def _message(self, name: str, share: Segment | None) -> Step:
        return Step(self.step, self.attempt, self.version, share, self.read if share is not None else None)

    def _replies_in(self) -> None:
        if self.phase == "apply":  # every slice written
            self.read = 1 - self.read
            self._finish(applied=True)
            return
        contributions = self._contributions()
        if not contributions:
            self._finish(applied=False)
            return
        write, lr = 1 - self.read, self.lr_at(self.batch.epoch)  # type: ignore[union-attr]
        shards = shard_bounds(self.layout.size, len(self.members))
        for name, shard in zip(self.members, shards, strict=True):
            msg = Reduce(self.step, self.attempt, contributions, self.version, self.read, write, lr, shard)
            self.workers[name].send(msg)
        self.pending = set(self.members)
        self.phase = "apply"


class HolderSync(SyncHolder):
    """``holder``: the runner steps the model and publishes it in the shared buffers; the workers wait."""

    def __init__(self, config: Any, layout: Any, n_train: int, initial: np.ndarray) -> None:
        super().__init__(config, layout, n_train, initial)
        self.opt = FlatOptimizer.training(config.train.optimizer, layout.size)
        self.model = self.opt.fresh(initial.copy())
        self.mean = np.empty(layout.size, np.float32)
        self.scratch = np.empty(layout.size, np.float32)
        self.read = 0

    def params(self) -> np.ndarray:
        return self.model.params.copy()

    def _message(self, name: str, share: Segment | None) -> Step:
        return Step(self.step, self.attempt, self.version, share, self.read if share is not None else None)

    def _replies_in(self) -> None:
        accepted = self._accepted()
        if not accepted:
            self._finish(applied=False)
            return
        grads = [(vec, float(msg.samples)) for _, msg, vec in accepted]
        self.opt.step(self.model, weighted_sum(grads, self.mean, self.scratch), self.lr_at(self.batch.epoch))  # type: ignore[union-attr]
        self.read = 1 - self.read
        np.copyto(self.block["params"][self.read], self.model.params)
        self._finish(applied=True)


MODES: dict[str, type[SyncHolder]] = {"replicated": ReplicatedSync, "sharded": ShardedSync, "holder": HolderSync}


def sync_holder(config: Any, layout: Any, n_train: int, initial: np.ndarray) -> SyncHolder:
    """The runner's side of ``config.sync_apply``."""
    return MODES[config.sync_apply](config, layout, n_train, initial)


# ---------------------------------------------------------------------------------------------------- worker
class Mailboxes:
    """Every worker's mailboxes as float32 vectors of the run's size, attached on first use."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.size = ctx.layout.size
        self.own = {b.handle.name for b in ctx.blocks[1:]}
        self.vectors = {b.handle.name: v for b, v in zip(ctx.blocks[1:], ctx.vectors, strict=True)}

    def __getitem__(self, handle: Any) -> np.ndarray:
        vec = self.vectors.get(handle.name)
        if vec is None:
            vec = self.vectors[handle.name] = self.ctx.attach(handle)["bytes"][: 4 * self.size].view(np.float32)
        return vec


class SyncWorker:
    """A worker's side of every mode: it answers ``Step`` (load / apply / export / compute) and ``Reduce``."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        cfg, n = ctx.config, ctx.layout.size
        self.opt = FlatOptimizer.training(cfg.train.optimizer, n)
        self.keys = len(self.opt.keys)
        self.block = ctx.board_block  # the parameter and optimizer-state buffers
        self.boxes = Mailboxes(ctx)
        self.mean = np.empty(n, np.float32)
        self.scratch = np.empty(n, np.float32)
        self.model: FlatState | None = None  # replicated: this worker's copy of the model

    def run(self) -> None:
        ctx = self.ctx
        while True:
            msg = ctx.recv()
            t0 = time.perf_counter()
            if isinstance(msg, Step):
                self.prepare(msg)
                if msg.segment is not None:
                    self.compute(msg, t0)
                elif msg.answered:
                    ctx.send(Applied(msg.step, msg.attempt, ctx.stats()))
            elif isinstance(msg, Reduce):
                self.reduce(msg)

    def _mean(self, contributions: Contributions, lo: int = 0, hi: int | None = None) -> np.ndarray:
        hi = self.ctx.layout.size if hi is None else hi
        grads = [(self.boxes[h][lo:hi], w) for h, w in contributions]
        self.ctx.bytes_received += 4 * (hi - lo) * sum(1 for h, _ in contributions if h.name not in self.boxes.own)
        return weighted_sum(grads, self.mean[: hi - lo], self.scratch[: hi - lo])

    def prepare(self, msg: Step) -> None:
        """Steps 1-3 of a ``Step``: load, apply, export."""
        ctx = self.ctx
        replicated = ctx.config.sync_apply == "replicated"
        if msg.load is not None and not replicated:
            ctx.load(self.block["params"][msg.load])  # the weights the runner or the shards published
            return
        if msg.load is not None:
            version = msg.version - (1 if msg.apply else 0)
            src = buffered(self.block, msg.load, self.keys, version)
            self.model = FlatState(src.params.copy(), tuple(a.copy() for a in src.state), version)
        if msg.apply:
            if self.model is None:
                raise RuntimeError(f"sync step {msg.step}: asked to apply a step to a model this worker never loaded")
            self.opt.step(self.model, self._mean(msg.apply), msg.lr)
        if msg.load is not None or msg.apply:
            assert self.model is not None
            ctx.load(self.model.params, count=False)
        if msg.export is not None:
            assert self.model is not None
            copy_state(self.model, buffered(self.block, msg.export, self.keys))

    def compute(self, msg: Step, t0: float) -> None:
        ctx = self.ctx
        assert msg.segment is not None
        box = msg.step % 2
        loss_sum, correct = ctx.gradient(msg.segment, box)
        layout = ctx.put_gradient(box, lambda v=msg.version: v)
        fields = ctx.result(msg.segment, loss_sum, correct, time.perf_counter() - t0, layout)
        ctx.send(Ready(**fields, step=msg.step, attempt=msg.attempt))

    def reduce(self, msg: Reduce) -> None:
        """``sharded``: step this worker's slice."""
        lo, hi = msg.shard
        grad = self._mean(msg.contributions, lo, hi)
        step_shard(self.opt, self.block, msg.shard, grad, msg.version, msg.read, msg.write, msg.lr)
        self.ctx.bytes_sent += 4 * (hi - lo)
        self.ctx.send(Applied(msg.step, msg.attempt, self.ctx.stats()))


def run_worker(ctx: WorkerContext) -> None:
    SyncWorker(ctx).run()
