"""The protocol's calls, as a worker makes them: outbound HTTP (httpx), retried with exponential backoff and
jitter on network errors and on 500/502/503/504 for up to ``retry_for`` seconds *without progress* (the budget starts
again whenever bytes arrive), 429 (rate limited) after the ``Retry-After`` it names, errors mapped to
:mod:`.errors`, and resumable downloads verified by hash. HTTPS with the system's certificates, or ``ca_cert`` (a
coordinator with a certificate of its own).

A download continues a ``.part`` file with ``Range: bytes=N-`` and ``If-Range: "<sha256>"`` (a strong ETag: if the
server's file were different it answers 200 with the whole file, never glues other bytes onto ours); the finished
file must hash to its name before it is used.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from ...backend.filelock import locked
from ..protocol import (
    API,
    PART_BYTES,
    PARTS_CONTENT_TYPE,
    Heartbeat,
    HeartbeatReply,
    LeaseReply,
    RegisterReply,
    RunInfo,
    RunStatus,
    UploadReply,
    UserReply,
)
from .errors import IntegrityError, ServerError, UnreachableError, WorkerError
from .transport import Metered

#: a 5xx is the coordinator's fault or a passing state (bad input is a 4xx): a volunteer waits it out, as BOINC's
#: clients back off on any server error, rather than leave on the first one
RETRY_STATUS = (500, 502, 503, 504)
LEASE_WAIT_S = 10.0  # long polling: the coordinator holds a 'wait' answer this long
MAX_RETRY_AFTER_S = 60.0
T = TypeVar("T", bound=BaseModel)
_SHA_IN_TEXT = re.compile(r"\b[0-9a-f]{64}\b")


class Client:
    def __init__(
        self,
        server: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 60.0,
        retry_for: float = 300.0,
        uplink_mbit: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        ca_cert: str | None = None,
        part_bytes: int = PART_BYTES,
    ) -> None:
        if not 1 <= part_bytes <= PART_BYTES:
            raise ValueError(f"part_bytes must be in [1, {PART_BYTES}], got {part_bytes}")
        self.part_bytes = part_bytes
        self.server = server.rstrip("/")
        verify = ssl.create_default_context(cafile=ca_cert) if ca_cert else True
        inner = transport or httpx.HTTPTransport(verify=verify)
        self.meter = Metered(inner, uplink_bits=uplink_mbit * 1e6 if uplink_mbit else None)
        self.http = httpx.Client(base_url=self.server, transport=self.meter, timeout=timeout)
        self.retry_for, self.sleep = retry_for, sleep
        self.token: str | None = None

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------------ one request, retried
    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = {"authorization": f"Bearer {self.token}"} if self.token else {}
        return {**h, **(extra or {})}

    def _retrying(self, what: str, attempt: Callable[[], Any], retry_for: float | None = None) -> Any:
        budget = self.retry_for if retry_for is None else retry_for
        deadline, tries = time.monotonic() + budget, 0
        while True:
            try:
                return attempt()
            except _ProgressError:
                deadline, tries = time.monotonic() + budget, 0  # bytes arrived: a fresh budget
            except _RateLimitedError as e:  # the coordinator said how long: wait that, without spending the budget
                self.sleep(e.after * (1 + 0.2 * random.random()))
            except (httpx.TransportError, _RetryableError) as e:
                tries += 1
                if time.monotonic() >= deadline:
                    raise UnreachableError(f"{what}: no answer from {self.server} for {budget:.0f} s ({e})") from e
                self.sleep(min(10.0, 0.2 * 2 ** min(tries, 6)) * (0.5 + random.random()))

    def request(
        self,
        method: str,
        path: str,
        *,
        model: type[T] | None = None,
        retry_for: float | None = None,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ) -> Any:
        def attempt() -> Any:
            r = self.http.request(method, path, headers=self._headers(headers), **kw)
            if r.status_code in RETRY_STATUS:
                raise _RetryableError(f"HTTP {r.status_code}")
            if r.status_code == 429:
                raise _RateLimitedError(_retry_after(r))
            if r.status_code >= 400:
                raise _server_error(r)
            if model is None:
                return r
            try:
                return model.model_validate_json(r.content)
            except ValidationError as e:
                raise WorkerError(f"{method} {path}: the coordinator's answer does not parse ({e})") from e

        return self._retrying(f"{method} {path}", attempt, retry_for)

    # ------------------------------------------------------------------ the protocol
    def register(
        self, name: str, device: str, client_version: str = "", user_token: str | None = None, device_class: str = ""
    ) -> RegisterReply:
        """Register (again: a coordinator that forgot this worker's token answers ``bad-token``); ``user_token``
        credits the work to that user."""
        body = {"name": name, "device": device, "client_version": client_version, "device_class": device_class}
        self.token = user_token
        reply = self.request("POST", f"{API}/workers", json=body, model=RegisterReply)
        self.token = reply.token
        return reply

    def create_user(self, name: str) -> UserReply:
        return self.request("POST", f"{API}/users", json={"name": name}, model=UserReply)

    def run_info(self) -> RunInfo:
        return self.request("GET", f"{API}/run", model=RunInfo)

    def status(self) -> RunStatus:
        return self.request("GET", f"{API}/status", model=RunStatus)

    def lease(self, wait: float = LEASE_WAIT_S) -> LeaseReply:
        """A unit, or ``wait``/``done``; the coordinator holds a ``wait`` answer up to ``wait`` seconds."""
        timeout = httpx.Timeout(self.http.timeout.read + wait if self.http.timeout.read else None)
        return self.request("POST", f"{API}/leases", params={"wait": wait}, model=LeaseReply, timeout=timeout)

    def heartbeat(self, lease_id: str, hb: Heartbeat, retry_for: float | None = None) -> HeartbeatReply:
        return self.request(
            "POST",
            f"{API}/leases/{lease_id}/heartbeat",
            json=hb.model_dump(),
            model=HeartbeatReply,
            retry_for=retry_for,
        )

    def give_back(self, lease_id: str) -> None:
        self.request("POST", f"{API}/leases/{lease_id}/return", retry_for=10.0)

    def upload(self, lease_id: str, payload: bytes, key: str) -> UploadReply:
        """The same ``key`` on every retry: a retry of an upload the coordinator had recorded gets the same answer.
        A payload above ``part_bytes`` goes as parts (each its own retried request, named by its hash), then a
        manifest naming them: no request body holds it whole, and a broken connection costs one part."""
        headers = {"idempotency-key": key, "x-content-sha256": hashlib.sha256(payload).hexdigest()}
        if len(payload) <= self.part_bytes:
            return self.request(
                "PUT", f"{API}/leases/{lease_id}/result", content=payload, model=UploadReply,
                headers={**headers, "content-type": "application/octet-stream"},
            )  # fmt: skip
        view, step = memoryview(payload), self.part_bytes
        cuts = [view[i : i + step] for i in range(0, len(payload), step)]
        names = [hashlib.sha256(c).hexdigest() for c in cuts]
        parts, manifest = dict(zip(names, cuts, strict=True)), {"parts": names}
        # the manifest first: a retry of a recorded upload is answered at once, and the coordinator names the parts
        # it lacks, so only those are sent (an upload interrupted half-way resumes with the other half)
        for attempt in range(3):
            try:
                return self.request(
                    "PUT", f"{API}/leases/{lease_id}/result", json=manifest, model=UploadReply,
                    headers={**headers, "content-type": PARTS_CONTENT_TYPE},
                )  # fmt: skip
            except ServerError as e:
                if e.code != "missing-parts" or attempt == 2:
                    raise
                wanted = set(_SHA_IN_TEXT.findall(e.message)) & parts.keys() or parts.keys()
                for sha in wanted:
                    self._put_part(lease_id, sha, parts[sha])
        raise AssertionError("unreachable")

    def _put_part(self, lease_id: str, sha: str, part: memoryview) -> None:
        self.request(
            "PUT", f"{API}/leases/{lease_id}/parts/{sha}", content=bytes(part),
            headers={"content-type": "application/octet-stream"},
        )  # fmt: skip

    # ------------------------------------------------------------------ downloads
    def download(self, sha: str, directory: Path, attempts: int = 3) -> Path:
        """The shard named ``sha`` as a verified file in ``directory`` (kept: a name never changes its bytes).
        Several workers may share ``directory``: a lock file makes one download while the others wait for it."""
        directory.mkdir(parents=True, exist_ok=True)
        final, part = directory / sha, directory / f"{sha}.part"
        with locked(directory / f"{sha}.lock"):
            for _ in range(attempts):
                if final.is_file():
                    return final
                self._retrying(f"GET shard {sha[:12]}", lambda: self._fetch(sha, part))
                digest = _sha256_file(part)
                if digest == sha:
                    os.replace(part, final)
                    return final
                part.unlink()  # damaged or glued bytes: never used; fetch it whole again
        raise IntegrityError(f"shard {sha} downloaded {attempts} times as bytes hashing to {digest}")

    def _fetch(self, sha: str, part: Path) -> None:
        have = part.stat().st_size if part.exists() else 0
        headers = self._headers({"range": f"bytes={have}-", "if-range": f'"{sha}"'} if have else {})
        got = 0
        try:
            with self.http.stream("GET", f"{API}/shards/{sha}", headers=headers) as r:
                if r.status_code in RETRY_STATUS:
                    raise _RetryableError(f"HTTP {r.status_code}")
                if r.status_code == 429:
                    raise _RateLimitedError(_retry_after(r))
                if r.status_code == 416:  # our .part is longer than the file: start again
                    part.unlink(missing_ok=True)
                    raise _ProgressError()
                if r.status_code >= 400:
                    r.read()
                    raise _server_error(r)
                resume = r.status_code == 206 and r.headers.get("content-range", "").startswith(f"bytes {have}-")
                with open(part, "ab" if resume else "wb") as f:
                    for chunk in r.iter_bytes():  # as they arrive: a break keeps all received
                        f.write(chunk)
                        got += len(chunk)
        except httpx.TransportError:
            if got:
                raise _ProgressError() from None  # what arrived is kept in .part; the next try resumes after it
            raise


class _RetryableError(Exception):
    pass


class _RateLimitedError(Exception):
    def __init__(self, after: float) -> None:
        super().__init__(f"rate limited: retry after {after} s")
        self.after = after


def _retry_after(r: httpx.Response) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.1, float(r.headers.get("retry-after", "1"))))
    except ValueError:
        return 1.0


class _ProgressError(Exception):
    """Bytes arrived before the failure: retry at once, with a fresh budget."""


def _server_error(r: httpx.Response) -> ServerError:
    try:
        err = r.json()["error"]
        return ServerError(r.status_code, str(err["code"]), str(err["message"]))
    except (ValueError, KeyError, TypeError):
        return ServerError(r.status_code, "http", r.text[:200] or r.reason_phrase)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
