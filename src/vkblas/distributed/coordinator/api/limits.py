"""ASGI middleware: who is asking (the client's address, through trusted proxies only) and rate limits per address
and per token, before anything else runs, so a flood is refused (429 ``rate-limited``, ``Retry-After``) without
reading its body or touching the database. Every answer carries ``Server-Timing: app;dur=<ms>``: the time from
here (headers parsed) to the answer's start, so a client can tell the coordinator's time from the network's and
its own (benchmarks/coordinator_load.py reports both)."""

from __future__ import annotations

import hashlib
import math
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..addresses import Network, client_address
from ..ratelimit import RateLimiter
from .errors import error_response

EXEMPT = ("/healthz",)


class RateLimit:
    def __init__(
        self, app: ASGIApp, *, per_address: RateLimiter, per_token: RateLimiter, proxies: list[Network]
    ) -> None:
        self.app, self.per_address, self.per_token, self.proxies = app, per_address, per_token, proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                dur = f"app;dur={1000 * (time.perf_counter() - start):.1f}".encode()
                message = {**message, "headers": [*message.get("headers", []), (b"server-timing", dur)]}
            await send(message)

        await self._limited(scope, receive, timed)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        peer = scope.get("client")
        forwarded = headers.get(b"x-forwarded-for")
        address = client_address(
            peer[0] if peer else None, forwarded.decode("latin-1") if forwarded else None, self.proxies
        )
        scope.setdefault("state", {})["client_address"] = address
        if scope.get("path") in EXEMPT:
            await self.app(scope, receive, send)
            return
        now = time.monotonic()
        wait = self.per_address.take(f"a:{address}", now)
        what = f"address {address}"
        auth = headers.get(b"authorization")
        if not wait and auth:
            # keyed by a hash of the whole header: a forged token gets a bucket of its own, not its victim's
            wait = self.per_token.take("t:" + hashlib.sha256(auth).hexdigest()[:32], now)
            what = "this token"
        if wait:
            rate = self.per_token.rate if what == "this token" else self.per_address.rate
            response = error_response(
                "rate-limited", f"too many requests from {what} (limit {rate:g}/s): retry after {wait:.2f} s"
            )
            response.headers["retry-after"] = str(max(1, math.ceil(wait)))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
