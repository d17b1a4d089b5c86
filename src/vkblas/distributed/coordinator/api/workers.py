"""``/v1/workers``: registration (public) and a worker's own record (worker token)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from ...protocol import API, RegisterReply, RegisterRequest, WorkerSelf
from .. import crud
from .auth import authorization
from .deps import Context, now

router = APIRouter(prefix=f"{API}/workers", tags=["workers"])


@router.post("", response_model=RegisterReply, summary="Register a worker (public); returns its token once")
def register(body: RegisterRequest, request: Request) -> RegisterReply:
    with Context.of(request).db.session() as s:
        return crud.register(s, name=body.name, device=body.device, now=now())


@router.get("/me", response_model=WorkerSelf, summary="The calling worker's record and credit (worker token)")
def me(request: Request, auth: str | None = Depends(authorization)) -> WorkerSelf:
    with Context.of(request).db.read_session() as s:
        return crud.worker_self(crud.authenticate(s, authorization=auth))
