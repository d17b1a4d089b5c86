"""The run's description, the latest model manifest, and the store's shards (all public: shards are named by their
sha256, served with that as a strong ETag, with Range / If-Range, and immutable caching)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import FileResponse
from sqlalchemy import select

from ...protocol import API, SHA256_PATTERN, ModelManifest, RunInfo
from ..errors import ApiError
from ..models import RUN_ID, Checkpoint, Run
from ..runs import data_manifest
from .deps import Context

router = APIRouter(prefix=API, tags=["files"])


class ShardResponse(FileResponse):
    """A store file in 1 MiB reads (Starlette's 64 KiB cost a thread hand-off and a send each: 33 of them for
    every download of a 2 MB model, and an async worker downloads one per gradient)."""

    chunk_size = 1 << 20


@router.get("/run", response_model=RunInfo, summary="What the run trains and its data shards (public)")
def run_info(request: Request) -> RunInfo:
    ctx = Context.of(request)
    with ctx.db.read_session() as s:
        run = s.get(Run, RUN_ID)
        assert run is not None
        spec = ctx.spec
        return RunInfo(
            run_id=run.uid,
            dataset=spec.dataset,
            model=spec.model,
            algorithm=spec.algorithm,
            codec=spec.codec,
            block=spec.block,
            batch_size=spec.batch_size,
            limit=spec.limit,
            shard_samples=spec.shard_samples,
            data_shards=data_manifest(run),
        )


@router.get("/models/latest", response_model=ModelManifest, summary="The newest model version's shards (public)")
def latest(request: Request) -> ModelManifest:
    with Context.of(request).db.read_session() as s:
        cp = s.scalars(select(Checkpoint).order_by(Checkpoint.version.desc()).limit(1)).one()
        return ModelManifest.model_validate_json(cp.manifest)


@router.get(
    "/shards/{sha256}",
    summary="A shard by its sha256 (public; Range, If-Range, If-None-Match)",
    responses={200: {"content": {"application/octet-stream": {}}}, 206: {"description": "a byte range"}},
)
def shard(request: Request, sha256: str = Path(pattern=SHA256_PATTERN)) -> Response:
    store = Context.of(request).store
    path = store.path(sha256)
    if not path.is_file():
        raise ApiError("unknown-shard", f"no shard {sha256} in the store (superseded and collected, or never made)")
    etag = f'"{sha256}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"etag": etag})
    return ShardResponse(
        path,
        media_type="application/octet-stream",
        headers={"etag": etag, "cache-control": "public, max-age=31536000, immutable"},
    )
