"""The sync run's shared optimizer buffers and the sharded step (the optimizer-state partitioning of ZeRO stage 1,
Rajbhandari et al. 2020, over shared memory).

One block holds two parameter buffers and two optimizer-state buffers. ``sharded`` mode: buffer ``read`` holds
version k, each worker steps its slice of it into buffer ``write`` (k + 1), and the runner swaps them once every
slice is written; a worker that dies mid-step leaves version k intact, so the step is redone with new slices by
the survivors. ``replicated`` mode uses the same buffers to hand a copy of the model (parameters and state) to a
joining worker and to the runner (epoch snapshots, the final weights); ``holder`` mode, to publish the weights.

Stepping a slice is stepping the whole, restricted to the slice, because the optimizers of ``vkblas train`` (Adam,
AdamW, SGD with momentum) are elementwise; every slice is stepped by the same host code
(:class:`~.flatopt.FlatOptimizer`), so which worker owns it does not change a bit of the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sizing import split_batch
from .flatopt import FlatOptimizer, FlatState
from .transport import SharedArrays, Spec


def state_spec(size: int, keys: Sequence[str]) -> Spec:
    """Two parameter buffers and two optimizer-state buffers for a model of ``size`` parameters."""
    return (("params", (2, size), "float32"), ("state", (2, max(1, len(keys)), size), "float32"))


def shard_bounds(size: int, workers: int) -> list[tuple[int, int]]:
    """Equal consecutive slices of ``size`` elements, one per worker (the step runs on the host of every worker,
    whatever its device, so equal slices take equal time)."""
    bounds, lo = [], 0
    for n in split_batch(size, [1.0] * workers):
        bounds.append((lo, lo + n))
        lo += n
    return bounds


def buffered(block: SharedArrays, buf: int, keys: int, step: int = 0, lo: int = 0, hi: int | None = None) -> FlatState:
    """Buffer ``buf`` of ``block`` (elements ``lo:hi``) as a :class:`FlatState` at step ``step`` (views)."""
    hi = block["params"].shape[1] if hi is None else hi
    state = tuple(block["state"][buf, i, lo:hi] for i in range(keys))
    return FlatState(block["params"][buf, lo:hi], state, step)


def copy_state(src: FlatState, dst: FlatState) -> None:
    """Write ``src``'s parameters and state into ``dst`` (the step count travels in messages)."""
    np.copyto(dst.params, src.params)
    for a, b in zip(src.state, dst.state, strict=True):
        np.copyto(b, a)


def step_shard(
    opt: FlatOptimizer,
    block: SharedArrays,
    shard: tuple[int, int],
    grad: np.ndarray,
    version: int,
    read: int,
    write: int,
    lr: float,
) -> None:
    """Step slice ``shard`` from version ``version`` in buffer ``read`` into buffer ``write``, on ``grad`` (the
    averaged gradient of the slice)."""
    lo, hi = shard
    keys = len(opt.keys)
    opt.step(buffered(block, read, keys, version, lo, hi), grad, lr, out=buffered(block, write, keys, 0, lo, hi))
