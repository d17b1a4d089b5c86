"""What the coordinator serves as content-addressed shards, for both of its sides: the model's weights (small
tensors grouped, large ones cut into pieces) and the dataset, and the samples of a work unit.

A model shard is a safetensors file holding some of the model's tensors, or a piece of one, and no version, so a
shard whose tensors did not change between two versions keeps its name and is never downloaded twice.

The coordinator cuts the training split into shards of ``SHARD_SAMPLES`` raw images (uint8) and labels, each a
safetensors file named by its sha256; a volunteer downloads the shards its units name (or builds them from its own
copy of the dataset, used only if the hashes match). A unit names its samples by ``(shard, seed, offset,
samples)``: positions ``offset .. offset + samples`` of the permutation of the shard drawn from ``seed``
(:func:`unit_indices`), so anyone holding the shard can recompute exactly the same batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from .codec import CodecError, from_payload, payload_chunks, to_payload

SHARD_SAMPLES = 10_000
FORMAT = "vkblas-data-shard/1"
MODEL_FORMAT = "vkblas-model-shard/1"
_MODEL_META = {"format": MODEL_FORMAT}
MAX_SHARD_BYTES = 256 << 20
MODEL_SHARD_BYTES = 16 << 20
PIECE = "@"  # ``name@start``: a piece of a tensor cut across shards


def model_shards(params: Mapping[str, np.ndarray], max_bytes: int = MODEL_SHARD_BYTES) -> list[bytes]:
    """The model's float32 tensors, in order, as shards of about ``max_bytes`` (see :func:`iter_model_shards`)."""
    shapes = {name: np.shape(value) for name, value in params.items()}
    return [b"".join(shard) for shard in iter_model_shards(shapes, lambda name: params[name], max_bytes)]


def iter_model_shards(
    shapes: Mapping[str, tuple[int, ...]], get: Callable[[str], np.ndarray], max_bytes: int = MODEL_SHARD_BYTES
) -> Iterator[Iterator[bytes | memoryview]]:
    """The shards of the tensors named in ``shapes`` (``get(name)`` reads one), each as the chunks of its bytes
    (:func:`codec.payload_chunks`), so a writer holds one tensor and never the whole model: small tensors are
    grouped up to ``max_bytes``; a tensor larger than that is cut, flattened, into pieces of ``max_bytes``
    (entries ``name@start:d0xd1...``), so a 5 GB model is hundreds of resumable pieces of bounded size. The same
    tensors give the same bytes (the same names). Consume each shard before asking for the next."""
    if max_bytes < 4:
        raise ValueError(f"max_bytes must hold one float32 value, got {max_bytes}")
    group: list[str] = []
    size = 0
    f32 = np.dtype(np.float32)
    for name, shape in shapes.items():
        if PIECE in name:
            raise ValueError(f"tensor name {name!r} holds {PIECE!r}, which model shards reserve for pieces")
        nbytes = 4 * math.prod(shape)
        if group and size + min(nbytes, max_bytes + 1) > max_bytes:
            yield payload_chunks([(k, f32, tuple(shapes[k])) for k in group], get, _MODEL_META)
            group, size = [], 0
        if nbytes > max_bytes:
            flat = np.asarray(get(name), np.float32).reshape(-1)
            step, dims = max_bytes // 4, "x".join(str(d) for d in shape)
            for start in range(0, flat.size, step):
                piece = flat[start : start + step]
                key = f"{name}{PIECE}{start}:{dims}"
                yield payload_chunks([(key, f32, piece.shape)], lambda _k, p=piece: p, _MODEL_META)
            del flat
            continue
        group.append(name)
        size += nbytes
    if group:
        yield payload_chunks([(k, f32, tuple(shapes[k])) for k in group], get, _MODEL_META)


def piece_of(key: str) -> tuple[str, int, tuple[int, ...]]:
    """(tensor name, first value, the tensor's shape) of a piece's entry name; ValueError if malformed."""
    name, _, rest = key.rpartition(PIECE)
    start, _, dims = rest.partition(":")
    if not name or not start.isdigit() or not all(d.isdigit() for d in dims.split("x")):
        raise ValueError(f"malformed piece name {key[:200]!r}")
    return name, int(start), tuple(int(d) for d in dims.split("x"))


def parse_model_shard(data: bytes) -> dict[str, np.ndarray]:
    """The entries of a model shard's bytes (whole tensors, and pieces ``name@start:shape``, which
    :func:`assemble` joins); :class:`CodecError` for anything else."""
    tensors, meta = from_payload(data, max_bytes=MAX_SHARD_BYTES)
    if meta.get("format") != MODEL_FORMAT or not tensors:
        raise CodecError(f"not a model shard (format {meta.get('format')!r}, {len(tensors)} tensors)")
    bad = [f"{k} {v.dtype}" for k, v in tensors.items() if v.dtype != np.float32]
    if bad:
        raise CodecError(f"model shard tensors must be float32: {bad}")
    for key, value in tensors.items():
        if PIECE in key:
            try:
                _, start, shape = piece_of(key)
            except ValueError as e:
                raise CodecError(str(e)) from None
            if value.ndim != 1 or start + value.size > math.prod(shape):
                raise CodecError(f"piece {key!r} of shape {value.shape} does not lie inside a tensor of {shape}")
    return tensors


def assemble(entries: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's tensors from the entries of its shards: pieces joined into their tensors (every value covered
    exactly once, else :class:`CodecError`), whole tensors as they are."""
    out: dict[str, np.ndarray] = {}
    parts: dict[str, list[tuple[int, tuple[int, ...], np.ndarray]]] = {}
    for key, value in entries.items():
        if PIECE in key:
            name, start, shape = piece_of(key)
            parts.setdefault(name, []).append((start, shape, value))
            out.setdefault(name, value)  # a placeholder keeps the order
        else:
            out[key] = value
    for name, pieces in parts.items():
        pieces.sort(key=lambda p: p[0])
        shape, at = pieces[0][1], 0
        for start, whole, value in pieces:
            if whole != shape or start != at:
                raise CodecError(f"the pieces of {name!r} do not cover it once (a piece at {start}, expected {at})")
            at += value.size
        if at != math.prod(shape):
            raise CodecError(f"the pieces of {name!r} hold {at} of its {math.prod(shape)} values")
        out[name] = np.concatenate([v for _, _, v in pieces]).reshape(shape)
    return out


def raw_split(dataset: str, train: bool, data: str | None = None, limit: int | None = None) -> tuple:
    """(uint8 images [N, H, W], int32 labels [N]) of a split, the first ``limit`` only, as ``vkblas train`` reads
    them (``training.fit.load_dataset``) but before the transform."""
    from ..training.fit import load_dataset

    ds = load_dataset(dataset, train, data, limit)
    base = getattr(ds, "dataset", ds)  # a Subset when limited
    n = len(ds)
    return np.ascontiguousarray(base.data[:n]), np.ascontiguousarray(base.targets[:n], dtype=np.int32)


def build_shards(dataset: str, images: np.ndarray, labels: np.ndarray, per_shard: int = SHARD_SAMPLES) -> list[bytes]:
    """The shards (safetensors bytes) of a split, in order; the same input gives the same bytes."""
    if per_shard < 1:
        raise ValueError(f"per_shard must be >= 1, got {per_shard}")
    out = []
    for start in range(0, len(labels), per_shard):
        tensors = {"images": images[start : start + per_shard], "labels": labels[start : start + per_shard]}
        # one metadata entry: safetensors writes several in hash-map order, so the bytes (the name) would vary
        out.append(to_payload(tensors, {"format": f"{FORMAT}:{dataset}"}))
    return out


def parse_shard(data: bytes, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of a shard's bytes; :class:`CodecError` for anything that is not a shard of ``dataset``."""
    tensors, meta = from_payload(data, max_bytes=MAX_SHARD_BYTES)
    if meta.get("format") != f"{FORMAT}:{dataset}":
        raise CodecError(f"not a {dataset} data shard (format {meta.get('format')!r})")
    images, labels = tensors.get("images"), tensors.get("labels")
    if images is None or labels is None or set(tensors) != {"images", "labels"}:
        raise CodecError(f"a data shard holds images and labels, not {sorted(tensors)}")
    if images.dtype != np.uint8 or labels.dtype != np.int32 or images.ndim != 3 or labels.shape != images.shape[:1]:
        raise CodecError(f"data shard: images {images.dtype} {images.shape}, labels {labels.dtype} {labels.shape}")
    return images, labels


def unit_seed(run_seed: int, epoch: int, shard: int) -> int:
    """The permutation seed of one shard in one epoch."""
    return int(np.random.SeedSequence([run_seed, epoch, shard]).generate_state(1)[0])


def shard_order(run_seed: int, epoch: int, n_shards: int) -> list[int]:
    """The order in which an epoch visits the shards."""
    return [int(i) for i in np.random.default_rng([run_seed, epoch, 1 << 20]).permutation(n_shards)]


def unit_indices(shard_samples: int, seed: int, offset: int, samples: int) -> np.ndarray:
    """Positions of a unit's samples in its shard."""
    if not 0 <= offset < offset + samples <= shard_samples:
        raise ValueError(f"unit [{offset}, {offset + samples}) lies outside a shard of {shard_samples} samples")
    return np.random.default_rng(seed).permutation(shard_samples)[offset : offset + samples]


def normalise(dataset: str, images: np.ndarray) -> np.ndarray:
    """uint8 images -> the float32 ``[N, 1, H, W]`` input ``vkblas train`` feeds the model."""
    from ..data.transforms import Compose, Normalize, ToTensor
    from ..training.fit import DATASETS

    source = DATASETS[dataset].source
    return Compose([ToTensor(), Normalize((source.mean,), (source.std,))])(images)


Gather = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class UnitSamples:
    """A unit's samples: ``parts``, each the positions ``idx`` in one shard and ``gather``, which turns positions
    of that shard into (inputs, targets). Batches are gathered as training reaches them (a batch may take the end
    of one part and the start of the next): gathering a whole unit first copied up to 188 MB (a 60 000-image unit)
    before the first step, ~0.1 s a unit that the worker spent idle, and held the copy for the whole unit."""

    def __init__(self, parts: list[tuple[Gather, np.ndarray]]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(idx) for _, idx in self.parts)

    def batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Consecutive batches of at most ``batch_size``, in the unit's order."""
        pending: list[tuple[np.ndarray, np.ndarray]] = []
        have = 0
        for gather, idx in self.parts:
            start = 0
            while start < len(idx):
                take = min(batch_size - have, len(idx) - start)
                pending.append(gather(idx[start : start + take]))
                have, start = have + take, start + take
                if have == batch_size:
                    yield _joined(pending)
                    pending, have = [], 0
        if pending:
            yield _joined(pending)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole unit at once (a gradient unit is one batch)."""
        return _joined([gather(idx) for gather, idx in self.parts])


def _joined(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if len(pieces) == 1:
        return pieces[0]
    return np.concatenate([x for x, _ in pieces]), np.concatenate([y for _, y in pieces])
