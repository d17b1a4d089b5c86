"""The copies of a unit: how many are wanted (``Unit.quorum``: 1 unchecked, 2 or more to compare), how many are
out or in, and what a unit's status follows from that.

A unit's first copy pins the model version and learning rate every later copy computes from (a replica must start
from the same weights). A unit left with no copy out and no result (its only lease expired or was given back) is
unpinned and forgets its quorum: whoever takes it next starts from the current model, and its own reputation decides
whether the unit is checked. A unit whose result was dropped stale (:func:`reissue`) is unpinned the same way:
only results computed from a unit's pinned version count for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .models import Lease, Unit, Update

#: the most copies of one unit; if no two of them agree by then, the unit is dropped (its results inconclusive)
MAX_COPIES = 4
LIVE = ("held", "recorded", "applied", "duplicate", "stale")  # results that still count for their unit
#: a unit whose result came in too late for the staleness bound is handed out again, from the current model, so
#: its samples are still trained; at most this many times (a run must end)
MAX_REISSUES = 2


def counts(s: Session, unit: Unit) -> tuple[int, int, int]:
    """(active leases, held results, live results) of a unit; results count only if computed from the version
    the unit is pinned to (none while it is unpinned)."""
    active = s.scalar(select(func.count()).select_from(Lease).where(Lease.unit_id == unit.id, Lease.status == "active"))
    mine = Update.unit_id == unit.id, Update.base_version == unit.base_version
    rows = dict(s.execute(select(Update.status, func.count()).where(*mine).group_by(Update.status)).all())
    return active, rows.get("held", 0), sum(rows.get(k, 0) for k in LIVE)


def reissue(s: Session, unit: Unit) -> bool:
    """A unit whose result the applier dropped stale: unpinned and open again, so that whoever leases it next
    trains its samples from the current model (without it, a worker slowed for a few rounds lost its unit's
    samples for good: 448 of a run's 512 applied). Not while a copy of it is still out or held for a check, nor
    more than ``MAX_REISSUES`` times; returns whether it was re-opened."""
    s.flush()
    active, held, _ = counts(s, unit)
    stale = s.scalar(select(func.count()).where(Update.unit_id == unit.id, Update.status == "stale"))
    if active or held or stale > MAX_REISSUES:
        return False
    _unpin(unit)
    unit.status, unit.results = "open", 0  # the copies of the dropped version no longer count
    return True


def _unpin(unit: Unit) -> None:
    unit.base_version, unit.for_round, unit.lr, unit.quorum = None, None, None, 1
    unit.device_class, unit.pinned_at = None, None


def refresh(s: Session, unit: Unit) -> None:
    """Set a unit's status from its copies (after a lease, a result, an expiry or a ban changed them)."""
    s.flush()
    active, held, live = counts(s, unit)
    if unit.status == "checking" and held >= unit.quorum:
        return  # the validator's to decide
    if unit.status == "done" and live > held:
        return  # its result is in (recorded or applied)
    if held >= unit.quorum and held > 1:
        unit.status = "checking"
    elif active + live >= unit.quorum and live > held:
        unit.status = "done"
    elif active + live >= unit.quorum:
        unit.status = "leased"
    else:
        unit.status = "open"
    if active == 0 and live == 0:
        _unpin(unit)


def refresh_ids(s: Session, unit_ids: Iterable[int]) -> None:
    for uid in sorted(set(unit_ids)):
        unit = s.get(Unit, uid, with_for_update=True)
        if unit is not None:
            refresh(s, unit)
