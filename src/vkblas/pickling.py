"""Pickling objects that hold tensors: each tensor travels as its dtype, shape and bytes, and is made again on the
device the reader asks for.

Device memory cannot be pickled, so a plain ``pickle`` of a tensor is refused; these functions pickle everything
else as usual. They carry DataLoader batches and datasets between processes, and ``torch.save`` / ``torch.load``
under ``vkblas run``. ``weights_only=True`` (PyTorch's default since 2.6) reads only plain containers, numbers,
strings and tensors, so a file from elsewhere cannot run code.

>>> import vkblas
>>> obj = loads(dumps({"w": vkblas.ones(2, device="cpu"), "step": 3}), device="cpu", weights_only=True)
>>> obj["w"], obj["step"]
(tensor([1., 1.]), 3)
"""

from __future__ import annotations

import io
import pickle
from typing import IO, Any

import numpy as np

from .creation import tensor
from .device import DeviceLike, resolve
from .dtypes import float32, float64, to_dtype
from .tensor import Tensor

_TAG = "vkblas.tensor"
# what weights_only=True lets a file name besides tensors (plain builtins need no name)
_SAFE = {
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
    ("builtins", "complex"),
    ("vkblas.tensor", "Tensor"),
    ("vkblas.nn.parameter", "Parameter"),
}


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, Tensor):
            return None
        array = obj.detach().numpy()  # tobytes() writes C order whatever the strides
        return (_TAG, type(obj), obj.dtype.name, tuple(obj.shape), array.tobytes(), bool(obj.requires_grad))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], device: DeviceLike, weights_only: bool) -> None:
        super().__init__(file)
        self.device, self.weights_only = device, weights_only

    def find_class(self, module: str, name: str) -> Any:
        if self.weights_only and (module, name) not in _SAFE:
            raise pickle.UnpicklingError(
                f"weights_only=True refuses to load {module}.{name}: only containers, numbers, strings and tensors "
                "are read this way; pass weights_only=False if you trust where the file comes from"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Tensor:
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == _TAG):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
        _, cls, dtype_name, shape, data, requires_grad = pid
        saved = to_dtype(dtype_name)
        # float64 lives only on the cpu device; elsewhere it arrives as float32
        dtype = float32 if saved is float64 and not resolve(self.device).supports(float64) else saved
        t = tensor(np.frombuffer(data, dtype=saved.np).reshape(shape), dtype=dtype, device=self.device)
        if cls is not Tensor:
            return cls(t, requires_grad=requires_grad)
        return t.requires_grad_(True) if requires_grad else t


def dump(obj: Any, file: IO[bytes]) -> None:
    """Pickle ``obj`` into ``file``; tensors anywhere inside it go as their values."""
    _Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    dump(obj, buf)
    return buf.getvalue()


def load(file: IO[bytes], device: DeviceLike = None, weights_only: bool = False) -> Any:
    """Read what :func:`dump` wrote, with every tensor made on ``device`` (default: the default device)."""
    return _Unpickler(file, device, weights_only).load()


def loads(data: bytes, device: DeviceLike = None, weights_only: bool = False) -> Any:
    return load(io.BytesIO(data), device, weights_only)
