"""The applier: the one job that changes the model, run by one coordinator process at a time.

Every process runs an :class:`Applier` loop; the ``leaders`` row ``applier`` says which one works (a lease it
renews every pass; when its holder dies, another takes over after ``LEADER_TTL_S``). Its pass:

1. expire leases whose heartbeats stopped (their units are open again);
2. validate: decide the units whose copies are all in (:mod:`.validator`), so agreeing results become *recorded*
   and disagreeing ones are quarantined;
3. read the *recorded* updates (uploads that passed validation, payloads in the store), in sequence order;
4. decide and **apply** them to the in-memory model with the run's rule (``async``: each on its own, judged by
   the staleness filter; ``sync``/``diloco``: a round's contributions together once the round closes, combined by
   the run's ``--aggregate`` rule, a trimmed mean by default);
5. **checkpoint**: write the new version to the store, then, in one transaction, insert the checkpoint row, mark
   those updates applied or stale, count them on their workers, publish the version, and renew the leader lease (if
   another process took the lease meanwhile, the transaction is rolled back and nothing of this pass counts).

An update is therefore applied in exactly one committed checkpoint. After a crash (``kill -9``) the next applier
loads the latest checkpoint and finds the updates it had not yet included still *recorded*: it applies them then
(the replay). Nothing recorded is lost, nothing is applied twice.

``async`` publishes every pass's version with its weights alone (what workers download) and writes the optimizer
state (the file a restart loads) at most every ``checkpoint_seconds``, at the end of the run and when the process
stops: an update is one batch's gradient, and writing the state (twice the model's size) with each one was a large
part of the coordinator's work per update. A restart then loads the newest version that has its state and
*replays* the updates applied after it from their stored payloads (kept until a state covers them), in the order
they were applied (by the version each made), to the newest published version: the same rule, order, versions and
learning rates give the same weights (checked against the published shards); it records the state there and goes
on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import numpy as np
from sqlalchemy import func, select, update

from ..algorithms import GlobalModel, StalenessFilter
from ..codec import LazyUpdate, PayloadFile, RangeDecoder
from ..protocol import ModelManifest
from ..robust import StreamedAggregate
from . import checkpoints, copies, rounds, trust
from .config import RunSpec
from .crud import current_lr, expire_leases
from .db import Database
from .models import RUN_ID, Checkpoint, Evaluation, History, Leader, Run, Unit, Update, Worker
from .store import Store
from .validator import settle_orphans, validate

log = logging.getLogger("vkblas.coordinator")
LEADER = "applier"
LEADER_TTL_S = 10.0
MAX_PER_PASS = 64  # async: at most this many updates per checkpoint, so versions keep flowing to the workers
GC_EVERY_S = 30.0
EXPIRE_EVERY_S = 1.0  # leasing expires leases too; this pass is for when nobody asks
GC_GRACE_S = 120.0  # a superseded blob stays this long (a worker may still be downloading it)
SPOOL_GRACE_S = 3600.0  # a spool file untouched this long was left by a crash (a live upload writes to it)
HISTORY_EVERY_S = 2.0  # the dashboard's curves of throughput and workers online
CHECKPOINT_SECONDS = 5.0  # async: the optimizer state at most this often (a restart replays the updates since)
EVAL_SHARE = 0.1  # the most of the wall time the evaluation may take (it shares the machine with the serving)


@dataclass
class Decision:
    seq: int
    unit_id: int | None
    worker_id: int
    samples: int
    status: str  # applied | stale
    staleness: int
    version: int  # the version that applying it made (its round's, for sync/diloco)


class Applier:
    """One process's applier loop (see the module docstring). ``step()`` is one pass (a test hook, as BOINC's
    daemons have ``--one_pass``)."""

    def __init__(
        self,
        db: Database,
        store: Store,
        spec: RunSpec,
        *,
        data: str | None = None,
        keep_checkpoints: int = 3,
        leader_ttl: float = LEADER_TTL_S,
        evaluate: bool = True,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
        eval_threads: int = 2,
        eval_share: float = EVAL_SHARE,
        on_publish: Callable[[], None] | None = None,
    ) -> None:
        if checkpoint_seconds < 0 or not 0 < eval_share <= 1 or eval_threads < 1:
            raise ValueError(
                f"checkpoint_seconds must be >= 0 (got {checkpoint_seconds}), eval_share in (0, 1] (got {eval_share}),"
                f" eval_threads >= 1 (got {eval_threads})"
            )
        self.db, self.store, self.spec = db, store, spec
        self.data, self.keep, self.leader_ttl = data, keep_checkpoints, leader_ttl
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.model: GlobalModel | None = None
        self.published = -1
        self._lead_until = 0.0  # when this process's leader lease runs out, as far as it knows
        self.last_seq = 0
        self.samples_applied = 0
        self.filter = StalenessFilter(spec.staleness_bound)
        self.evaluate_enabled = evaluate
        self.checkpoint_seconds, self.eval_threads, self.eval_share = checkpoint_seconds, eval_threads, eval_share
        self._state_version = -1  # the newest version whose optimizer state is in the store (a restart's base)
        self._state_at = 0.0
        self._eval_cost = 0.0  # wall seconds the last evaluation took
        self.on_publish = on_publish  # told after each committed version (wakes this process's held lease requests)
        self._wake = threading.Event()
        self._evaluator = None
        self._eval_pool = ThreadPoolExecutor(1, thread_name_prefix="evaluate")
        self._eval_job: Future | None = None
        self._last_eval = (-1, 0.0)  # (version, time)
        self._last_gc = time.time()
        self._last_expiry = 0.0
        self._last_history = 0.0
        self.flops_per_sample = 0.0
        self._open: list[PayloadFile] = []  # the stored results this pass reads, closed at its end

    # ------------------------------------------------------------------ leadership
    def _hold(self, now: float) -> bool:
        if now < self._lead_until - self.leader_ttl / 2:
            return True  # renewed recently: no write transaction every tick (the commit is fenced anyway)
        with self.db.session() as s:
            row = s.get(Leader, LEADER, with_for_update=True)
            if row is None:
                s.add(Leader(name=LEADER, holder=self.holder, expires_at=now + self.leader_ttl))
            elif row.holder == self.holder or row.expires_at < now:
                if row.holder != self.holder:
                    log.info("applier: %s takes over from %s", self.holder, row.holder)
                row.holder, row.expires_at = self.holder, now + self.leader_ttl
            else:
                self._lead_until = 0.0
                return False
        self._lead_until = now + self.leader_ttl
        return True

    def _renew_lead(self, s: Any, now: float) -> bool:
        """In the transaction ``s`` that commits this process's work: extend its leader lease, or find it lost
        (the fence: a process that lost the lead commits nothing)."""
        mine = update(Leader).where(Leader.name == LEADER, Leader.holder == self.holder)
        lead = s.execute(mine.values(expires_at=now + self.leader_ttl))
        return lead.rowcount == 1

    def release(self) -> None:
        """Stop: wait for an evaluation under way, record the state of the published version (a restart then has
        nothing to replay), and give up the leader lease (another process takes over at once)."""
        self._eval_pool.shutdown(wait=True)
        self._save_state(time.time())
        with self.db.session() as s:
            s.execute(update(Leader).where(Leader.name == LEADER, Leader.holder == self.holder).values(expires_at=0.0))

    # ------------------------------------------------------------------ the pass
    def step(self, now: float | None = None) -> int:
        """One pass; returns how many updates it decided (applied or dropped)."""
        now = time.time() if now is None else now
        if not self._hold(now):
            self.model = None
            return 0
        if now - self._last_expiry >= EXPIRE_EVERY_S:
            self._last_expiry = now
            with self.db.session() as s:
                s.get(Run, RUN_ID, with_for_update=True)  # leasing reads the units expiry changes
                expire_leases(s, now=now)
        if self.model is None:
            self._load()
        decided = validate(self.db, self.store, self.spec, flops_per_sample=self.flops_per_sample)
        try:
            decided += self._apply_pending(now)
        finally:
            for stored in self._open:
                stored.close()
            self._open.clear()
        if now - self._last_history >= HISTORY_EVERY_S:
            self._last_history = now
            self._record_history(now)
        self._maybe_evaluate(now)
        self._maybe_finish(now)
        if now - self._last_gc > GC_EVERY_S:
            self._last_gc = now
            self.gc(now)
        return decided

    def poke(self) -> None:
        """Run the next pass now (an update was recorded in this process), not at the next tick."""
        self._wake.set()

    def run(self, stop: threading.Event, tick: float) -> None:
        while not stop.is_set():
            try:
                busy = self.step()
            except Exception:  # a failed pass must not end the loop; its transaction was rolled back
                log.exception("applier pass failed; retrying")
                self.model, busy = None, 0
                stop.wait(1.0)
            if not busy:
                self._wake.wait(tick)  # a tick, or less when poked (stop is seen within a tick)
                self._wake.clear()

    def _load(self) -> None:
        with self.db.read_session() as s:
            latest = s.scalars(select(Checkpoint).order_by(Checkpoint.version.desc()).limit(1)).one()
            cp = s.scalars(
                select(Checkpoint)
                .where(Checkpoint.state_sha256.is_not(None))
                .order_by(Checkpoint.version.desc())
                .limit(1)
            ).one()
            manifest = ModelManifest.model_validate_json(cp.manifest)
            self.last_seq, self.samples_applied = cp.last_seq, cp.samples_applied
            pending = s.scalar(select(func.count()).select_from(Update).where(Update.status == "recorded"))
            # the updates that made the versions after the newest state (published with their weights alone), in
            # the order they were applied (by the version each made: a held update is applied after later seqs)
            redo = list(
                s.scalars(
                    select(Update)
                    .where(Update.status == "applied", Update.applied_version > cp.version)
                    .order_by(Update.applied_version, Update.seq)
                )
            )
            total = s.get(Run, RUN_ID).samples_total  # type: ignore[union-attr]
            latest_version, latest_manifest = latest.version, latest.manifest
        self.model = checkpoints.read(self.store, self.spec, manifest, cp.state_sha256)  # type: ignore[arg-type]
        self.flops_per_sample = trust.flops_per_sample(sum(math.prod(v) for v in self.model.shapes.values()))
        self.published = self._state_version = self.model.version
        self._state_at = time.time()
        if redo:
            self._replay(redo, total, latest_version, ModelManifest.model_validate_json(latest_manifest))
        log.info("applier: loaded version %d (%d recorded updates to apply)", self.model.version, pending)

    def _replay(self, redo: list[Update], total: int, version: int, manifest: ModelManifest) -> None:
        """Re-apply the updates of the versions published after the newest state (see the module docstring),
        check the result against the newest published version, and record its state."""
        model = self.model
        assert model is not None
        for _, group in groupby(redo, key=lambda u: u.applied_version):
            batch = list(group)
            try:
                decided = (
                    self._apply_async(batch, total)
                    if self.spec.algorithm == "async"
                    else self._apply_round(batch, total)
                )
            finally:  # each version's payload files closed at once: a replay may re-apply thousands of updates
                for stored in self._open:
                    stored.close()
                self._open.clear()
            wrong = [
                d
                for d, u in zip(decided, batch, strict=True)
                if d.status != "applied" or d.version != u.applied_version
            ]
            if wrong:
                raise RuntimeError(f"replay: update {wrong[0].seq} does not re-apply to the version it made")
        if model.version != version:
            raise RuntimeError(f"replay reached version {model.version}, the newest published is {version}")
        published = checkpoints.StoredWeights(self.store, manifest)  # compared a tensor at a time: no whole copy
        again = None
        if any(not np.array_equal(published[k], model.param(k)) for k in model.names):
            # the same rule on the same inputs: only a changed numpy could round otherwise. The replayed weights
            # are the truth from here; workers fetch the new shards (content-addressed) with their next lease
            log.warning("applier: replayed version %d differs in its last bits from the published one", version)
            again = checkpoints.write_weights(self.store, model)
        self.published = model.version
        self._save_state(time.time(), manifest=again)
        log.info("applier: replayed %d updates to version %d", len(redo), version)

    def _save_state(self, now: float, manifest: ModelManifest | None = None) -> None:
        """Record the optimizer state of the published version, if it has none yet (fenced by the leader lease)."""
        model = self.model
        if model is None or self._state_version == self.published or model.version != self.published:
            return
        state_sha = checkpoints.write_state(self.store, model)
        values: dict[str, object] = {"state_sha256": state_sha}
        if manifest is not None:
            values["manifest"] = manifest.model_dump_json()
        with self.db.session() as s:
            if not self._renew_lead(s, now):
                return  # another process leads: it replays from the state it finds
            s.execute(update(Checkpoint).where(Checkpoint.version == model.version).values(**values))
        self._state_version, self._state_at = model.version, now

    # ------------------------------------------------------------------ deciding and applying
    def _apply_pending(self, now: float) -> int:
        assert self.model is not None
        with self.db.read_session() as s:
            run = s.get(Run, RUN_ID)
            assert run is not None
            pending = s.scalars(select(Update).where(Update.status == "recorded").order_by(Update.seq)).all()
            if not pending:
                return 0
            if self.spec.algorithm == "async":
                batch = list(pending[:MAX_PER_PASS])
            else:
                batch = self._closed_round(s, run, list(pending), now)
            total = run.samples_total
        if not batch:
            return 0
        cpu0 = time.thread_time()
        decisions = (
            self._apply_async(batch, total) if self.spec.algorithm == "async" else self._apply_round(batch, total)
        )
        cpu = time.thread_time() - cpu0
        self._checkpoint(decisions, now, cpu)
        return len(decisions)

    def _closed_round(self, s, run: Run, pending: list[Update], now: float) -> list[Update]:  # type: ignore[no-untyped-def]
        """sync/diloco: the contributions of the current round once it closes, else nothing (:func:`.rounds.closed`)."""
        return rounds.closed(s, self.spec, run, self.model.version, pending, now)  # type: ignore[union-attr]

    def _stored(self, u: Update) -> PayloadFile:
        """A recorded result's stored file (validated at upload; its hash is checked here, so the bytes are those
        that passed), open until the end of this pass."""
        stored = self.store.open_payload(u.payload_sha256)
        self._open.append(stored)
        return stored

    def _payload(self, u: Update) -> LazyUpdate:
        """A result decoded a tensor at a time as the optimizer steps through it (async)."""
        stored = self._stored(u)
        return LazyUpdate(stored, stored.meta)

    def _source(self, u: Update) -> Callable[[str, int, int], np.ndarray]:
        """A block of one tensor of a result at a time, read from its stored file and decoded (sync/diloco)."""
        stored = self._stored(u)
        return RangeDecoder(stored.get, stored.meta, stored).values

    def _apply_async(self, batch: list[Update], total: int) -> list[Decision]:
        model, out = self.model, []
        assert model is not None
        for u in batch:
            j = self.filter.judge(u.base_version, model.version)
            if j.accepted:
                model.set_lr(current_lr(self.spec, self.samples_applied, total))
                model.apply_gradient(self._payload(u), lr_scale=j.scale)
                self.samples_applied += u.samples
            status = "applied" if j.accepted else "stale"
            out.append(Decision(u.seq, u.unit_id, u.worker_id, u.samples, status, j.staleness, model.version))
        return out

    def _apply_round(self, batch: list[Update], total: int) -> list[Decision]:
        """One round: the sample-weighted combination of its contributions by the run's rule (``mean``, or the
        coordinate-wise ``trimmed-mean``); a late one (computed from an older version) counts with weight
        ``samples / (1 + s)`` if its staleness ``s`` is within the bound, else is dropped; the step's rate is scaled
        by the mean of those factors, so a round of late results alone moves the model less."""
        model = self.model
        assert model is not None
        judged = [(u, self.filter.judge(u.base_version, model.version)) for u in batch]
        used = [(u, j) for u, j in judged if j.accepted]
        if used:
            # tensor by tensor, from the stored payloads: the round holds one extra tensor per result, not one
            # model per result (docs/PROTOCOL.md, "Applying a round")
            sources = [self._source(u) for u, _ in used]
            weights = [u.samples * j.scale for u, j in used]
            mean = StreamedAggregate(sources, weights, model.shapes, self.spec.aggregate, self.spec.trim)
            scale = sum(weights) / sum(u.samples for u, _ in used)
            if self.spec.algorithm == "diloco":
                model.apply_pseudo_gradient(mean, lr_scale=scale)
            else:
                model.set_lr(current_lr(self.spec, self.samples_applied, total))
                model.apply_gradient(mean, lr_scale=scale)
            self.samples_applied += sum(u.samples for u, _ in used)
        return [
            Decision(
                u.seq,
                u.unit_id,
                u.worker_id,
                u.samples,
                "applied" if j.accepted else "stale",
                j.staleness,
                model.version,
            )
            for u, j in judged
        ]

    def _checkpoint(self, decisions: list[Decision], now: float, cpu: float) -> None:
        model = self.model
        assert model is not None
        applied = [d for d in decisions if d.status == "applied"]
        stepped = model.version != self.published  # all dropped: no new version, only the decisions to commit
        # rounds are few and large: each has its state; async's state is written at most every checkpoint_seconds
        full = stepped and (self.spec.algorithm != "async" or now - self._state_at >= self.checkpoint_seconds)
        if stepped:
            manifest = checkpoints.write_weights(self.store, model)
            state_sha = checkpoints.write_state(self.store, model) if full else None
        try:
            with self.db.session() as s:
                if not self._renew_lead(s, now):
                    raise _LostLeadError()
                run = s.get(Run, RUN_ID, with_for_update=True)
                assert run is not None
                if stepped:
                    s.add(
                        Checkpoint(
                            version=model.version,
                            manifest=manifest.model_dump_json(),
                            state_sha256=state_sha,
                            last_seq=max(d.seq for d in decisions),
                            samples_applied=self.samples_applied,
                            created_at=now,
                        )
                    )
                counts: dict[int, list[int]] = {}  # worker id: [accepted, stale]
                for d in decisions:
                    applied_version = d.version if d.status == "applied" else None
                    s.execute(
                        update(Update)
                        .where(Update.seq == d.seq, Update.status == "recorded")
                        .values(status=d.status, staleness=d.staleness, applied_version=applied_version)
                    )
                    c = counts.setdefault(d.worker_id, [0, 0])
                    c[0], c[1] = c[0] + int(d.status == "applied"), c[1] + int(d.status == "stale")
                # a stale unit's samples are trained again from the current model (units before workers, as
                # every transaction takes them)
                for uid in sorted({d.unit_id for d in decisions if d.status == "stale" and d.unit_id is not None}):
                    unit = s.get(Unit, uid, with_for_update=True)
                    if unit is not None:
                        copies.reissue(s, unit)
                for wid in sorted(counts):  # worker rows in id order, as every transaction takes them
                    s.execute(  # credit is the validator's (validated work), not the applier's
                        update(Worker)
                        .where(Worker.id == wid)
                        .values(accepted=Worker.accepted + counts[wid][0], stale=Worker.stale + counts[wid][1])
                    )
                run.version, run.samples_applied = model.version, self.samples_applied
                run.round_opened_at = now
                run.apply_cpu_s += cpu
                run.updates_applied += len(applied)
        except _LostLeadError:
            log.warning("applier: lost the leader lease; dropping this pass")
            self.model, self._lead_until = None, 0.0
            return
        self.last_seq = max(d.seq for d in decisions)
        self.published = model.version
        if full:
            self._state_version, self._state_at = model.version, now
        if stepped and self.on_publish is not None:
            self.on_publish()

    # ------------------------------------------------------------------ evaluation, end, garbage
    def _maybe_evaluate(self, now: float, force: bool = False) -> None:
        """Evaluate the current version at most every ``eval_seconds``, in a thread of its own, so that closing
        rounds and applying updates never wait for the test set (``force``: now, and wait for it)."""
        if not self.evaluate_enabled or self.model is None:
            return
        running = self._eval_job is not None and not self._eval_job.done()
        version, when = self._last_eval
        # every eval_seconds, but no more than eval_share of the time: a slow evaluation spaces the next ones out
        every = max(self.spec.eval_seconds, self._eval_cost / self.eval_share)
        if not force and (running or version == self.model.version or now - when < every):
            return
        if running:
            self._eval_job.result()  # type: ignore[union-attr]
        self._last_eval = (self.model.version, now)
        try:
            if self._evaluator is None:
                from .evaluate import Evaluator

                self._evaluator = Evaluator(self.spec, self.data, threads=self.eval_threads)
            # the weights copied into the evaluator's model here, a tensor at a time, while no evaluation runs:
            # its model is the snapshot, so evaluating costs no extra copy of the weights beside the next round
            self._evaluator.load(self.model.param, self.model.names)
        except Exception:
            log.exception("applier: evaluation of version %d failed", self.model.version)
            return
        job = (self.model.version, self.samples_applied, now)
        self._eval_job = self._eval_pool.submit(self._evaluate, *job)
        if force:
            self._eval_job.result()

    def _evaluate(self, version: int, samples: int, now: float) -> None:
        try:
            assert self._evaluator is not None
            t0 = time.perf_counter()
            loss, acc = self._evaluator.run()
            self._eval_cost = time.perf_counter() - t0
            with self.db.session() as s:
                s.add(Evaluation(version=version, samples=samples, accuracy=acc, loss=loss, created_at=now))
            log.info("applier: version %d test accuracy %.2f%%", version, 100 * acc)
        except Exception:  # an evaluation that failed is logged; training goes on
            log.exception("applier: evaluation of version %d failed", version)

    def _maybe_finish(self, now: float) -> None:
        with self.db.read_session() as s:
            run = s.get(Run, RUN_ID)
            assert run is not None
            if run.state == "finished" or run.samples_leased < run.samples_total:
                return
            unfinished = s.scalar(select(func.count()).select_from(Unit).where(Unit.status != "done"))
            pending = s.scalar(select(func.count()).select_from(Update).where(Update.status.in_(("recorded", "held"))))
        if unfinished or pending:
            # all handed out, something not in: a unit whose copy nobody online may compute would wait for good
            if settle_orphans(self.db, self.spec, now=now):
                self._maybe_finish(now)  # it gave units up: perhaps the last ones (none is given up twice)
            return
        if self._eval_job is not None:  # an evaluation still running (perhaps the final version's) lands first
            self._eval_job.result()
        self._maybe_evaluate(now, force=self._last_eval[0] != self.model.version)  # type: ignore[union-attr]
        self._save_state(now)
        with self.db.session() as s:
            s.execute(update(Run).where(Run.id == RUN_ID).values(state="finished"))
        log.info("applier: the run is finished")

    def _record_history(self, now: float) -> None:
        with self.db.session() as s:
            run = s.get(Run, RUN_ID)
            assert run is not None
            validated = s.scalar(
                select(func.coalesce(func.sum(Update.samples), 0)).where(
                    Update.status.in_(("recorded", "applied", "stale", "duplicate"))
                )
            )
            online = s.scalar(
                select(func.count()).select_from(Worker).where(Worker.last_seen > now - self.spec.lease_seconds)
            )
            s.add(History(created_at=now, version=run.version, samples_applied=run.samples_applied,
                          samples_validated=int(validated), workers_online=online))  # fmt: skip

    def gc(self, now: float) -> int:
        """Delete store files nothing needs any more: not a data shard, not in the newest ``keep`` checkpoints, not
        the payload of an update still to apply, and older than ``GC_GRACE_S``."""
        with self.db.read_session() as s:
            run = s.get(Run, RUN_ID)
            assert run is not None
            keep = {r["sha256"] for r in json.loads(run.data_manifest)}
            versions = set(s.scalars(select(Checkpoint.version).order_by(Checkpoint.version.desc()).limit(self.keep)))
            # copies of a unit still to compute need the version their unit is pinned to
            versions.update(
                s.scalars(select(Unit.base_version).where(Unit.status != "done", Unit.base_version.is_not(None)))
            )
            # the newest state (a restart's base) and the payloads of every update after it (its replay)
            base = s.scalars(
                select(Checkpoint)
                .where(Checkpoint.state_sha256.is_not(None))
                .order_by(Checkpoint.version.desc())
                .limit(1)
            ).one()
            versions.add(base.version)
            for cp in s.scalars(select(Checkpoint).where(Checkpoint.version.in_(versions))):
                if cp.state_sha256 is not None:
                    keep.add(cp.state_sha256)
                keep.update(ref.sha256 for ref in ModelManifest.model_validate_json(cp.manifest).shards)
            keep.update(s.scalars(select(Update.payload_sha256).where(Update.status == "recorded")))
            keep.update(s.scalars(select(Update.payload_sha256).where(Update.applied_version > base.version)))
        removed = self.store.stale_temporaries(now - SPOOL_GRACE_S)  # spools of uploads cut off by a crash
        for sha in self.store.all():
            if sha in keep:
                continue
            try:
                if now - self.store.path(sha).stat().st_mtime < GC_GRACE_S:
                    continue
            except FileNotFoundError:
                continue
            self.store.delete(sha)
            removed += 1
        return removed


class _LostLeadError(Exception):
    pass
