"""sync/diloco rounds: which round a unit belongs to and when the open one closes. The applier closes rounds with
:func:`closed`; leasing asks the same question, so a worker whose result closes the round takes its next unit from
the new version instead of leasing ahead (``--overlap``)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from .config import RunSpec
from .models import Lease, Run, Unit, Update


def unit_round() -> ColumnElement[int]:
    """The round a unit's result belongs to (join ``Unit``): its ``for_round``, its base version for older rows."""
    return func.coalesce(Unit.for_round, Unit.base_version)


def closed(s: Session, spec: RunSpec, run: Run, v: int, pending: list[Update], now: float) -> list[Update]:
    """The contributions of round ``v`` once it closes, else nothing; ``pending`` are the recorded updates. The
    round closes when its fresh results (of units for round v) cover ``quorum`` of the samples leased for it, or
    no lease for it is still running and none of its results awaits a check, or the round is ``round_seconds``
    old, or the run's last unit is in.

    A unit's round is ``Unit.for_round``: its base version, or the next one for a unit leased ahead
    (``--overlap``). Results for a later round wait for it, and leases for a later round neither hold this one
    open nor count in its quorum; a round with no result of its own and no lease running takes the results
    leased ahead of it (computed from v) as its own."""
    if not pending:
        return []
    of = dict(
        s.execute(
            select(Update.seq, func.coalesce(unit_round(), Update.base_version))
            .outerjoin(Unit, Unit.id == Update.unit_id)
            .where(Update.seq.in_([u.seq for u in pending]))
        ).all()
    )
    mine = [u for u in pending if of[u.seq] <= v]
    fresh = sum(u.samples for u in mine if of[u.seq] == v)
    leased_q = (
        select(func.coalesce(func.sum(Lease.samples), 0))
        .join(Unit, Unit.id == Lease.unit_id)
        .where(func.coalesce(unit_round(), Lease.base_version) == v)
        # copies of the unit's current pin only: a unit handed out again after a stale result (copies.reissue)
        # keeps its earlier leases, which would hold its new round's quorum out of reach
        .where(Lease.base_version == Unit.base_version)
    )
    # the quorum is of the round's units (first copies)
    leased = s.scalar(leased_q.where(Lease.status.in_(("active", "done")), Lease.role == "primary"))

    def unfinished() -> bool:
        """A lease of round v still running (a copy being checked included), or a result of it held for its check
        before the copy is leased: closing without that result made it stale by the time it was checked (a new
        worker's first units, checked on a slower device, were lost one in three). Asked only where it decides."""
        if s.scalar(leased_q.where(Lease.status == "active")):
            return True
        held = select(func.count()).select_from(Update).join(Unit, Unit.id == Update.unit_id)
        return bool(s.scalar(held.where(Update.status == "held", unit_round() == v)))

    if not mine:
        # nothing of this round's own (its results invalid, or none yet): once nothing of it is running, the
        # results leased ahead of it stand in (they were computed from v); until then, wait
        return [] if unfinished() else pending
    if (fresh > 0 and fresh >= spec.round_quorum * leased) or now - run.round_opened_at >= spec.round_deadline:
        return mine
    if fresh > 0 and not unfinished():
        return mine
    active = s.scalar(select(func.count()).select_from(Lease).where(Lease.status == "active"))
    return mine if run.samples_leased >= run.samples_total and active == 0 else []
