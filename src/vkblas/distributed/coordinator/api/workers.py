"""``/v1/workers`` and ``/v1/users``: registering a worker (public; a user token, if sent, credits its user), a
worker's own record (worker token), making a user account (public)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy.exc import IntegrityError

from ...protocol import API, RegisterReply, RegisterRequest, UserReply, UserRequest, WorkerSelf
from .. import accounts
from ..errors import ApiError
from .auth import authorization, user_authorization
from .deps import Context, client_address, now

router = APIRouter(prefix=API, tags=["workers"])


@router.post(
    "/workers", response_model=RegisterReply, summary="Register a worker (public, or a user token); its token once"
)
def register(body: RegisterRequest, request: Request, auth: str | None = Depends(user_authorization)) -> RegisterReply:
    with Context.of(request).db.session() as s:
        user = accounts.user_of(s, authorization=auth)
        return accounts.register(
            s, name=body.name, device=body.device, now=now(), address=client_address(request), user=user,
            device_class=body.device_class,
        )  # fmt: skip


@router.get("/workers/me", response_model=WorkerSelf, summary="The calling worker's record and credit (worker token)")
def me(request: Request, auth: str | None = Depends(authorization)) -> WorkerSelf:
    with Context.of(request).db.read_session() as s:
        return accounts.worker_self(s, accounts.authenticate(s, authorization=auth))


@router.post("/users", response_model=UserReply, summary="Make a user account (public); its token once")
def create_user(body: UserRequest, request: Request) -> UserReply:
    try:
        with Context.of(request).db.session() as s:
            return accounts.create_user(s, name=body.name, now=now())
    except IntegrityError:  # the same name raced itself
        raise ApiError("name-taken", f"there is already a user {body.name!r}: choose another name") from None
