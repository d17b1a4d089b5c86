"""Sorting on the backend's ``sort`` primitive: ``sort``, ``argsort``, ``topk``.

The primitive sorts along the last dim of any strided view, so another ``dim`` is a transposed view of the input
and of the (contiguous) outputs: no copies. Sorts are stable, with NaN above every number (PyTorch's stable sort;
its unstable one may order ties differently). The gradient of the values is scattered back to where they came from.
"""

from __future__ import annotations

from ..autograd import Node, record
from ..dtypes import int32
from ..tensor import Tensor, empty, norm_dim
from .indexing import _scatter_add_into
from .reduction import ValuesIndices


def _transposed(t: Tensor, d: int) -> Tensor:
    return t if d == t.ndim - 1 else t.detach().transpose(d, -1)


def raw_sort(x: Tensor, d: int, descending: bool) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) of ``x`` sorted along ``d``; no autograd."""
    values = empty(x.shape, x.dtype, x._backend)
    indices = empty(x.shape, int32, x._backend)
    if x.numel():
        x._backend.sort(
            _transposed(values, d)._view, _transposed(indices, d)._view, _transposed(x, d)._view, descending
        )
    return values, indices


def _scatter_back(shape: tuple[int, ...], d: int, indices: Tensor, g: Tensor) -> Tensor:
    """The gradient of ``x.gather(d, indices)``: ``g`` put back where the values came from."""
    return _scatter_add_into(g.new_zeros(shape), d, indices, g.contiguous())


def _gathered(values: Tensor, indices: Tensor, x: Tensor, d: int, name: str) -> Tensor:
    def rule(n: Node, g: Tensor) -> tuple[Tensor]:
        return (_scatter_back(x.shape, d, indices, g),)

    return record(values, name, (x,), rule)


def sort(
    input: Tensor,  # noqa: A002
    dim: int = -1,
    descending: bool = False,
    stable: bool = False,
) -> ValuesIndices:
    """``(values, indices)`` of ``input`` sorted along ``dim`` (always stable here; int32 indices)."""
    if input.ndim == 0:
        return ValuesIndices(input.clone(), input.new_zeros((), dtype=int32))
    d = norm_dim(dim, input.ndim)
    values, indices = raw_sort(input, d, descending)
    return ValuesIndices(_gathered(values, indices, input, d, "SortBackward"), indices)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:  # noqa: A002
    """The int32 indices that sort ``input`` along ``dim`` (stable)."""
    if input.ndim == 0:
        return input.new_zeros((), dtype=int32)
    return raw_sort(input, norm_dim(dim, input.ndim), descending)[1]


def topk(
    input: Tensor,  # noqa: A002
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,  # noqa: A002
) -> ValuesIndices:
    """The ``k`` largest (or smallest) elements along ``dim`` and their int32 indices, in sorted order (also for
    ``sorted=False``, which leaves the order open); ties keep the lower index first."""
    n = input.shape[norm_dim(dim, input.ndim)] if input.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: selected index k={k} is out of range for dimension of size {n} ({input.shape})")
    if input.ndim == 0:
        return ValuesIndices(input.clone(), input.new_zeros((), dtype=int32))
    d = norm_dim(dim, input.ndim)
    values, indices = raw_sort(input, d, descending=largest)
    values, indices = values.narrow(d, 0, k).contiguous(), indices.narrow(d, 0, k).contiguous()
    return ValuesIndices(_gathered(values, indices, input, d, "TopkBackward"), indices)
