"""The validator: one job of the leader's pass (BOINC's validator daemon), deciding units whose copies are in.

For every unit in status ``checking`` it decodes the held results, compares them (``agreement.judge``, within the
run's tolerance for its kind of work and codec) and, in one transaction:

* a group of agreeing results: the first becomes ``recorded`` (the applier applies it), the others ``duplicate``
  (the same work, applied once); their workers gain reputation and credit. Results outside the group are
  ``invalid``: quarantined, never applied, their workers lose reputation and pending credit;
* no agreement: one more copy is wanted (the quorum is raised and the unit re-issued), up to ``MAX_COPIES``;
  after that the results are ``inconclusive`` (not applied, no one blamed) and the unit is dropped.

:func:`settle_orphans` drops the same way a unit whose next copy nobody online may compute, once the data is all
handed out and nothing runs: without it a run of two workers whose copies disagreed never finished.
"""

from __future__ import annotations

import logging

from sqlalchemy import exists, func, select, update

from ..agreement import Verdict, judge, tolerance
from ..codec import LazyUpdate, PayloadFile
from . import trust
from .config import RunSpec
from .copies import MAX_COPIES
from .db import Database
from .models import RUN_ID, Lease, Run, Unit, Update, Worker
from .store import Store

log = logging.getLogger("vkblas.coordinator")
MAX_PER_PASS = 64
ORPHAN_LEASES = 2  # lease lengths without a copy leased, at the end of the data, before a unit is given up


def run_tolerance(spec: RunSpec) -> float:
    return spec.tolerance if spec.tolerance is not None else tolerance(spec.kind, spec.codec)


def _payload(store: Store, u: Update) -> tuple[PayloadFile, LazyUpdate]:
    """A held result, read from its stored file and decoded a tensor at a time when compared: judging a unit holds
    a tensor or two of its results decoded, never a whole one (the file's hash is checked first)."""
    stored = store.open_payload(u.payload_sha256)
    return stored, LazyUpdate(stored, stored.meta)


def _distance_to(verdict: Verdict, canonical: int, other: int) -> float | None:
    if canonical == other:
        return 0.0
    return verdict.distances.get((canonical, other), verdict.distances.get((other, canonical)))


def validate(
    db: Database,
    store: Store,
    spec: RunSpec,
    *,
    flops_per_sample: float,
) -> int:
    """One pass; returns how many units it decided (or re-issued)."""
    with db.read_session() as s:
        units = s.scalars(select(Unit.id).where(Unit.status == "checking").order_by(Unit.id).limit(MAX_PER_PASS)).all()
        held = {
            uid: s.scalars(
                select(Update).where(Update.unit_id == uid, Update.status == "held").order_by(Update.seq)
            ).all()
            for uid in units
        }
    tol = run_tolerance(spec)
    for uid in units:
        results = held[uid]
        opened: dict[int, tuple[PayloadFile, LazyUpdate]] = {}
        try:
            for u in results:  # inside the try: the ones opened are closed if a later one fails to open
                opened[u.seq] = _payload(store, u)
            verdict = judge([(seq, update) for seq, (_, update) in opened.items()], tol)
        finally:
            for stored, _ in opened.values():
                stored.close()
        with db.session() as s:
            unit = s.get(Unit, uid, with_for_update=True)
            if unit is None or unit.status != "checking":
                continue  # another leader decided it meanwhile
            by_seq = {u.seq: u for u in results}
            if verdict.need_more:
                if unit.results >= MAX_COPIES:
                    _set(s, list(by_seq), "inconclusive")
                    unit.status = "done"
                    log.warning("validator: unit %d: %d results, no two agree; dropped", uid, len(results))
                else:
                    unit.quorum, unit.status = unit.quorum + 1, "open"
                continue
            canonical = verdict.valid[0]
            for wid in sorted({u.worker_id for u in results}):  # worker rows in id order, as everywhere
                s.get(Worker, wid, with_for_update=True)
            for seq, u in by_seq.items():
                status = "recorded" if seq == canonical else "duplicate" if seq in verdict.valid else "invalid"
                dist = _distance_to(verdict, canonical, seq)
                s.execute(
                    update(Update)
                    .where(Update.seq == seq, Update.status == "held")
                    .values(status=status, distance=dist)
                )
                w = s.get(Worker, u.worker_id)  # locked above
                assert w is not None
                if status == "invalid":
                    trust.disagreed(w)
                    log.info("validator: unit %d: worker %d's result is invalid (distance %.3g > %.3g)", uid, w.id,
                             dist or -1.0, tol)  # fmt: skip
                else:
                    trust.agreed(w, u.samples, u.samples * flops_per_sample)
            unit.status = "done"
    return len(units)


def _set(s, seqs: list[int], status: str) -> None:  # type: ignore[no-untyped-def]
    s.execute(update(Update).where(Update.seq.in_(seqs), Update.status == "held").values(status=status))


def settle_orphans(db: Database, spec: RunSpec, *, now: float) -> int:
    """At the end of the data, with no lease running: a unit that wants one more copy, none leased for
    ``ORPHAN_LEASES`` lease lengths, and no online worker left who has not computed it (every one has) would keep
    the run from finishing for good. Its held results become ``inconclusive`` (not applied, no one blamed) and the
    unit is done; returns how many units were given up."""
    active = select(func.count()).select_from(Lease).where(Lease.status == "active")
    with db.read_session() as s:  # the usual answer, without the run's lock (every pass asks)
        run = s.get(Run, RUN_ID)
        if run is None or run.state == "finished" or run.samples_leased < run.samples_total or s.scalar(active):
            return 0
    last_leased = select(func.max(Lease.issued_at)).where(Lease.unit_id == Unit.id).scalar_subquery()
    could_compute = select(Worker.id).where(
        Worker.last_seen > now - spec.lease_seconds,
        Worker.banned.is_(None),
        ~exists().where(Lease.unit_id == Unit.id, Lease.worker_id == Worker.id),
    )
    with db.session() as s:
        s.get(Run, RUN_ID, with_for_update=True)  # leasing reads the units this changes
        if s.scalar(active):
            return 0
        orphans = s.scalars(
            select(Unit)
            .where(Unit.status == "open", Unit.base_version.is_not(None))
            .where(last_leased < now - ORPHAN_LEASES * spec.lease_seconds, ~exists(could_compute))
            .with_for_update()
        ).all()
        for unit in orphans:
            held = list(s.scalars(select(Update.seq).where(Update.unit_id == unit.id, Update.status == "held")))
            _set(s, held, "inconclusive")
            unit.status = "done"
            log.warning("validator: unit %d wants copy %d, and no online worker may compute it; its %d result(s)"
                        " dropped (inconclusive)", unit.id, unit.results + 1, len(held))  # fmt: skip
    return len(orphans)
