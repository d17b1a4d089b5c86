"""The sharded optimizer step of ``sync`` training (the optimizer-state partitioning of ZeRO stage 1, Rajbhandari
et al. 2020, over shared memory): each worker owns a slice of the flat parameter vector, averages that slice of
every accepted gradient, steps it with the run's optimizer, and writes the slice into the parameter buffer every
worker then loads.

Why this and not "every worker steps its whole replica" or "the runner steps once": the step is applied once per
element, so replicas on different devices (cpu, Vulkan) never drift apart, and nobody waits for one process to
step all the parameters — the step's cost is divided among the workers. It is exact because the optimizers of
``vkblas train`` (Adam, AdamW, SGD with momentum) are elementwise: stepping a slice is stepping the whole, restricted
to the slice. Every slice is stepped by vkblas's own optimizer on the ``cpu`` device, so which worker (and which
device) owns it does not change a bit of the result.

State lives in shared memory too: two parameter buffers and two optimizer-state buffers (``read`` holds version
k, ``write`` receives k + 1; the runner swaps them once every slice is written). A worker that dies mid-step
leaves version k intact, so the step is simply redone with new slices by the survivors, and a worker that joins
or takes over a slice loads its state from the ``read`` buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...creation import tensor
from ...tensor import Tensor
from ...training.fit import make_optimizer
from ..algorithms import weighted_mean
from ..sizing import split_batch
from .transport import SharedArrays, Spec


def state_keys(optimizer: str) -> tuple[str, ...]:
    """The per-element state tensors ``optimizer`` keeps (found by one step on a tiny parameter); ValueError if it
    keeps other state than those and its step count, which could not be sliced."""
    p = tensor(np.zeros(3, np.float32), device="cpu", requires_grad=True)
    opt = make_optimizer(optimizer, [p], 1e-3)
    p.grad = tensor(np.ones(3, np.float32), device="cpu")
    opt.step()
    keys = []
    for key, value in opt.state[p].items():
        if isinstance(value, Tensor) and tuple(value.shape) == (3,):
            keys.append(key)
        elif key != "step":
            raise ValueError(
                f"optimizer {optimizer!r} keeps state {key!r} that is not per element: it cannot be sharded"
            )
    return tuple(keys)


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


class ShardStep:
    """One worker's slice of the sharded step, with the slice's parameters and optimizer state kept in this
    process between steps and mirrored into shared memory after each."""

    def __init__(self, optimizer: str, block: SharedArrays, keys: Sequence[str]) -> None:
        self.optimizer_name, self.keys = optimizer, tuple(keys)
        self.params, self.state = block["params"], block["state"]
        self.at: tuple[int, int, int, int] | None = None  # (lo, hi, version, buffer) of what this process holds
        self.param: Tensor | None = None
        self.opt = None

    def _load(self, lo: int, hi: int, version: int, buf: int) -> None:
        self.param = tensor(self.params[buf, lo:hi], device="cpu", requires_grad=True)
        self.opt = make_optimizer(self.optimizer_name, [self.param], 1.0)
        if version > 0:  # a fresh optimizer at version 0; else the slice's saved state at this version
            state = {k: tensor(self.state[buf, i, lo:hi], device="cpu") for i, k in enumerate(self.keys)}
            groups = self.opt.state_dict()["param_groups"]
            self.opt.load_state_dict({"state": {0: {"step": version, **state}}, "param_groups": groups})
        self.at = (lo, hi, version, buf)

    def apply(
        self,
        shard: tuple[int, int],
        contributions: Sequence[tuple[np.ndarray, float]],
        version: int,
        read: int,
        write: int,
        lr: float,
    ) -> None:
        """Step slice ``shard`` from version ``version`` (in buffer ``read``) with the weighted mean of the
        ``(flat gradient, samples)`` contributions; write the result into buffer ``write``."""
        lo, hi = shard
        if self.at != (lo, hi, version, read):  # another slice, or a redone step: start from the saved state
            self._load(lo, hi, version, read)
        assert self.param is not None and self.opt is not None
        grad = weighted_mean([({"g": g[lo:hi]}, w) for g, w in contributions])["g"]
        self.param.grad = tensor(grad, device="cpu")
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.step()
        self.param.grad = None
        self.params[write, lo:hi] = self.param.detach().numpy()
        state = self.opt.state[self.param]
        for i, k in enumerate(self.keys):
            self.state[write, i, lo:hi] = state[k].numpy()
        self.at = (lo, hi, version + 1, write)
