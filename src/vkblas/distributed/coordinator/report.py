"""The run's status (``GET /v1/status``), leaderboard and dashboard, from the database alone, so any coordinator
process answers the same."""

from __future__ import annotations

import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..protocol import Dashboard, HistoryPoint, LeaderboardRow, RunStatus, WorkerStatus
from ..protocol import Evaluation as EvaluationMsg
from .config import RunSpec
from .models import RUN_ID, Evaluation, History, Run, Update, User, Worker

CURVE_POINTS = 200
HISTORY_POINTS = 300


def run_status(s: Session, *, spec: RunSpec, now: float | None = None) -> RunStatus:
    now = time.time() if now is None else now
    run = s.get(Run, RUN_ID)
    assert run is not None
    counts = dict(s.execute(select(Update.status, func.count()).group_by(Update.status)).all())
    bytes_in = s.scalar(select(func.coalesce(func.sum(Update.payload_bytes), 0)))
    evals = s.scalars(select(Evaluation).order_by(Evaluation.id.desc()).limit(CURVE_POINTS)).all()[::-1]
    workers = s.scalars(select(Worker).order_by(Worker.id)).all()
    users = dict(s.execute(select(User.id, User.name)).all())
    curve = [
        EvaluationMsg(version=e.version, samples=e.samples, accuracy=e.accuracy, loss=e.loss, at=e.created_at)
        for e in evals
    ]
    return RunStatus(
        run_id=run.uid,
        state=run.state,  # type: ignore[arg-type]
        stop_reason=run.stop_reason,
        algorithm=spec.algorithm,
        dataset=spec.dataset,
        model=spec.model,
        version=run.version,
        samples_total=run.samples_total,
        samples_leased=run.samples_leased,
        samples_applied=run.samples_applied,
        progress=min(1.0, run.samples_leased / run.samples_total) if run.samples_total else 1.0,
        accepted=counts.get("applied", 0),
        stale=counts.get("stale", 0),
        rejected=sum(w.rejected for w in workers),
        pending=counts.get("recorded", 0),
        test=curve[-1] if curve else None,
        evaluations=curve,
        workers=[
            WorkerStatus(
                worker_id=w.id,
                name=w.name,
                device=w.device,
                samples_per_s=round(w.samples_per_s, 2),
                idle_fraction=round(w.idle_s / w.wall_s, 4) if w.wall_s > 0 else 0.0,
                units_done=w.units_done,
                credit=w.credit,
                accepted=w.accepted,
                stale=w.stale,
                rejected=w.rejected,
                bytes_sent=w.bytes_sent,
                bytes_received=w.bytes_received,
                online=now - w.last_seen < spec.lease_seconds,
                user=users.get(w.user_id),
                credit_flops=w.credit_flops,
                valid=w.valid,
                invalid=w.invalid,
                reputation=w.consecutive_valid,
                banned=w.banned is not None,
                wall_s=round(w.wall_s, 3),
                idle_s=round(w.idle_s, 3),
            )
            for w in workers
        ],
        bytes_in=int(bytes_in),
        bytes_out=sum(w.bytes_received for w in workers),
        apply_cpu_s_per_update=run.apply_cpu_s / run.updates_applied if run.updates_applied else 0.0,
        spec=spec.public(),
        validation={k: int(v) for k, v in counts.items()},
    )


def leaderboard(status: RunStatus) -> list[LeaderboardRow]:
    """Validated credit per user (a worker without a user is a row of its own), most first."""
    rows: dict[str, dict] = {}
    for w in status.workers:
        key = w.user if w.user is not None else f"{w.name} (worker {w.worker_id})"
        r = rows.setdefault(key, {"user": key, "workers": 0, "samples": 0, "flops": 0.0, "valid": 0, "invalid": 0})
        r["workers"] += 1
        r["samples"] += w.credit
        r["flops"] += w.credit_flops
        r["valid"] += w.valid
        r["invalid"] += w.invalid
    ordered = sorted(rows.values(), key=lambda r: (-r["samples"], r["user"]))
    return [LeaderboardRow(**r) for r in ordered]


def dashboard(s: Session, *, spec: RunSpec) -> Dashboard:
    status = run_status(s, spec=spec)
    hist = s.scalars(select(History).order_by(History.id.desc()).limit(HISTORY_POINTS)).all()[::-1]
    points = [
        HistoryPoint(
            at=h.created_at,
            version=h.version,
            samples_applied=h.samples_applied,
            samples_validated=h.samples_validated,
            workers_online=h.workers_online,
        )  # fmt: skip
        for h in hist
    ]
    return Dashboard(status=status, leaderboard=leaderboard(status), history=points)
