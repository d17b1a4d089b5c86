"""Checkpoints: a model's ``state_dict`` in a safetensors file, with what is needed to rebuild it in the metadata.

The tensor names are the ``state_dict`` keys, so ``safetensors.torch.load_file`` reads the same file into PyTorch.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from ..creation import tensor
from ..data.idx import DataError

FORMAT = "vkblas-checkpoint-1"


def save(model: Any, path: str | os.PathLike[str], info: dict[str, Any]) -> None:
    """Write ``model.state_dict()`` to ``path``; ``info`` (JSON-serialisable) goes into the metadata."""
    arrays = {k: np.ascontiguousarray(v.detach().numpy()) for k, v in model.state_dict().items()}
    save_file(arrays, str(path), metadata={"format": FORMAT, "info": json.dumps(info)})


def load(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state as numpy arrays, info) of a checkpoint written by :func:`save`."""
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except (OSError, SafetensorError) as e:
        raise DataError(f"{path}: not a readable safetensors checkpoint ({e})") from e
    if meta.get("format") != FORMAT:
        raise DataError(f"{path}: not a vkblas training checkpoint (metadata format {meta.get('format')!r})")
    return arrays, json.loads(meta["info"])


def load_into(model: Any, state: dict[str, np.ndarray], device: Any) -> Any:
    """Load ``state`` into ``model`` with every tensor on ``device``."""
    model.load_state_dict({k: tensor(v, device=device) for k, v in state.items()})
    return model
