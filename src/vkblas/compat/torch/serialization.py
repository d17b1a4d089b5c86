"""``torch.save`` / ``torch.load`` under ``vkblas run``.

A ``state_dict`` (a flat dict of tensors) saved to a path is a **safetensors** file, as ``vkblas.save`` writes it:
it loads in PyTorch with ``safetensors.torch.load_file``. Anything else (a checkpoint dict with the optimizer state,
numbers and configs, as nanoGPT saves) is pickled with :mod:`vkblas.pickling` after a header line. ``load`` reads
both, with ``weights_only=True`` by default (PyTorch >= 2.6: plain containers, numbers, strings and tensors only).
Tensors are made on ``map_location`` (a device or a device name), else on the default device. PyTorch's own zip
checkpoints cannot be read: the error says how to convert one.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import IO, Any

from ... import io as vkio
from ... import pickling
from ...device import device as Device
from ...tensor import Tensor

MAGIC = b"VKBLAS-PICKLE-1\n"
_ZIP = b"PK\x03\x04"


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())
    )


def save(obj: Any, f: str | os.PathLike[str] | IO[bytes], **kwargs: Any) -> None:
    if isinstance(f, (str, os.PathLike)) and _is_state_dict(obj):
        vkio.save(dict(obj), f)
        return
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as out:
            out.write(MAGIC)
            pickling.dump(obj, out)
        return
    f.write(MAGIC)
    pickling.dump(obj, f)


def _device(map_location: Any) -> Any:
    if map_location is None or isinstance(map_location, (str, Device)):
        return map_location
    raise TypeError(
        f"torch.load: map_location must be a device or a device name under vkblas run, got "
        f"{type(map_location).__name__}"
    )


def load(
    f: str | os.PathLike[str] | IO[bytes], map_location: Any = None, *, weights_only: bool = True, **kwargs: Any
) -> Any:
    device = _device(map_location)
    raw = open(f, "rb").read() if isinstance(f, (str, os.PathLike)) else f.read()  # noqa: SIM115
    name = f if isinstance(f, (str, os.PathLike)) else "<file>"
    if raw.startswith(MAGIC):
        return pickling.load(io.BytesIO(raw[len(MAGIC) :]), device=device, weights_only=weights_only)
    if raw.startswith(_ZIP):
        raise ValueError(
            f"torch.load: {name} is a checkpoint written by PyTorch itself (zip format), which vkblas cannot read; "
            "in PyTorch, save its state_dict with safetensors.torch.save_file(state_dict, 'model.safetensors') and "
            "load that file"
        )
    if isinstance(f, (str, os.PathLike)):
        return vkio.load(f, device=device)
    raise ValueError(f"torch.load: {name} is not a file written by torch.save under vkblas run")
