"""``Optimizer``: parameter groups, lazily created per-parameter state, ``zero_grad`` and ``state_dict``.

A subclass names its defaults, checks its hyper-parameters, and writes one ``_update(p, grad, state, group)`` that
changes ``p`` in place with the in-place tensor ops (each a single device dispatch; nothing is read back to the
host). ``step`` runs it under ``no_grad`` for every parameter that has a gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..autograd import enable_grad, no_grad
from ..tensor import Tensor

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


def check_hyper(name: str, value: float, low: float = 0.0, high: float | None = None,
                open_low: bool = False) -> None:
    """Raise ValueError naming the hyper-parameter and its value unless low <= value (< high)."""
    bad = value < low or (open_low and value == low) or (high is not None and value >= high)
    if bad:
        rng = f"{'(' if open_low else '['}{low}, {high if high is not None else 'inf'})"
        raise ValueError(f"Invalid {name} value: {value} (expected a value in {rng})")


class Optimizer:
    """Base class: ``params`` is an iterable of tensors or of dicts (parameter groups with their own settings)."""

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but "
                            "got a Tensor")
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
                raise ValueError(f"can't optimize a non-leaf Tensor (parameter {i}, shape {p.shape}, grad_fn "
                                 f"{p.grad_fn}); optimize the leaf it was computed from")
            if not p.dtype.is_floating:
                raise ValueError(f"can't optimize parameter {i} of dtype {p.dtype!r}: it must be floating point")
            if id(p) in seen:
                raise ValueError(f"parameter {i} (shape {p.shape}) appears in more than one parameter group or "
                                 "twice in one")
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
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                if not state:
                    state["step"] = 0
                    self._init_state(p, state, group)
                state["step"] += 1
                grad = p.grad if not group.get("maximize", False) else -p.grad
                self._update(p, grad, state, group)
        return loss

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the per-parameter state on the first step (buffers on p's device)."""

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: ``state`` keyed by the parameter's index over all groups, ``param_groups`` with the
        settings and ``params`` as those indices. Tensors in the state are the live buffers (not copies)."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the optimizer has "
                             f"{len(self.param_groups)}")
        for i, (saved, own) in enumerate(zip(groups, self.param_groups, strict=True)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(f"loaded state dict contains a parameter group {i} of {len(saved['params'])} "
                                 f"parameters that doesn't match the size of optimizer's group "
                                 f"({len(own['params'])})")
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
