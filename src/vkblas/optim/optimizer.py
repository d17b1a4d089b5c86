"""``Optimizer``: parameter groups, lazily created per-parameter state, ``zero_grad`` and ``state_dict``.

A subclass names its defaults, checks its hyper-parameters, and writes one ``_update(p, grad, state, group)`` that
changes ``p`` in place with the in-place tensor ops (each a single device dispatch; nothing is read back to the
host). ``step`` runs it under ``no_grad`` for every parameter that has a gradient.

``capturable=True`` (PyTorch's name; Adam, AdamW, SGD) makes a step recordable by ``vkblas.graphs``: the values
that change between steps (learning rate, step count, bias corrections) live in 0-d device tensors per parameter
group, advanced by kernels inside the step, and the fused updates take them as broadcast operands. The device lr
is refreshed from ``group["lr"]`` by every ``step()`` and, for a captured step, by a replay hook the step
registers with its graph, so LR schedulers keep working. Differences from PyTorch: the step count is per group
(``state["step"]`` of each parameter is the group's shared 0-d tensor), and the optimizer state must exist before
capture (one eager warm-up step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import graphs
from ..autograd import enable_grad, no_grad
from ..dtypes import float32
from ..ops._core import full, write_into
from ..tensor import Tensor

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


def check_hyper(name: str, value: float, low: float = 0.0, high: float | None = None, open_low: bool = False) -> None:
    """Raise ValueError naming the hyper-parameter and its value unless low <= value (< high)."""
    bad = value < low or (open_low and value == low) or (high is not None and value >= high)
    if bad:
        rng = f"{'(' if open_low else '['}{low}, {high if high is not None else 'inf'})"
        raise ValueError(f"Invalid {name} value: {value} (expected a value in {rng})")


def check_unit(name: str, value: float) -> None:
    """Raise ValueError naming the hyper-parameter unless 0 <= value <= 1 (Adadelta's rho)."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"Invalid {name} value: {value} (expected a value in [0.0, 1.0])")


def check_betas(betas: tuple[float, float]) -> None:
    """Adam-style (beta1, beta2), each in [0, 1)."""
    if len(betas) != 2:
        raise ValueError(f"Invalid betas {betas!r}: expected two values")
    check_hyper("beta parameter at index 0", betas[0], 0.0, 1.0)
    check_hyper("beta parameter at index 1", betas[1], 0.0, 1.0)


class Optimizer:
    """Base class: ``params`` is an iterable of tensors or of dicts (parameter groups with their own settings)."""

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        #: capturable groups: id(group) -> {"lr": 0-d tensor, "lr_host": the float it holds, "step": 0-d, ...}
        self._scalars: dict[int, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, but got a Tensor"
            )
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list (in a parameter group)")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but parameter {i} is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(
                    f"can't optimize a non-leaf Tensor (parameter {i}, shape {p.shape}, grad_fn "
                    f"{p.grad_fn}); optimize the leaf it was computed from"
                )
            if not p.dtype.is_floating:
                raise ValueError(f"can't optimize parameter {i} of dtype {p.dtype!r}: it must be floating point")
            if id(p) in seen:
                raise ValueError(
                    f"parameter {i} (shape {p.shape}) appears in more than one parameter group or twice in one"
                )
            seen.add(id(p))
        group = {**self.defaults, **param_group, "params": params}
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate a group's hyper-parameters (subclasses extend)."""
        check_hyper("learning rate", group["lr"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.zero_()

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient. ``closure`` re-evaluates the loss (returned)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        graph = graphs.current_graph()
        if graph is not None:
            if not all(g.get("capturable") for g in self.param_groups):
                raise RuntimeError(
                    f"{type(self).__name__}.step() during graph capture needs capturable=True (learning rate and step "
                    "count must live on the device so that replays advance them); build the optimizer with "
                    "capturable=True"
                )
            graph.register_replay_hook(self._sync_device_lr)  # a scheduler's new lr reaches every replay
        for group in self.param_groups:
            scalars = self._group_scalars(group, graph is not None) if group.get("capturable") else None
            items = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                if not state:
                    if graph is not None:
                        raise RuntimeError(
                            f"{type(self).__name__}: optimizer state would be created during graph capture (and "
                            "reset by every replay); run one eager training step (warm-up) before capturing"
                        )
                    state["step"] = 0 if scalars is None else scalars["step"]
                    self._init_state(p, state, group)
                if scalars is None:
                    state["step"] += 1
                items.append((p, p.grad, state))
            if items:
                if scalars is not None:
                    self._advance(group, scalars)
                self._update_group(group, items)
        return loss

    def _update_group(self, group: dict[str, Any], items: list[tuple[Tensor, Tensor, dict[str, Any]]]) -> None:
        """Update every ``(parameter, gradient, state)`` of a group (the gradient as stored: ``maximize`` not yet
        applied). This default calls ``_update`` per parameter; Adam, AdamW and SGD override it with one
        multi-tensor ``foreach`` (one dispatch per few parameters on a GPU)."""
        for p, grad, state in items:
            self._update(p, -grad if group.get("maximize", False) else grad, state, group)

    # ------------------------------------------------------------------ capturable
    def _group_scalars(self, group: dict[str, Any], capturing: bool) -> dict[str, Any]:
        """The group's device scalars, created on its first step, with the device lr synced to ``group["lr"]``."""
        sc = self._scalars.get(id(group))
        if sc is None:
            if capturing:  # allocating now could alias a buffer the capture already uses as a temporary
                raise RuntimeError(f"{type(self).__name__}: run one eager step (warm-up) before graph capture")
            backend = group["params"][0]._backend
            sc = self._scalars[id(group)] = {
                "lr": full((), float(group["lr"]), float32, backend),
                "lr_host": float(group["lr"]),
                "step": full((), 0.0, float32, backend),
            }
            self._init_scalars(group, sc, backend)
        self._sync_lr(group, sc)
        return sc

    def _sync_lr(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        lr = float(group["lr"])
        if lr != sc["lr_host"]:
            with graphs.paused():  # never recorded: a replay must not reset the lr to the captured value
                write_into(sc["lr"], "copy", lr)
            sc["lr_host"] = lr

    def _sync_device_lr(self) -> None:
        """Copy a changed ``group["lr"]`` (an LR scheduler, a manual change) into the device lr (the replay hook
        that ``step()`` registers with the graph it is captured in)."""
        for group in self.param_groups:
            sc = self._scalars.get(id(group))
            if sc is not None:
                self._sync_lr(group, sc)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        """Create a capturable group's further device scalars (subclasses)."""

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        """Once per step of a capturable group, before its parameters are updated: advance the device scalars."""
        write_into(sc["step"], "add", sc["step"], 1.0)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the per-parameter state on the first step (buffers on p's device)."""

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: ``state`` keyed by the parameter's index over all groups, ``param_groups`` with the
        settings and ``params`` as those indices. Tensors in the state are the live buffers (not copies)."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
            for g in self.param_groups
        ]
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"loaded state dict has {len(groups)} parameter groups, the optimizer has {len(self.param_groups)}"
            )
        for i, (saved, own) in enumerate(zip(groups, self.param_groups, strict=True)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(
                    f"loaded state dict contains a parameter group {i} of {len(saved['params'])} "
                    f"parameters that doesn't match the size of optimizer's group "
                    f"({len(own['params'])})"
                )
        by_index = {}
        for saved, own in zip(groups, self.param_groups, strict=True):
            by_index.update(zip(saved["params"], own["params"], strict=True))
            own.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for key, s in state_dict["state"].items():
            p = by_index[int(key)]
            self.state[p] = {k: _to_param_device(v, p) for k, v in s.items()}

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines) + "\n)"


def _to_param_device(v: Any, p: Tensor) -> Any:
    if isinstance(v, Tensor):
        return v.to(device=p.device, dtype=p.dtype if v.dtype.is_floating else None).clone()
    return v
