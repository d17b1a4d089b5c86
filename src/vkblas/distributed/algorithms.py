"""The update rules of distributed training, with no transport and no I/O: the local runner and the coordinator
call exactly these.

* ``sync``: every step, each worker computes the gradient of its share of the global batch; the shares are
  averaged, weighted by share size (:func:`weighted_mean`), and the optimizer takes one step on the average. With the
  same seed this is single-process training on the whole batch, up to fp32 rounding.
* ``async``: each worker's gradient is applied as it arrives. It carries the model version it was computed from; a
  :class:`StalenessFilter` drops it if it is more than ``max_staleness`` versions old, and otherwise scales the
  learning rate of its step by ``1 / (1 + s)`` for staleness ``s``: the staleness-dependent learning rate of Zhang,
  Gupta, Lian and Liu, "Staleness-aware Async-SGD for Distributed Deep Learning" (IJCAI 2016), who show that
  dividing the rate by the staleness keeps asynchronous SGD's convergence close to synchronous SGD's. (They divide by
  ``s`` with ``s >= 1`` for an update that crossed one other; here a fresh update has ``s = 0`` and scale 1.)
* ``diloco``: each worker takes H inner optimizer steps (AdamW) from the global weights and sends the
  pseudo-gradient ``start - end`` (:func:`pseudo_gradient`); the holder applies the sample-weighted average of a
  round's pseudo-gradients with the outer optimizer, SGD with Nesterov momentum (Douillard et al., "DiLoCo:
  Distributed Low-Communication Training of Language Models", 2023; outer lr 0.7 and momentum 0.9 as published).

The global model lives on the host as float32 numpy arrays, and updates are applied by vkblas's own optimizers on
the ``cpu`` device, so every rule here is the optimizer a single-process run would use. Applying the step once, in
one place, and sending the result to the workers (instead of every worker stepping its own replica) is the same
mathematics, and it keeps replicas on different devices (cpu and Vulkan round differently) from drifting apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .. import optim
from ..autograd import no_grad
from ..creation import tensor
from ..tensor import Tensor
from ..training.fit import make_optimizer

Params = dict[str, np.ndarray]
ALGORITHMS = ("sync", "async", "diloco")
STALENESS_RULES = ("inverse", "constant")
MEAN_BLOCK = 1 << 20  # values of a tensor averaged at a time
_OPT_PREFIX = "__optimizer__."


@dataclass(frozen=True)
class Judgement:
    """What the staleness filter decided about one update."""

    accepted: bool
    staleness: int
    scale: float  # the learning-rate factor of its step (0 when dropped)
    reason: str = ""


@dataclass(frozen=True)
class StalenessFilter:
    """Bounded staleness: an update computed from version ``v`` arriving at version ``current`` has staleness
    ``s = current - v``; it is dropped if ``s > max_staleness``, else applied with learning-rate factor
    ``1 / (1 + s)`` (``rule="inverse"``, Zhang et al. 2016) or 1 (``rule="constant"``)."""

    max_staleness: int
    rule: str = "inverse"

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.rule not in STALENESS_RULES:
            raise ValueError(f"unknown staleness rule {self.rule!r}: choose from {', '.join(STALENESS_RULES)}")

    def judge(self, computed_at: int, current: int) -> Judgement:
        s = current - computed_at
        if s < 0:
            return Judgement(False, s, 0.0, f"computed from version {computed_at}, newer than the model ({current})")
        if s > self.max_staleness:
            return Judgement(False, s, 0.0, f"staleness {s} is above the bound {self.max_staleness}")
        return Judgement(True, s, 1.0 / (1 + s) if self.rule == "inverse" else 1.0)


def weighted_mean(contributions: Sequence[tuple[Mapping[str, np.ndarray], float]]) -> Params:
    """The average of ``(update, weight)`` pairs, weighted (weights are sample counts), accumulated in float64 and
    returned as float32. Every update must have the same names and shapes (see :func:`validation.check_update`)."""
    if not contributions:
        raise ValueError("weighted_mean of no contributions")
    total = float(sum(w for _, w in contributions))
    if not total > 0:
        raise ValueError(f"weights must sum to a positive number, got {[w for _, w in contributions]}")
    first = contributions[0][0]
    if len(contributions) == 1:  # the mean of one: itself (what the float64 round trip below would give)
        return {name: np.array(value, np.float32) for name, value in first.items()}
    out: Params = {}
    for name, ref in first.items():
        # sum of float64(update) * (w / total) in contribution order, a block of values at a time: the float64
        # buffers stay small whatever the tensor (a 400 MB embedding would need 1.6 GB of them at once)
        flat_out = np.empty(np.size(ref), np.float32)
        flats = [np.asarray(update[name]).reshape(-1) for update, _ in contributions]
        acc, term = np.empty(min(MEAN_BLOCK, flat_out.size), np.float64), np.empty(min(MEAN_BLOCK, flat_out.size))
        for start in range(0, flat_out.size, MEAN_BLOCK):
            n = min(MEAN_BLOCK, flat_out.size - start)
            a, t = acc[:n], term[:n]
            a.fill(0.0)
            for flat, (_, w) in zip(flats, contributions, strict=True):
                np.multiply(flat[start : start + n], w / total, out=t, dtype=np.float64)
                a += t
            flat_out[start : start + n] = a
        out[name] = flat_out.reshape(np.shape(ref))
    return out


def pseudo_gradient(start: Mapping[str, np.ndarray], end: Mapping[str, np.ndarray]) -> Params:
    """DiLoCo's pseudo-gradient: the weights a worker started its round from minus those it ended with."""
    if start.keys() != end.keys():
        raise ValueError(f"start and end weights name different tensors: {sorted(start)} vs {sorted(end)}")
    return {k: (np.asarray(start[k], np.float32) - np.asarray(end[k], np.float32)) for k in start}


class GlobalModel:
    """The model all workers train, as its holder keeps it: float32 arrays on the host, a ``version`` that counts
    applied steps, and the optimizer that applies them (vkblas's own, on the ``cpu`` device).

    ``algorithm`` ``sync``/``async``: ``optimizer`` (``adam``, ``adamw``, ``sgd``) at ``lr`` applies gradients.
    ``diloco``: SGD with Nesterov momentum (``outer_lr``, ``outer_momentum``) applies pseudo-gradients.

    >>> import numpy as np
    >>> g = GlobalModel({"w": np.ones(2, np.float32)}, "diloco", outer_lr=0.5, outer_momentum=0.9)
    >>> g.apply_pseudo_gradient({"w": np.full(2, 0.2, np.float32)})
    >>> g.params()["w"]  # buf = 0.2; Nesterov step = 0.2 + 0.9 * 0.2 = 0.38; w = 1 - 0.5 * 0.38
    array([0.81, 0.81], dtype=float32)
    """

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        algorithm: str,
        optimizer: str = "adam",
        lr: float = 1e-3,
        *,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        nesterov: bool = True,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
        if not params:
            raise ValueError("GlobalModel needs at least one parameter")
        self.algorithm = algorithm
        self.names = list(params)
        self._tensors = {k: tensor(np.asarray(v, np.float32), device="cpu") for k, v in params.items()}
        plist = list(self._tensors.values())
        if algorithm == "diloco":
            self.optimizer = optim.SGD(plist, lr=outer_lr, momentum=outer_momentum, nesterov=nesterov)
        else:
            self.optimizer = make_optimizer(optimizer, plist, lr)
        self.base_lr = self.optimizer.param_groups[0]["lr"]
        self.version = 0

    # ------------------------------------------------------------------ reading
    def params(self) -> Params:
        """A copy of the current weights."""
        return {k: t.numpy() for k, t in self._tensors.items()}

    @property
    def lr(self) -> float:
        return float(self.base_lr)

    def set_lr(self, lr: float) -> None:
        """The learning rate of later steps (a schedule driven by samples seen)."""
        if not lr >= 0 or math.isinf(lr):
            raise ValueError(f"learning rate must be a finite number >= 0, got {lr}")
        self.base_lr = float(lr)
        for group in self.optimizer.param_groups:
            group["lr"] = self.base_lr

    # ------------------------------------------------------------------ applying
    def apply_gradient(self, grads: Mapping[str, np.ndarray], lr_scale: float = 1.0) -> None:
        """One optimizer step on ``grads`` (``sync``: the weighted mean of a step's shares; ``async``: one
        worker's gradient, with the staleness filter's ``lr_scale``). Bumps the version."""
        if self.algorithm == "diloco":
            raise RuntimeError("a diloco model is updated by apply_pseudo_gradient, not apply_gradient")
        self._step(grads, self.base_lr * lr_scale)

    def apply_pseudo_gradient(self, pseudo_grad: Mapping[str, np.ndarray], lr_scale: float = 1.0) -> None:
        """DiLoCo's outer step on a round's averaged pseudo-gradient. Bumps the version."""
        if self.algorithm != "diloco":
            raise RuntimeError(f"apply_pseudo_gradient is DiLoCo's outer step; this model runs {self.algorithm!r}")
        self._step(pseudo_grad, self.base_lr * lr_scale)

    def _step(self, grads: Mapping[str, np.ndarray], lr: float) -> None:
        """One step, tensor by tensor: ``grads[k]`` is read only when tensor ``k`` is stepped and dropped after, so a
        lazy mapping (the coordinator's, which decodes and averages a round tensor by tensor) keeps at most one
        tensor's update in memory beside the model. Every rule here is elementwise and each parameter's optimizer
        state (and step count) is its own, so this is the same step as all tensors at once."""
        missing = [k for k in self.names if k not in grads]
        if missing:
            raise ValueError(f"update lacks tensors {missing}")
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with no_grad():
            for k, t in self._tensors.items():
                t.grad = tensor(np.asarray(grads[k], np.float32), device="cpu")
                self.optimizer.step()
                t.grad = None
        for group in self.optimizer.param_groups:
            group["lr"] = self.base_lr
        self.version += 1

    # ------------------------------------------------------------------ checkpoints
    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(t.shape) for k, t in self._tensors.items()}

    def param(self, name: str) -> np.ndarray:
        """One weight tensor (a copy): what a writer reads one at a time instead of :meth:`params`."""
        return self._tensors[name].numpy()

    def state_entries(self) -> tuple[list[tuple[str, np.dtype, tuple[int, ...]]], Callable[[str], np.ndarray]]:
        """What :meth:`state_dict` holds besides the weights (version, optimizer state), as (name, dtype, shape)
        entries and a function reading one of them: a writer streams them instead of building the dict."""
        getters: dict[str, Callable[[], np.ndarray]] = {"__version__": lambda: np.array(self.version, np.int64)}
        names = {id(t): k for k, t in self._tensors.items()}
        entries: list[tuple[str, np.dtype, tuple[int, ...]]] = [("__version__", np.dtype(np.int64), ())]
        for p, state in self.optimizer.state.items():
            for key, value in state.items():
                name = f"{_OPT_PREFIX}{names[id(p)]}.{key}"
                if isinstance(value, Tensor):
                    entries.append((name, np.dtype(np.float32), tuple(value.shape)))  # loaded back as float32
                    getters[name] = value.numpy
                else:
                    entries.append((name, np.dtype(np.float64), ()))
                    getters[name] = lambda v=value: np.array(v, np.float64)
        return entries, lambda name: getters[name]()

    def state_dict(self) -> Params:
        """Weights and optimizer state as one flat dict of arrays (a safetensors payload); the version is the
        ``__version__`` entry."""
        out: Params = self.params()
        out["__version__"] = np.array(self.version, np.int64)
        names = {id(t): k for k, t in self._tensors.items()}
        for p, state in self.optimizer.state.items():
            for key, value in state.items():
                arr = value.numpy() if isinstance(value, Tensor) else np.array(value, np.float64)
                out[f"{_OPT_PREFIX}{names[id(p)]}.{key}"] = arr
        return out

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` wrote (the same parameter names and shapes)."""
        for k, t in self._tensors.items():
            if k not in state:
                raise ValueError(f"state lacks parameter {k!r}")
            arr = np.asarray(state[k], np.float32)
            if arr.shape != tuple(t.shape):
                raise ValueError(f"parameter {k!r}: state has shape {arr.shape}, the model {tuple(t.shape)}")
            t.copy_(tensor(arr, device="cpu"))
        self.load_state(state)

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` holds besides the weights (the version, the optimizer's state), each
        entry read once: ``state`` may read them from a file one at a time (``codec.PayloadFile``)."""
        self.version = int(state["__version__"]) if "__version__" in state else 0
        self.optimizer.state = {}
        for key in state:
            if not key.startswith(_OPT_PREFIX):
                continue
            arr = state[key]
            pname, _, field = key[len(_OPT_PREFIX) :].rpartition(".")
            p = self._tensors[pname]
            s = self.optimizer.state.setdefault(p, {})
            s[field] = int(arr) if field == "step" else tensor(np.asarray(arr, np.float32), device="cpu")
