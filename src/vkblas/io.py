"""Checkpoints: ``vkblas.save`` / ``vkblas.load`` in the **safetensors** format.

A state dict saved here loads in PyTorch with ``safetensors.torch.load_file`` and back, because keys are the same
dotted names (``layers.0.weight``) and the data is plain little-endian arrays. int64 data (PyTorch's
``num_batches_tracked``) is stored as int32 here after a range check, like every int64 input; float64 data stays
float64 on devices that have it (cpu) and becomes float32 elsewhere.

>>> import tempfile, os, vkblas
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> vkblas.save({"w": vkblas.ones(2, device="cpu")}, path)
>>> vkblas.load(path, device="cpu")["w"]
tensor([1., 1.])
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .creation import tensor
from .device import DeviceLike, resolve
from .dtypes import float64
from .tensor import Tensor

_SINGLE = "__tensor__"  # the key a lone tensor is saved under


def _check_path(f: Any) -> str:
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"expected a file path (str or os.PathLike), got {type(f).__name__}")
    return os.fspath(f)


def save(obj: Tensor | Mapping[str, Tensor], f: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write a tensor or a flat ``{name: tensor}`` dict (a ``state_dict``) to the safetensors file ``f``."""
    from safetensors.numpy import save_file

    path = _check_path(f)
    if isinstance(obj, Tensor):
        obj = {_SINGLE: obj}
    if not isinstance(obj, Mapping):
        raise TypeError(
            f"vkblas.save expects a Tensor or a dict of Tensors (safetensors holds only tensors), got "
            f"{type(obj).__name__}; save optimizer state with its tensors flattened into a dict"
        )
    arrays: dict[str, np.ndarray] = {}
    for k, v in obj.items():
        if not isinstance(k, str):
            raise TypeError(f"vkblas.save: keys must be strings, got {k!r}")
        if not isinstance(v, Tensor):
            raise TypeError(f"vkblas.save: value for key {k!r} is a {type(v).__name__}, not a Tensor")
        arr = v.detach().numpy()
        arrays[k] = arr if arr.flags.c_contiguous else np.array(arr, order="C")  # (ascontiguousarray makes 0-d 1-d)
    save_file(arrays, path, metadata=metadata)
    # safetensors creates the file with mode 0600; give it the mode any other new file gets (0644 under umask 022)
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def load(
    f: str | os.PathLike[str], device: DeviceLike = None, map_location: DeviceLike = None
) -> Tensor | dict[str, Tensor]:
    """Read a safetensors file: a dict of tensors, or the tensor itself if it was saved alone.

    ``map_location`` is accepted as PyTorch's name for ``device``.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = _check_path(f)
    try:
        arrays = load_file(path)
    except SafetensorError as e:
        raise ValueError(f"vkblas.load: {path!r} is not a readable safetensors file ({e})") from e
    except TypeError as e:  # e.g. bfloat16, which numpy cannot hold
        raise ValueError(f"vkblas.load: {path!r} holds a dtype that vkblas cannot read ({e})") from e
    dev = device if device is not None else map_location
    keep64 = resolve(dev).supports(float64)  # float64 stays float64 where the device has it (cpu)
    out = {
        k: tensor(a, dtype=float64 if keep64 and a.dtype == np.float64 else None, device=dev) for k, a in arrays.items()
    }
    if set(out) == {_SINGLE}:
        return out[_SINGLE]
    return out
