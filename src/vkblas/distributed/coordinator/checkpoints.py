"""Model versions in the store: the global model (``algorithms.GlobalModel``) written as shards of its weight
tensors (what workers download) plus one file of everything else in its ``state_dict`` (optimizer state, version),
and read back by a (re)starting applier. A version may be published with its weights alone (``async`` writes the
state file at most every ``checkpoint_seconds``); a restart loads the newest version that has a state file and
replays the updates applied since (see :mod:`.applier`)."""

from __future__ import annotations

import numpy as np

from ..algorithms import GlobalModel
from ..codec import from_payload, payload_chunks
from ..nets import initial_params
from ..protocol import ModelManifest, ShardRef
from ..shards import MODEL_SHARD_BYTES, assemble, iter_model_shards, parse_model_shard
from .config import RunSpec
from .store import Store

STATE_FORMAT = "vkblas-model-state/1"


def new_model(spec: RunSpec, params: dict[str, np.ndarray] | None = None) -> GlobalModel:
    """The run's global model: the initial weights ``vkblas train`` would start from (same seed), or ``params``."""
    if params is None:
        params = initial_params(spec.model, spec.dataset, spec.seed)
    return GlobalModel(
        params,
        spec.algorithm,
        spec.optimizer,
        spec.learning_rate,
        outer_lr=spec.outer_lr,
        outer_momentum=spec.outer_momentum,
    )


def write(store: Store, model: GlobalModel, shard_bytes: int = MODEL_SHARD_BYTES) -> tuple[ModelManifest, str]:
    """Store the model; return (its manifest, the sha256 of its state file). Streamed: one weight shard's bytes at
    a time, and the state file tensor by tensor, so writing holds no copy of the whole model."""
    return write_weights(store, model, shard_bytes), write_state(store, model)


def write_weights(store: Store, model: GlobalModel, shard_bytes: int = MODEL_SHARD_BYTES) -> ModelManifest:
    """Store the weight shards alone (what workers download): a version published without its optimizer state."""
    shards = []
    for i, chunks in enumerate(iter_model_shards(model.shapes, model.param, shard_bytes)):
        sha, nbytes = store.put_stream(chunks)
        shards.append(ShardRef(name=f"model-{i:04d}", sha256=sha, bytes=nbytes))
    return ModelManifest(version=model.version, shards=shards)


def write_state(store: Store, model: GlobalModel) -> str:
    """Store everything but the weights (version, optimizer state); return the file's sha256."""
    entries, get = model.state_entries()
    state_sha, _ = store.put_stream(payload_chunks(entries, get, {"format": STATE_FORMAT}))
    return state_sha


def read_params(store: Store, manifest: ModelManifest) -> dict[str, np.ndarray]:
    entries: dict[str, np.ndarray] = {}
    for ref in manifest.shards:
        entries.update(parse_model_shard(store.get(ref.sha256)))
    return assemble(entries)


def read(store: Store, spec: RunSpec, manifest: ModelManifest, state_sha: str) -> GlobalModel:
    """The global model of a stored version (weights, optimizer state, version)."""
    params = read_params(store, manifest)
    state, meta = from_payload(store.get(state_sha))
    if meta.get("format") != STATE_FORMAT:
        raise OSError(f"store file {state_sha} is not a model state (format {meta.get('format')!r})")
    model = new_model(spec, params)
    model.load_state_dict({**params, **state})
    if model.version != manifest.version:
        raise OSError(f"state file {state_sha} is of version {model.version}, its manifest of {manifest.version}")
    return model
