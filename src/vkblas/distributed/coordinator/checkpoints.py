"""Model versions in the store: the global model (``algorithms.GlobalModel``) written as shards of its weight
tensors (what workers download) plus one file of everything else in its ``state_dict`` (optimizer state, version),
and read back by a (re)starting applier. A version may be published with its weights alone (``async`` writes the
state file at most every ``checkpoint_seconds``); a restart loads the newest version that has a state file and
replays the updates applied since (see :mod:`.applier`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np

from ..algorithms import GlobalModel
from ..codec import CodecError, PayloadFile, payload_chunks
from ..nets import initial_params
from ..protocol import ModelManifest, ShardRef
from ..shards import MAX_SHARD_BYTES, MODEL_FORMAT, MODEL_SHARD_BYTES, PIECE, iter_model_shards, piece_of
from .config import RunSpec
from .store import Store

STATE_FORMAT = "vkblas-model-state/1"


def new_model(spec: RunSpec, params: Mapping[str, np.ndarray] | None = None) -> GlobalModel:
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


class StoredWeights(Mapping[str, np.ndarray]):
    """The weights of a stored version, read from its shards one tensor at a time when asked for (a tensor cut
    into pieces is joined from them): a (re)starting applier builds its model from this holding one tensor beside
    it, not a second copy of the model. The shards are checked against their names and their layout (float32
    tensors, pieces that cover each tensor exactly once) when this is made; ``shapes`` needs no tensor read."""

    def __init__(self, store: Store, manifest: ModelManifest) -> None:
        self.store = store
        # name -> [(shard sha256, entry, first value, values)]
        self._where: dict[str, list[tuple[str, str, int, int]]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for ref in manifest.shards:
            with store.open_payload(ref.sha256, max_bytes=MAX_SHARD_BYTES) as shard:
                if shard.meta.get("format") != MODEL_FORMAT or not len(shard):
                    raise CodecError(f"not a model shard (format {shard.meta.get('format')!r}, {len(shard)} tensors)")
                for key in shard:
                    dtype, shape = shard.info(key)
                    if dtype != np.float32:
                        raise CodecError(f"model shard tensors must be float32: {key} {dtype}")
                    if PIECE not in key:
                        self._where[key], self.shapes[key] = [(ref.sha256, key, 0, math.prod(shape))], shape
                        continue
                    try:
                        name, start, whole = piece_of(key)
                    except ValueError as e:
                        raise CodecError(str(e)) from None
                    if len(shape) != 1 or start + shape[0] > math.prod(whole):
                        raise CodecError(f"piece {key!r} of shape {shape} does not lie inside a tensor of {whole}")
                    if self.shapes.setdefault(name, whole) != whole:
                        raise CodecError(f"the pieces of {name!r} name different shapes")
                    self._where.setdefault(name, []).append((ref.sha256, key, start, shape[0]))
        for name, where in self._where.items():  # pieces: every value covered exactly once
            if len(where) == 1 and where[0][1] == name:
                continue
            where.sort(key=lambda w: w[2])
            at = 0
            for _, _, start, size in where:
                if start != at:
                    raise CodecError(f"the pieces of {name!r} do not cover it once (a piece at {start}, expected {at})")
                at += size
            if at != math.prod(self.shapes[name]):
                raise CodecError(f"the pieces of {name!r} hold {at} of its {math.prod(self.shapes[name])} values")

    def __getitem__(self, name: str) -> np.ndarray:
        where, shape = self._where[name], self.shapes[name]
        if len(where) == 1 and where[0][1] == name:
            with PayloadFile(self.store.path(where[0][0])) as shard:
                return shard[name]
        out = np.empty(math.prod(shape), np.float32)
        for sha, key, start, _ in where:
            with PayloadFile(self.store.path(sha)) as shard:
                piece = shard[key]
            out[start : start + piece.size] = piece
        return out.reshape(shape)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def read_params(store: Store, manifest: ModelManifest) -> dict[str, np.ndarray]:
    """The weights of a stored version, as a dict (all in memory: tests, tools)."""
    return dict(StoredWeights(store, manifest))


def read(store: Store, spec: RunSpec, manifest: ModelManifest, state_sha: str) -> GlobalModel:
    """The global model of a stored version (weights, optimizer state, version), read a tensor at a time: the
    model is built holding one tensor of the files beside it."""
    model = new_model(spec, StoredWeights(store, manifest))
    with store.open_payload(state_sha) as state:
        if state.meta.get("format") != STATE_FORMAT:
            raise OSError(f"store file {state_sha} is not a model state (format {state.meta.get('format')!r})")
        model.load_state(state)
    if model.version != manifest.version:
        raise OSError(f"state file {state_sha} is of version {model.version}, its manifest of {manifest.version}")
    return model
