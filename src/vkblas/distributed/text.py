"""A character-level GPT trained through the coordinator (``serve shakespeare-char --model gpt-...``): the models,
the data shards of the tokenised training split, and a unit's loss.

A text data shard holds a run of tokens (int32); its *samples* are the blocks that start in it: sample ``i`` of a
shard is ``tokens[i : i + T]`` with ``tokens[i + 1 : i + T + 1]`` as its targets (``T`` the model's block size), so
a shard of ``S`` samples holds ``S + T`` tokens and a unit names blocks exactly as it names images
(:func:`shards.unit_indices`). The vocabulary is the corpus's sorted characters (nanoGPT's ``shakespeare_char``);
its size is fixed per dataset (:data:`VOCAB`) so a worker builds the model before it has any data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .codec import CodecError, from_payload, to_payload

FORMAT = "vkblas-text-shard/1"
VOCAB = {"shakespeare-char": 65}  # Tiny Shakespeare's 65 distinct characters
#: GPT shapes a run can train (nanoGPT's layout; no dropout, no biases: a unit is then a function of its lease)
GPT_SIZES: dict[str, dict[str, int]] = {
    "gpt-tiny": dict(n_layer=2, n_head=2, n_embd=32, block_size=32),  # 27 k parameters: tests
    "gpt-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256),  # nanoGPT's shakespeare_char, 10.7 M
    "gpt-50m": dict(n_layer=8, n_head=8, n_embd=704, block_size=256),  # 47.6 M: the coordinator benchmark
    "gpt-1.2b": dict(n_layer=24, n_head=16, n_embd=2048, block_size=1024),  # benchmarks/gpt_scale.py's shape
}


def is_text(dataset: str) -> bool:
    return dataset in VOCAB


def block_size(model: str) -> int:
    return GPT_SIZES[model]["block_size"]


def build_gpt(model: str, dataset: str) -> Any:
    """The GPT ``model`` for ``dataset``'s vocabulary, on the cpu (move it with ``.to``)."""
    from ..models import GPT, GPTConfig

    if model not in GPT_SIZES:
        raise ValueError(f"unknown GPT {model!r}: choose from {', '.join(GPT_SIZES)}")
    return GPT(GPTConfig(**GPT_SIZES[model], vocab_size=VOCAB[dataset], dropout=0.0, bias=False))


def train_tokens(dataset: str, data: str | None, limit: int | None, block: int) -> np.ndarray:
    """The training split's tokens (int32), cut to ``limit`` blocks; refuses a corpus of another vocabulary."""
    from ..data.text import ShakespeareChar

    corpus = ShakespeareChar(data, block_size=block)
    if len(corpus.vocab) != VOCAB[dataset]:
        raise ValueError(f"{corpus.path} has {len(corpus.vocab)} distinct characters; {dataset} runs expect "
                         f"{VOCAB[dataset]}")  # fmt: skip
    tokens = corpus.train.data.astype(np.int32)
    return tokens if limit is None else tokens[: limit + block]


def build_text_shards(dataset: str, tokens: np.ndarray, block: int, per_shard: int) -> list[tuple[bytes, int]]:
    """(shard bytes, samples) of a token array, in order; the same input gives the same bytes."""
    n = len(tokens) - block  # blocks with a full target
    if n < 1:
        raise ValueError(f"{len(tokens)} tokens hold no block of {block} tokens plus a target")
    out = []
    for start in range(0, n, per_shard):
        samples = min(per_shard, n - start)
        payload = to_payload({"tokens": tokens[start : start + samples + block]}, {"format": f"{FORMAT}:{dataset}"})
        out.append((payload, samples))
    return out


def parse_text_shard(data: bytes, dataset: str, block: int) -> np.ndarray:
    """The tokens of a text shard; :class:`CodecError` for anything else (another dataset, token ids outside the
    vocabulary, fewer tokens than one block and its target)."""
    from .shards import MAX_SHARD_BYTES

    tensors, meta = from_payload(data, max_bytes=MAX_SHARD_BYTES)
    if meta.get("format") != f"{FORMAT}:{dataset}" or set(tensors) != {"tokens"}:
        raise CodecError(f"not a {dataset} text shard (format {meta.get('format')!r}, entries {sorted(tensors)})")
    tokens = tensors["tokens"]
    if tokens.dtype != np.int32 or tokens.ndim != 1 or tokens.size <= block:
        raise CodecError(f"text shard: tokens {tokens.dtype} {tokens.shape}, need int32 [> {block}]")
    if tokens.min() < 0 or tokens.max() >= VOCAB[dataset]:
        raise CodecError(f"text shard: token ids outside [0, {VOCAB[dataset]})")
    return tokens


def blocks(tokens: np.ndarray, idx: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets), int64 ``[len(idx), block]``: the blocks starting at ``idx``."""
    rows = np.asarray(idx, np.int64)[:, None] + np.arange(block)
    return tokens[rows].astype(np.int64), tokens[rows + 1].astype(np.int64)


def val_blocks(dataset: str, data: str | None, block: int, count: int = 64, seed: int = 0) -> tuple:
    """``count`` blocks of the validation split drawn with a fixed seed: the coordinator's test set."""
    from ..data.text import ShakespeareChar

    val = ShakespeareChar(data, block_size=block).val
    idx = np.random.default_rng(seed).integers(0, len(val), count)
    return blocks(val.data, idx, block)
