"""The tokens, declared as HTTP bearer schemes so the OpenAPI schema states which endpoint needs which:
``workerToken`` (leases, results, a worker's record), ``adminToken`` (``/v1/admin/...``), ``userToken`` (optional,
when registering a worker: credits the user). The others are public: registration, making a user, the run's
description, its status, leaderboard and dashboard, the page, and the content-addressed shards."""

from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

worker_bearer = HTTPBearer(auto_error=False, scheme_name="workerToken", description="a worker token (POST /v1/workers)")
admin_bearer = HTTPBearer(auto_error=False, scheme_name="adminToken", description="the organiser's admin token")
user_bearer = HTTPBearer(
    auto_error=False, scheme_name="userToken", description="optional: a user token (POST /v1/users)"
)


def _header(cred: HTTPAuthorizationCredentials | None) -> str | None:
    return None if cred is None else f"{cred.scheme} {cred.credentials}"


def authorization(cred: HTTPAuthorizationCredentials | None = Depends(worker_bearer)) -> str | None:
    return _header(cred)


def admin_authorization(cred: HTTPAuthorizationCredentials | None = Depends(admin_bearer)) -> str | None:
    return _header(cred)


def user_authorization(cred: HTTPAuthorizationCredentials | None = Depends(user_bearer)) -> str | None:
    return _header(cred)
