"""``/v1/status`` (public): progress, version, test accuracy, workers, update counts; ``/healthz``."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ...protocol import API, RunStatus
from ..report import run_status
from .deps import Context

router = APIRouter(tags=["status"])


@router.get(f"{API}/status", response_model=RunStatus, summary="The run's status (public)")
def status(request: Request) -> RunStatus:
    ctx = Context.of(request)
    with ctx.db.read_session() as s:
        return run_status(s, spec=ctx.spec)


@router.get("/healthz", summary="200 while the process serves (public)")
def healthz() -> dict[str, str]:
    return {"status": "ok"}
