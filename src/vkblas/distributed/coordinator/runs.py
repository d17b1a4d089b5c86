"""Creating the run at a coordinator's first start (data shards and version 0 into the store, the run's row into
the database), and reading it back at every later start."""

from __future__ import annotations

import json
import time
import uuid

from sqlalchemy import select

from ..protocol import DataShardRef, ModelManifest
from ..shards import build_shards, raw_split
from ..text import block_size, build_text_shards, is_text, train_tokens
from . import checkpoints
from .config import RunSpec
from .db import Database
from .models import RUN_ID, Checkpoint, Run
from .store import Store


def create_or_resume(db: Database, store: Store, spec: RunSpec, data: str | None) -> bool:
    """Create the run of ``spec`` unless the database holds it already (then ``spec`` must be the same);
    return True when it was created."""
    with db.read_session() as s:
        run = s.get(Run, RUN_ID)
        if run is not None:
            stored = RunSpec.model_validate_json(run.spec)
            if stored != spec:
                diff = {k: (v, getattr(spec, k)) for k, v in stored.model_dump().items() if getattr(spec, k) != v}
                raise ValueError(
                    "the database holds a run with other options (option: stored vs given): "
                    + ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in diff.items())
                    + "; restart with the same options, or use another --db and --store"
                )
            return False
    refs = [
        DataShardRef(name=f"train-{i:04d}", sha256=store.put(payload), bytes=len(payload), samples=n)
        for i, (payload, n) in enumerate(data_shards(spec, data))
    ]
    split_samples = sum(r.samples for r in refs)
    manifest, state_sha = checkpoints.write(store, checkpoints.new_model(spec))
    now = time.time()
    with db.session() as s:
        s.add(
            Run(
                id=RUN_ID,
                uid=uuid.uuid4().hex[:16],
                spec=spec.model_dump_json(),
                data_manifest=json.dumps([r.model_dump() for r in refs]),
                state="running",
                created_at=now,
                samples_total=spec.samples if spec.samples is not None else spec.epochs * split_samples,
                samples_leased=0,
                cursor_epoch=0,
                cursor_pos=0,
                cursor_offset=0,
                version=0,
                round_opened_at=now,
                samples_applied=0,
                apply_cpu_s=0.0,
                updates_applied=0,
            )
        )
        s.add(
            Checkpoint(
                version=0,
                manifest=manifest.model_dump_json(),
                state_sha256=state_sha,
                last_seq=0,
                samples_applied=0,
                created_at=now,
            )
        )
    return True


def data_shards(spec: RunSpec, data: str | None) -> list[tuple[bytes, int]]:
    """(bytes, samples) of the run's training shards: images and labels, or tokens (a sample is a block)."""
    if is_text(spec.dataset):
        block = block_size(spec.model)
        return build_text_shards(spec.dataset, train_tokens(spec.dataset, data, spec.limit, block), block,
                                 spec.shard_samples)  # fmt: skip
    images, labels = raw_split(spec.dataset, True, data, spec.limit)
    payloads = build_shards(spec.dataset, images, labels, spec.shard_samples)
    return [(p, min(spec.shard_samples, len(labels) - i * spec.shard_samples)) for i, p in enumerate(payloads)]


def load_spec(db: Database) -> RunSpec:
    with db.read_session() as s:
        run = s.get(Run, RUN_ID)
        if run is None:
            raise RuntimeError("the database holds no run: start it with 'vkblas distributed serve'")
        return RunSpec.model_validate_json(run.spec)


def data_manifest(run: Run) -> list[DataShardRef]:
    return [DataShardRef.model_validate(r) for r in json.loads(run.data_manifest)]


def manifest_of(s, version: int) -> ModelManifest:  # type: ignore[no-untyped-def]
    cp = s.scalar(select(Checkpoint).where(Checkpoint.version == version))
    if cp is None:
        raise LookupError(f"no checkpoint of version {version}")
    return ModelManifest.model_validate_json(cp.manifest)
