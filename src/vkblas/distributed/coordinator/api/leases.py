"""``/v1/leases``: leasing work, heartbeats, results, giving a unit back. All need the worker token, and a lease
can only be touched by the worker that holds it.

An upload is validated completely before anything is stored: size (by the body limit), checksum, idempotency key,
safetensors structure, metadata, codec, and then the decoded update against the model's signature (names, shapes,
dtype, finiteness, norm). Only then is its payload put into the store and the update recorded.

Memory: an upload's body (or its parts, joined) is written to a file in the store's directory as it arrives and
validated from there a tensor at a time, ``Context.validating`` uploads at once; nothing holds a whole upload in
memory, so the coordinator's memory does not grow with the number or size of uploads in flight."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Callable

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Path, Query, Request
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ...codec import CodecError, LazyUpdate, PayloadFile
from ...protocol import (
    KEY_PATTERN,
    MAX_LEASE_WAIT,
    MAX_PARTS,
    PARTS_CONTENT_TYPE,
    SHA256_PATTERN,
    UPLOAD_META_KEY,
    Heartbeat,
    HeartbeatReply,
    LeaseReply,
    PartReply,
    UploadMeta,
    UploadParts,
    UploadReply,
)
from ...validation import RejectedUpdateError, check_update
from .. import accounts, crud
from ..errors import ApiError
from ..store import Spool
from .auth import authorization
from .deps import Context, now

router = APIRouter(prefix="/v1/leases", tags=["leases"])
JOIN_BLOCK = 256 << 10  # parts are joined through a buffer of this size
MANIFEST_BYTES = 80 * MAX_PARTS + 1024  # a parts manifest: at most MAX_PARTS names of 64 hex digits, quoted
LeaseId = Path(pattern=r"^[0-9a-f]{32}$", description="a lease id from POST /v1/leases")


@router.post("", response_model=LeaseReply, summary="Lease a unit of work, waiting up to ?wait= s (worker token)")
async def lease(
    request: Request,
    wait: float = Query(0.0, ge=0, le=MAX_LEASE_WAIT, description="long polling: hold a 'wait' answer this long"),
    auth: str | None = Depends(authorization),
) -> LeaseReply:
    ctx = Context.of(request)
    deadline = time.monotonic() + wait
    while True:
        reply = await run_in_threadpool(_lease, ctx, auth)
        left = deadline - time.monotonic()
        if reply.status != "wait" or left <= 0 or await request.is_disconnected():
            return reply if wait == 0 else reply.model_copy(update={"retry_after_s": 0.0})
        await ctx.watch.wait(min(left, 2.0))  # also re-asks every 2 s: units reopened by expiry


def _lease(ctx: Context, auth: str | None) -> LeaseReply:
    def work(s: Session) -> LeaseReply:
        worker = accounts.authenticate(s, authorization=auth, spec=ctx.spec)
        return crud.lease(s, worker=worker, spec=ctx.spec, now=now())

    return ctx.db.transaction(work)


@router.post("/{lease_id}/heartbeat", response_model=HeartbeatReply, summary="Keep a lease alive (worker token)")
def heartbeat(
    body: Heartbeat, request: Request, lease_id: str = LeaseId, auth: str | None = Depends(authorization)
) -> HeartbeatReply:
    ctx = Context.of(request)

    def work(s: Session) -> float:
        worker = accounts.authenticate(s, authorization=auth, spec=ctx.spec)
        return crud.heartbeat(s, worker=worker, lease_id=lease_id, hb=body, spec=ctx.spec, now=now())

    return HeartbeatReply(lease_id=lease_id, expires_in_s=ctx.db.transaction(work))


@router.post("/{lease_id}/return", status_code=204, summary="Give a unit back, unfinished (worker token)")
async def give_back(request: Request, lease_id: str = LeaseId, auth: str | None = Depends(authorization)) -> None:
    ctx = Context.of(request)
    await run_in_threadpool(_give_back, ctx, lease_id, auth)
    ctx.watch.poke()  # its unit is open again: a held lease request may take it now


def _give_back(ctx: Context, lease_id: str, auth: str | None) -> None:
    def work(s: Session) -> None:
        worker = accounts.authenticate(s, authorization=auth)
        crud.return_lease(s, worker=worker, lease_id=lease_id, now=now())

    ctx.db.transaction(work)


@router.put(
    "/{lease_id}/result",
    response_model=UploadReply,
    summary="Upload a unit's result: a safetensors payload (worker token)",
    openapi_extra={"requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string"}}}}},
)
async def upload(
    request: Request,
    lease_id: str = LeaseId,
    idempotency_key: str = Header(pattern=KEY_PATTERN, description="the same key for every retry of one upload"),
    x_content_sha256: str = Header(pattern=r"^[0-9a-f]{64}$", description="sha256 of the body, hex"),
    auth: str | None = Depends(authorization),
) -> UploadReply:
    ctx = Context.of(request)
    payload: Spool | Callable[[], Spool]
    if request.headers.get("content-type", "").split(";")[0].strip() == PARTS_CONTENT_TYPE:
        manifest = await _small_body(request, MANIFEST_BYTES)
        payload = functools.partial(_assemble, ctx, manifest)  # after the idempotency and lease checks
    else:
        payload = await _spooled(request, ctx)  # bounded by the BodyLimit middleware, on disk, not in memory
    try:
        call = functools.partial(_upload, ctx, lease_id, idempotency_key, x_content_sha256, payload, auth)
        reply = await anyio.to_thread.run_sync(call, limiter=ctx.upload_threads)
    finally:
        if isinstance(payload, Spool):
            payload.discard()  # kept (moved into the store) if recorded; else deleted
    # the lease is done: its worker's next lease request (held, as it had two) may go on now, not at the watch's
    # next read of the database; and this process's applier applies the update without waiting for its tick
    ctx.on_record()
    ctx.watch.poke()
    return reply


@router.put(
    "/{lease_id}/parts/{sha256}",
    response_model=PartReply,
    summary="Upload one part of a large result, named by its sha256 (worker token, holder of the lease)",
    openapi_extra={"requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string"}}}}},
)
async def upload_part(
    request: Request,
    lease_id: str = LeaseId,
    sha256: str = Path(pattern=SHA256_PATTERN, description="sha256 of the body, hex"),
    auth: str | None = Depends(authorization),
) -> PartReply:
    ctx = Context.of(request)
    await run_in_threadpool(_part_allowed, ctx, lease_id, auth)  # strangers store nothing, not even for a while
    with await _spooled(request, ctx) as spool:  # bounded by the BodyLimit middleware (PART_BYTES)
        got = spool.finish()
        if got != sha256:
            raise ApiError("checksum-mismatch", f"part hashes to {got}, its URL names {sha256}")
        # an unreferenced file: what the result names is assembled from it; the GC removes it after its grace time
        spool.keep()
        return PartReply(sha256=sha256, bytes=spool.bytes)


async def _spooled(request: Request, ctx: Context) -> Spool:
    """The request's body written to a file in the store's directory as it arrives (hashed on the way)."""
    spool = ctx.store.spool()
    try:
        async for chunk in request.stream():
            spool.write(chunk)
        spool.finish()
    except BaseException:
        spool.discard()
        raise
    return spool


async def _small_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError("too-large", f"a parts manifest of more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _part_allowed(ctx: Context, lease_id: str, auth: str | None) -> None:
    with ctx.db.read_session() as s:
        worker = accounts.authenticate(s, authorization=auth, spec=ctx.spec)
        crud.own_lease(s, worker=worker, lease_id=lease_id, now=now(), lock=False)


def _assemble(ctx: Context, body: bytes) -> Spool:
    """The payload a parts manifest names: its parts, each checked against its name, joined in order into a new
    file (a block at a time), bounded by the upload limit; the usual checks (checksum, structure, update) follow
    on the whole."""
    try:
        parts = UploadParts.model_validate_json(body).parts
    except ValidationError as e:
        raise ApiError("invalid-body", f"a parts manifest is {{'parts': [sha256, ...]}} ({_short(e)})") from e
    bad = [p for p in parts if not re.fullmatch(SHA256_PATTERN, p)]
    if bad:
        raise ApiError("invalid-body", f"part names must be sha256 hex, got {bad[0][:80]!r}")
    missing = [p for p in parts if not ctx.store.has(p)]
    if missing:
        raise ApiError("missing-parts", f"{len(missing)} of {len(parts)} parts are not here: {', '.join(missing)}")
    sizes = [ctx.store.path(p).stat().st_size for p in parts]
    if sum(sizes) > ctx.upload_limit:
        raise ApiError("too-large", f"the parts add up to {sum(sizes)} bytes, above the limit of {ctx.upload_limit}")
    spool = ctx.store.spool()
    try:
        for p in parts:
            h = hashlib.sha256()
            with open(ctx.store.path(p), "rb") as f:
                for block in iter(lambda f=f: f.read(JOIN_BLOCK), b""):
                    h.update(block)
                    spool.write(block)
            if h.hexdigest() != p:  # a store damaged on disk: the part is dropped and asked for again
                ctx.store.path(p).unlink(missing_ok=True)
                raise ApiError("missing-parts", f"stored part {p} was damaged on disk and is dropped: send it again")
        spool.finish()
    except FileNotFoundError:  # collected meanwhile
        spool.discard()
        raise ApiError("missing-parts", "a part was collected while the result was assembled: send it again") from None
    except BaseException:
        spool.discard()
        raise
    return spool


def _upload(
    ctx: Context, lease_id: str, key: str, digest: str, payload: Spool | Callable[[], Spool], auth: str | None
) -> UploadReply:
    with ctx.db.read_session() as s:
        worker = accounts.authenticate(s, authorization=auth, spec=ctx.spec)
        wid = worker.id
        previous = crud.find_upload(s, worker=worker, key=key)
        if previous is not None:  # a retry of an upload that was recorded: the same answer, nothing new
            if previous.payload_sha256 != digest or previous.lease_id != lease_id:
                raise ApiError("idempotency-conflict", f"idempotency key {key} was used for another upload")
            return crud.upload_reply(previous, worker)
        samples = crud.own_lease(s, worker=worker, lease_id=lease_id, now=now(), lock=False).samples
    # a bounded number at once (each joins its parts through a buffer, then holds one tensor of its update
    # decoded), whatever the number of uploads in flight: the others wait on disk
    with ctx.validating:
        spool = payload() if callable(payload) else payload  # parts: read only for the lease's holder
        try:
            sha = spool.finish()
            if sha != digest:
                raise ApiError("checksum-mismatch", f"body hashes to {sha}, X-Content-SHA256 says {digest}")
            meta, norm, content = _validate(ctx, lease_id, spool, wid)
        except BaseException:
            spool.discard()
            raise
    with spool:  # deleted unless kept below
        with ctx.db.read_session() as s:
            replayed = crud.replay_of(s, content=content, lease_id=lease_id)
        if replayed is not None:
            ctx.db.transaction(lambda s: crud.count_rejected(s, worker_id=wid))
            raise ApiError(
                "replayed-upload", f"these tensors were already uploaded for another unit (update {replayed})"
            )
        if meta.samples != samples:
            raise ApiError(
                "invalid-payload", f"the upload reports {meta.samples} samples; lease {lease_id} has {samples}"
            )
        # the file first: a crash before the commit leaves an orphan for the GC, never a row without its payload
        spool.keep()
        nbytes = spool.bytes

    def record(s: Session) -> UploadReply:
        worker = accounts.authenticate(s, authorization=auth, spec=ctx.spec)
        u = crud.record_upload(
            s, worker=worker, lease_id=lease_id, key=key, sha=sha, nbytes=nbytes, meta=meta, norm=norm,
            content=content, spec=ctx.spec, flops_per_sample=ctx.flops_per_sample, now=now(),
        )  # fmt: skip
        return crud.upload_reply(u, worker)

    try:
        return ctx.db.transaction(record)
    except IntegrityError:  # the same upload raced itself (two retries at once): answer as the winner did
        with ctx.db.read_session() as s:
            worker = accounts.authenticate(s, authorization=auth)
            previous = crud.find_upload(s, worker=worker, key=key)
            if previous is None or previous.payload_sha256 != digest:
                raise ApiError("lease-finished", f"lease {lease_id} already has a result") from None
            return crud.upload_reply(previous, worker)


def _validate(ctx: Context, lease_id: str, spool: Spool, worker_id: int) -> tuple[UploadMeta, float, str]:
    """The spooled upload's checks, read from its file a tensor at a time: structure, metadata and codec, then the
    decoded update against the model's signature; returns (its metadata, its norm, the hash of its tensors)."""
    try:
        tensors = PayloadFile(spool.path, max_bytes=ctx.upload_limit)
    except CodecError as e:
        raise ApiError("invalid-payload", f"unreadable upload: {_short(e)}") from e
    with tensors:
        meta = dict(tensors.meta)
        try:
            if meta.get("codec") != ctx.spec.codec:
                raise CodecError(f"payload codec {meta.get('codec')!r}; this run's is {ctx.spec.codec!r}")
            info = UploadMeta.model_validate(json.loads(meta.pop(UPLOAD_META_KEY, "null")))
            update = LazyUpdate(tensors, meta)  # decoded tensor by tensor as the check reads it: one at a time
        except (CodecError, ValidationError, ValueError, TypeError, RecursionError) as e:  # RecursionError: JSON
            raise ApiError("invalid-payload", f"unreadable upload: {_short(e)}") from e
        if info.lease_id != lease_id:
            raise ApiError("invalid-payload", f"payload names lease {info.lease_id!r}, the URL {lease_id!r}")
        try:
            norm = check_update(update, ctx.signature, max_norm=ctx.spec.max_norm, what="upload")
        except RejectedUpdateError as e:
            ctx.db.transaction(lambda s: crud.count_rejected(s, worker_id=worker_id))
            raise ApiError("rejected-update", str(e)) from e
        except CodecError as e:  # a tensor that does not decode (its scales), met as the check reads it
            raise ApiError("invalid-payload", f"unreadable upload: {_short(e)}") from e
        return info, norm, crud.content_hash(tensors)


def _short(e: Exception) -> str:
    text = str(e).replace("\n", " ")
    return text if len(text) < 300 else text[:300] + "..."
