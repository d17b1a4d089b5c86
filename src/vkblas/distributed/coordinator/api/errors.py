"""Errors as JSON (``{"error": {"code", "message"}}``) and the body-size limit, for every route.

The limit is enforced before a route runs: :class:`BodyLimit` reads the request body (refusing a
``Content-Length`` or a chunked stream beyond the route's limit with 413) and hands the route the buffered bytes.
Routes then parse them with strict models; anything they raise as :class:`ApiError` becomes its 4xx. The database
failing a request (down, restarting, or a deadlock still lost after :meth:`Database.transaction`'s attempts) is 503
``unavailable`` with ``Retry-After``: the transaction was rolled back, and a worker asks again after its backoff.
Anything else a route raises is the coordinator's own fault (bad input is always a 4xx): 500 ``internal``, the same
JSON body naming nothing of the failure (the traceback goes to the log); workers retry it with backoff too."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...protocol import ERROR_CODES, MAX_JSON_BODY
from ..errors import ApiError

UNAVAILABLE_RETRY_AFTER_S = 1
log = logging.getLogger("vkblas.coordinator")


def error_response(code: str, message: str, status: int | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status or ERROR_CODES[code])


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.code, e.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        parts = []
        for err in e.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return error_response("invalid-body", "; ".join(parts) or "invalid request")

    @app.exception_handler(OperationalError)
    async def _database(request: Request, e: OperationalError) -> JSONResponse:
        what = str(e.orig).strip().splitlines()[0] if e.orig is not None else type(e).__name__
        log.warning("%s %s: the database failed the request: %s", request.method, request.url.path, what)
        # the details go to the log, not to strangers: a reply names no host, table or query
        wait = UNAVAILABLE_RETRY_AFTER_S
        response = error_response(
            "unavailable", f"the coordinator's database could not serve this request; retry in {wait} s"
        )
        response.headers["retry-after"] = str(wait)
        return response

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        # Starlette's outermost middleware runs this, then raises ``e`` again: the server logs the traceback
        log.error("%s %s failed: %s", request.method, request.url.path, type(e).__name__)
        return error_response("internal", "the coordinator failed this request (a fault of its own, in its log)")

    @app.exception_handler(HTTPException)
    async def _http(_: Request, e: HTTPException) -> JSONResponse:
        code = "not-found" if e.status_code == 404 else "invalid-body"
        return error_response(code, str(e.detail), e.status_code)


class BodyLimit:
    """ASGI middleware: a request body larger than ``limit_for(scope)`` bytes is refused with 413 before the app
    sees it; otherwise the whole body is read here and replayed to the app in one message. Routes for which
    ``streamed(scope)`` holds (uploads, which write their body to a file as it arrives) get it as it comes instead,
    counted: a ``Content-Length`` above the limit is refused before they run, a chunked body that grows past it
    fails their read with ``too-large`` (413)."""

    def __init__(
        self,
        app: ASGIApp,
        limit_for: Callable[[Scope], int] | None = None,
        streamed: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.app = app
        self.limit_for = limit_for or (lambda scope: MAX_JSON_BODY)
        self.streamed = streamed or (lambda scope: False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await self._too_large(scope, receive, send, limit, length.decode("latin-1")[:20])
            return
        if self.streamed(scope):
            await self.app(scope, self._counted(receive, limit), send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, limit, f"more than {limit}")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    def _counted(receive: Receive, limit: int) -> Receive:
        size = 0

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > limit:
                raise ApiError("too-large", f"request body of more than {limit} bytes is above this endpoint's limit")
            return message

        return counted

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int, got: str) -> None:
        response = error_response("too-large", f"request body of {got} bytes is above this endpoint's {limit}")
        await response(scope, receive, send)
