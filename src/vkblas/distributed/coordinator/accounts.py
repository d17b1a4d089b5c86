"""Tokens and the accounts they name: workers, users (volunteers' accounts) and the organiser (admin).

Every token is ``<prefix><id>.<secret>`` with a random secret (``secrets.token_urlsafe(32)``) returned once; the
database keeps only the sha256 of the secret, and hashes are compared in constant time (``hmac.compare_digest``;
an unknown id is compared against a dummy hash, so both cases take as long):

* a worker's: ``<worker_id>.<secret>`` (``POST /v1/workers``);
* a user's: ``u<user_id>.<secret>`` (``POST /v1/users``), sent when registering a worker to credit the user;
* the organiser's: ``admin.<secret>``, made when the run is made (written to a file only the organiser reads).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..protocol import RegisterReply, UserReply, WorkerSelf
from ..sizing import RateMeter
from . import trust
from .config import RunSpec
from .errors import ApiError
from .models import Credential, User, Worker

ADMIN = "admin"
_DUMMY = "0" * 64
MAX_TOKEN = 200
WARMUP_UNITS = 1  # a worker's first unit pays one-time costs: it sizes the next one, not the worker's speed


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def _split(authorization: str | None, what: str) -> tuple[str, str]:
    """(id part, secret) of ``Authorization: Bearer <id>.<secret>``."""
    if not authorization:
        raise ApiError("missing-token", f"this endpoint needs {what}: 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    ident, _, secret = token.strip().partition(".")
    if scheme.lower() != "bearer" or not ident or not secret or len(token) > MAX_TOKEN:
        raise ApiError("bad-token", f"the Authorization header must be 'Bearer <token>' with {what}")
    return ident, secret


def _check(stored: str | None, secret: str, message: str) -> None:
    ok = hmac.compare_digest(stored or _DUMMY, hash_secret(secret))
    if not ok or stored is None:
        raise ApiError("bad-token", message)


def _numeric(ident: str, prefix: str = "") -> int | None:
    digits = ident[len(prefix) :] if ident.startswith(prefix) else ""
    return int(digits) if digits.isdigit() and len(digits) <= 15 else None


# ------------------------------------------------------------------------------------------------ workers
def register(
    s: Session, *, name: str, device: str, now: float, address: str, user: User | None, device_class: str = ""
) -> RegisterReply:
    secret = new_secret()
    w = Worker(
        name=name,
        device=device,
        token_hash=hash_secret(secret),
        user_id=user.id if user is not None else None,
        address=address[:64],
        device_class=device_class,
        created_at=now,
        last_seen=now,
        rate=json.dumps(RateMeter(warmup=WARMUP_UNITS).state()),
        samples_per_s=0.0,
        wall_s=0.0,
        idle_s=0.0,
        bytes_sent=0,
        bytes_received=0,
        units_done=0,
        credit=0,
        accepted=0,
        stale=0,
        rejected=0,
        consecutive_valid=0,
        valid=0,
        invalid=0,
        credit_flops=0.0,
        pending_samples=0,
        pending_flops=0.0,
    )
    s.add(w)
    s.flush()
    return RegisterReply(worker_id=w.id, token=f"{w.id}.{secret}")


def authenticate(s: Session, *, authorization: str | None, spec: RunSpec | None = None) -> Worker:
    """The worker whose token is in the header; with ``spec``, also refused when banned or suspended (403)."""
    ident, secret = _split(authorization, "a worker token")
    wid = _numeric(ident)
    w = s.get(Worker, wid) if wid is not None else None
    _check(w.token_hash if w is not None else None, secret, "unknown or revoked worker token (register again)")
    assert w is not None
    if spec is not None:
        refused = trust.refusal(spec, w)
        if refused is not None:
            raise ApiError(*refused)
    return w


def worker_self(s: Session, w: Worker) -> WorkerSelf:
    user = s.get(User, w.user_id) if w.user_id is not None else None
    return WorkerSelf(
        worker_id=w.id,
        name=w.name,
        device=w.device,
        user=user.name if user is not None else None,
        units_done=w.units_done,
        credit=w.credit,
        credit_flops=w.credit_flops,
        pending=w.pending_samples,
        accepted=w.accepted,
        stale=w.stale,
        rejected=w.rejected,
        valid=w.valid,
        invalid=w.invalid,
        reputation=w.consecutive_valid,
    )


# ------------------------------------------------------------------------------------------------ users
def create_user(s: Session, *, name: str, now: float) -> UserReply:
    if s.scalar(select(User.id).where(User.name == name)) is not None:
        raise ApiError("name-taken", f"there is already a user {name!r}: choose another name")
    secret = new_secret()
    u = User(name=name, token_hash=hash_secret(secret), created_at=now)
    s.add(u)
    s.flush()
    return UserReply(user_id=u.id, token=f"u{u.id}.{secret}")


def user_of(s: Session, *, authorization: str | None) -> User | None:
    """The user whose token is in the header, None without a header (a worker may register without a user)."""
    if not authorization:
        return None
    ident, secret = _split(authorization, "a user token")
    uid = _numeric(ident, "u")
    u = s.get(User, uid) if uid is not None else None
    _check(u.token_hash if u is not None else None, secret, "unknown user token (POST /v1/users makes one)")
    return u


# ------------------------------------------------------------------------------------------------ the organiser
def set_admin_token(s: Session, *, token: str, now: float) -> None:
    ident, _, secret = token.partition(".")
    if ident != ADMIN or len(secret) < 16:
        raise ValueError("an admin token is 'admin.<secret>' with a secret of at least 16 characters")
    s.merge(Credential(name=ADMIN, token_hash=hash_secret(secret), created_at=now))


def new_admin_token() -> str:
    return f"{ADMIN}.{new_secret()}"


def authenticate_admin(s: Session, *, authorization: str | None) -> None:
    ident, secret = _split(authorization, "the organiser's admin token")
    if ident != ADMIN:
        raise ApiError("not-admin", "this endpoint needs the organiser's admin token, not a worker's or a user's")
    row = s.get(Credential, ADMIN)
    _check(row.token_hash if row is not None else None, secret, "wrong admin token")
