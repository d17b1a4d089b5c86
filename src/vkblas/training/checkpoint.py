"""Checkpoints: a model's ``state_dict`` saved with ``vkblas.save`` (safetensors), plus what is needed to rebuild
the model (dataset, architecture, training config, accuracy) as JSON in the file's metadata.

The tensor names are the ``state_dict`` keys, so ``safetensors.torch.load_file`` reads the same file into PyTorch.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from .. import io
from ..creation import tensor
from ..data.idx import DataError
from ..tensor import Tensor

FORMAT = "vkblas-checkpoint-1"


def save(model: Any, path: str | os.PathLike[str], info: dict[str, Any]) -> None:
    """Write ``model.state_dict()`` to ``path``; ``info`` (JSON-serialisable) goes into the metadata. Atomic: the
    file is written beside ``path`` and renamed over it, so a run stopped mid-write keeps the previous checkpoint."""
    part = f"{os.fspath(path)}.part"
    try:
        io.save(model.state_dict(), part, metadata={"format": FORMAT, "info": json.dumps(info)})
        os.replace(part, path)
    finally:
        if os.path.exists(part):
            os.remove(part)


def read_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``info`` a checkpoint was saved with; a clear error for anything that is not such a checkpoint."""
    try:
        with safe_open(os.fspath(path), framework="numpy") as f:
            meta = f.metadata() or {}
    except (OSError, SafetensorError) as e:
        raise DataError(f"{path}: not a readable safetensors checkpoint ({e})") from e
    if meta.get("format") != FORMAT:
        raise DataError(f"{path}: not a vkblas training checkpoint (metadata format {meta.get('format')!r})")
    return json.loads(meta["info"])


def load(path: str | os.PathLike[str], device: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(state dict with tensors on ``device``, info) of a checkpoint written by :func:`save`."""
    info = read_info(path)
    state = io.load(path, device=device)
    assert isinstance(state, dict)
    return state, info


def load_into(model: Any, state: dict[str, np.ndarray], device: Any) -> Any:
    """Load numpy ``state`` into ``model`` with every tensor on ``device``."""
    model.load_state_dict({k: tensor(v, device=device) for k, v in state.items()})
    return model
