"""The worker token: ``Authorization: Bearer <worker_id>.<secret>``, declared as an HTTP bearer scheme so the
OpenAPI schema states which endpoints need it (the others are public: registration, the run's description, its
status and the content-addressed shards)."""

from __future__ import annotations

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

bearer = HTTPBearer(auto_error=False, description="a worker token from POST /v1/workers")


def authorization(cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str | None:
    return None if cred is None else f"{cred.scheme} {cred.credentials}"
