"""Shards on the worker, by content hash: the model's weights of the version a lease names (only the tensors that
changed are downloaded) and the data shards (downloaded once, or taken from a local copy of the dataset when it
cuts into the very same bytes)."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..protocol import DataPart, DataSlice, ModelManifest, RunInfo
from ..shards import (
    Gather,
    UnitSamples,
    assemble,
    build_shards,
    normalise,
    parse_model_shard,
    parse_shard,
    raw_split,
    unit_indices,
)
from ..text import block_size, blocks, build_text_shards, is_text, parse_text_shard, train_tokens
from .client import Client


class ModelCache:
    """``fetchers`` shards are downloaded at once (each resumable and verified by :meth:`Client.download`), so a
    model of hundreds of shards is not fetched one round trip after another."""

    def __init__(self, client: Client, directory: Path, fetchers: int = 4) -> None:
        self.client, self.directory, self.fetchers = client, directory / "model", fetchers
        self.arrays: dict[str, dict[str, np.ndarray]] = {}  # sha256 -> the shard's entries

    def params(self, manifest: ModelManifest) -> dict[str, np.ndarray]:
        missing = list(dict.fromkeys(ref.sha256 for ref in manifest.shards if ref.sha256 not in self.arrays))
        if missing:
            with ThreadPoolExecutor(min(self.fetchers, len(missing)), thread_name_prefix="fetch") as pool:
                paths = pool.map(lambda sha: self.client.download(sha, self.directory), missing)
                for sha, path in zip(missing, paths, strict=True):  # raises the first failure
                    self.arrays[sha] = parse_model_shard(path.read_bytes())
        entries: dict[str, np.ndarray] = {}
        for ref in manifest.shards:
            entries.update(self.arrays[ref.sha256])
        keep = {ref.sha256 for ref in manifest.shards}
        for sha in [s for s in self.arrays if s not in keep]:  # a superseded tensor is never needed again
            del self.arrays[sha]
            (self.directory / sha).unlink(missing_ok=True)
        return assemble(entries)


class DataCache:
    def __init__(self, client: Client, info: RunInfo, directory: Path, local: str | None = None) -> None:
        self.client, self.info, self.directory = client, info, directory / "data"
        self.local: dict[int, bytes] = {}
        self.arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.tokens: dict[int, np.ndarray] = {}  # text runs: each shard's tokens
        if local is not None:
            self._use_local(local)

    def _use_local(self, local: str) -> None:
        """Cut the local copy as the coordinator does; keep the shards whose hashes match the run's."""
        if is_text(self.info.dataset):
            block = block_size(self.info.model)
            tokens = train_tokens(self.info.dataset, local, self.info.limit, block)
            payloads = [p for p, _ in build_text_shards(self.info.dataset, tokens, block, self.info.shard_samples)]
        else:
            images, labels = raw_split(self.info.dataset, True, local, self.info.limit)
            payloads = build_shards(self.info.dataset, images, labels, self.info.shard_samples)
        for i, payload in enumerate(payloads):
            if (
                i < len(self.info.data_shards)
                and hashlib.sha256(payload).hexdigest() == self.info.data_shards[i].sha256
            ):
                self.local[i] = payload

    def slice(self, data: DataSlice) -> UnitSamples:
        """The samples of a unit (inputs and labels, gathered a batch at a time), from each shard it spans."""
        return UnitSamples([self._part(part) for part in data.parts()])

    def _part(self, part: DataPart) -> tuple[Gather, np.ndarray]:
        if not 0 <= part.shard < len(self.info.data_shards):
            raise ValueError(f"unit names data shard {part.shard}; the run has {len(self.info.data_shards)}")
        ref = self.info.data_shards[part.shard]
        if part.shard not in self.arrays and part.shard not in self.tokens:
            data = self.local.pop(part.shard, None)
            if data is None:
                data = self.client.download(ref.sha256, self.directory).read_bytes()
            if is_text(self.info.dataset):
                self.tokens[part.shard] = parse_text_shard(data, self.info.dataset, block_size(self.info.model))
            else:
                images, labels = parse_shard(data, self.info.dataset)
                self.arrays[part.shard] = (normalise(self.info.dataset, images), labels)
        if is_text(self.info.dataset):  # a sample is a block: inputs and their next tokens
            tokens, block = self.tokens[part.shard], block_size(self.info.model)
            idx = unit_indices(len(tokens) - block, part.seed, part.offset, part.samples)
            return (lambda i: blocks(tokens, i, block)), idx
        x, y = self.arrays[part.shard]
        idx = unit_indices(len(y), part.seed, part.offset, part.samples)
        return (lambda i: (x[i], y[i])), idx
