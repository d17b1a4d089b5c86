"""The copies of a unit: how many are wanted (``Unit.quorum``: 1 unchecked, 2 or more to compare), how many are
out or in, and what a unit's status follows from that.

A unit's first copy pins the model version and learning rate every later copy computes from (a replica must start
from the same weights). A unit left with no copy out and no result (its only lease expired or was given back) is
unpinned and forgets its quorum: whoever takes it next starts from the current model, and its own reputation decides
whether the unit is checked.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .models import Lease, Unit, Update

#: the most copies of one unit; if no two of them agree by then, the unit is dropped (its results inconclusive)
MAX_COPIES = 4
LIVE = ("held", "recorded", "applied", "duplicate", "stale")  # results that still count for their unit


def counts(s: Session, unit_id: int) -> tuple[int, int, int]:
    """(active leases, held results, live results) of a unit."""
    active = s.scalar(select(func.count()).select_from(Lease).where(Lease.unit_id == unit_id, Lease.status == "active"))
    rows = dict(
        s.execute(select(Update.status, func.count()).where(Update.unit_id == unit_id).group_by(Update.status)).all()
    )
    return active, rows.get("held", 0), sum(rows.get(k, 0) for k in LIVE)


def refresh(s: Session, unit: Unit) -> None:
    """Set a unit's status from its copies (after a lease, a result, an expiry or a ban changed them)."""
    s.flush()
    active, held, live = counts(s, unit.id)
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
        unit.base_version, unit.for_round, unit.lr, unit.quorum = None, None, None, 1
        unit.device_class, unit.pinned_at = None, None


def refresh_ids(s: Session, unit_ids: Iterable[int]) -> None:
    for uid in sorted(set(unit_ids)):
        unit = s.get(Unit, uid, with_for_update=True)
        if unit is not None:
            refresh(s, unit)
