"""``/v1/admin/...``: the organiser's run control (admin token): pause, resume or stop the run; list, ban and
unban workers. A ban quarantines the worker's results not yet applied and gives its units to others."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request
from sqlalchemy import select, update

from ...protocol import API, AdminWorker, BanRequest, RunAction, RunStatus
from .. import accounts, copies
from ..errors import ApiError
from ..models import RUN_ID, Lease, Run, Update, User, Worker
from ..report import run_status
from .auth import admin_authorization as authorization
from .deps import Context

router = APIRouter(prefix=f"{API}/admin", tags=["admin"])
WorkerId = Path(ge=1, le=2**31 - 1, description="a worker id")


@router.post("/run", response_model=RunStatus, summary="Pause, resume or stop the run (admin token)")
def run_control(body: RunAction, request: Request, auth: str | None = Depends(authorization)) -> RunStatus:
    ctx = Context.of(request)
    with ctx.db.session() as s:
        accounts.authenticate_admin(s, authorization=auth)
        run = s.get(Run, RUN_ID, with_for_update=True)
        assert run is not None
        if run.state == "finished":
            raise ApiError("run-finished", f"the run is finished ({run.stop_reason or 'all its samples are in'})")
        if body.action == "pause":
            run.state, run.stop_reason = "paused", body.reason
        elif body.action == "resume":
            run.state, run.stop_reason = "running", ""
        else:
            run.state, run.stop_reason = "finished", body.reason or "stopped by the organiser"
    with ctx.db.read_session() as s:
        return run_status(s, spec=ctx.spec)


@router.get("/workers", response_model=list[AdminWorker], summary="Every worker, with its address (admin token)")
def workers(request: Request, auth: str | None = Depends(authorization)) -> list[AdminWorker]:
    with Context.of(request).db.read_session() as s:
        accounts.authenticate_admin(s, authorization=auth)
        users = dict(s.execute(select(User.id, User.name)).all())
        return [
            AdminWorker(
                worker_id=w.id,
                name=w.name,
                user=users.get(w.user_id),
                address=w.address,
                device=w.device,
                reputation=w.consecutive_valid,
                valid=w.valid,
                invalid=w.invalid,
                rejected=w.rejected,
                credit=w.credit,
                pending=w.pending_samples,
                banned=w.banned,
                last_seen=w.last_seen,
            )
            for w in s.scalars(select(Worker).order_by(Worker.id))
        ]


@router.post("/workers/{worker_id}/ban", response_model=AdminWorker, summary="Ban a worker (admin token)")
def ban(
    body: BanRequest, request: Request, worker_id: int = WorkerId, auth: str | None = Depends(authorization)
) -> AdminWorker:
    return _set_ban(request, worker_id, body.reason, auth)


@router.post("/workers/{worker_id}/unban", response_model=AdminWorker, summary="Lift a worker's ban (admin token)")
def unban(request: Request, worker_id: int = WorkerId, auth: str | None = Depends(authorization)) -> AdminWorker:
    return _set_ban(request, worker_id, None, auth)


def _set_ban(request: Request, worker_id: int, reason: str | None, auth: str | None) -> AdminWorker:
    ctx = Context.of(request)
    with ctx.db.session() as s:
        accounts.authenticate_admin(s, authorization=auth)
        s.get(Run, RUN_ID, with_for_update=True)  # units change below: one writer at a time, as leasing
        w = s.get(Worker, worker_id, with_for_update=True)
        if w is None:
            raise ApiError("not-found", f"no worker {worker_id}")
        w.banned = reason
        if reason is not None:
            w.pending_samples, w.pending_flops = 0, 0.0
            units = s.scalars(select(Lease.unit_id).where(Lease.worker_id == w.id, Lease.status == "active")).all()
            s.execute(update(Lease).where(Lease.worker_id == w.id, Lease.status == "active").values(status="expired"))
            unapplied = (Update.worker_id == w.id, Update.status.in_(("held", "recorded")))
            units += s.scalars(select(Update.unit_id).where(*unapplied)).all()
            s.execute(update(Update).where(*unapplied).values(status="quarantined"))
            copies.refresh_ids(s, [u for u in units if u is not None])
    return next(x for x in workers(request, auth) if x.worker_id == worker_id)
