"""Collation: turning a list of samples into a batch, with ``torch.utils.data``'s rules.

Batches are assembled on the host first — numpy arrays where PyTorch would already make tensors — and uploaded to
the device in one step per array (:func:`to_tensors`), so a worker process or a background thread never touches a
device. :func:`default_collate` and :func:`default_convert` do both steps and return vkblas tensors.

>>> batch = collate_numpy([(np.zeros(2), 1), (np.ones(2), 0)])
>>> [type(b).__name__ for b in batch], batch[0].shape, batch[1].tolist()
(['ndarray', 'ndarray'], (2, 2), [1, 0])
"""

from __future__ import annotations

import collections.abc
import copy
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..creation import tensor
from ..device import DeviceLike
from ..dtypes import DType, bool_, float32, int32
from ..ops.shape import stack
from ..tensor import Tensor

_STR_OR_OBJECT = re.compile("[SaUO]")  # numpy dtype codes PyTorch refuses to collate
_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _stack_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    shapes = [a.shape for a in arrays]
    if len(set(shapes)) > 1:
        bad = next(i for i, s in enumerate(shapes) if s != shapes[0])
        raise RuntimeError(
            f"stack expects each tensor to be equal size, but got {list(shapes[0])} at entry 0 and "
            f"{list(shapes[bad])} at entry {bad}"
        )
    return np.stack(arrays)


def _rebuild(elem: Any, parts: list[Any]) -> Any:
    """A container of ``elem``'s type holding ``parts`` (PyTorch's rules: tuples become lists)."""
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*parts)
    if isinstance(elem, tuple):
        return parts  # PyTorch keeps this for backwards compatibility
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, p in enumerate(parts):
                clone[i] = p
            return clone
        return type(elem)(parts)
    except TypeError:  # a sequence type that cannot be rebuilt (range, ...)
        return parts


def _rebuild_mapping(elem: Any, items: dict[Any, Any]) -> Any:
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(items)
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def collate_numpy(batch: Sequence[Any]) -> Any:
    """``default_collate`` on the host: the same structure, with numpy arrays for the batched numbers and arrays
    (tensors in the samples are stacked as tensors)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch))
    if isinstance(elem, np.ndarray):
        if _STR_OR_OBJECT.search(elem.dtype.str):
            raise TypeError(_ERROR.format(elem.dtype))
        return _stack_arrays([np.asarray(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number, np.object_)):
        return np.asarray(batch)
    if isinstance(elem, float):
        return np.asarray(batch, dtype=np.float64)
    if isinstance(elem, int):  # bool included: numpy keeps it bool, as torch.tensor does
        return np.asarray(batch)
    if isinstance(elem, (str, bytes)):
        return batch  # as PyTorch: a list at the top, a tuple inside a transposed sample
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {key: collate_numpy([d[key] for d in batch]) for key in elem})
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return _rebuild(elem, [collate_numpy(samples) for samples in zip(*batch, strict=True)])
    raise TypeError(_ERROR.format(type(elem)))


def convert_numpy(data: Any) -> Any:
    """``default_convert`` on the host (used when ``batch_size=None``): numpy arrays and scalars are kept for
    upload, tuples become lists, everything else is unchanged."""
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (np.bool_, np.number)):
        return np.asarray(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {key: convert_numpy(data[key]) for key in data})
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild(data, [convert_numpy(d) for d in data])
    return data


def host_dtype(array: np.ndarray) -> DType:
    """The dtype a host array is uploaded as: floats as float32, booleans as bool, integers as int32."""
    return {"f": float32, "b": bool_}.get(array.dtype.kind, int32)


def to_device(array: np.ndarray, device: DeviceLike) -> Tensor:
    """Upload a host array as a tensor on ``device`` (dtype from :func:`host_dtype`)."""
    array = np.asarray(array)
    return tensor(array, dtype=host_dtype(array), device=device)


def _walk(data: Any, leaf: Callable[[Any], Any]) -> Any:
    """``data`` with ``leaf`` applied to every non-container value; containers keep their types."""
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {k: _walk(v, leaf) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_walk(v, leaf) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_walk(v, leaf) for v in data)
    return leaf(data)


def to_tensors(data: Any, device: DeviceLike = None, convert: Callable[[np.ndarray], Any] | None = None) -> Any:
    """Upload every numpy array of numbers in ``data`` to ``device`` (or pass it to ``convert``): the last step of
    the default collation. Arrays of strings or objects stay as they are."""

    def leaf(v: Any) -> Any:
        if isinstance(v, np.ndarray) and not _STR_OR_OBJECT.search(v.dtype.str):
            return convert(v) if convert is not None else to_device(v, device)
        return v

    return _walk(data, leaf)


def default_collate(batch: Sequence[Any]) -> Any:
    """Stack a list of samples into a batch of tensors on the default device, with PyTorch's rules: arrays and
    tensors are stacked, numbers become 1-d tensors, dicts / lists / namedtuples are collated field by field (a
    tuple becomes a list), strings stay lists."""
    return to_tensors(collate_numpy(batch))


def default_convert(data: Any) -> Any:
    """Convert numpy arrays (and numpy scalars) in ``data`` to tensors on the default device, leaving the rest."""
    return to_tensors(convert_numpy(data))
