"""Activation checkpointing: ``checkpoint(fn, *args)`` keeps none of ``fn``'s activations and runs ``fn`` again in
the backward pass (PyTorch's ``torch.utils.checkpoint.checkpoint`` with ``use_reentrant=False``).

The first pass runs ``fn`` with grad mode on, on detached copies of the tensor arguments, and walks the graph it
recorded only to find the leaves that require grad (the parameters ``fn`` used); then that graph, and every
activation it saved, is dropped. The outputs get one node whose inputs are the tensor arguments and those leaves.
In backward the node restores the global generator to its state at the first pass (so dropout draws the same
mask) and the first pass's autocast settings (so it computes in the same dtypes), runs ``fn`` again with grad mode
on, and takes the gradients of the recomputed outputs with respect to the arguments and leaves, which it hands to
the engine like any op's input gradients. So the gradients are the ones
without checkpointing, for the parameters and for everything before the checkpoint, at the price of one more
forward of ``fn``; peak memory holds one checkpointed region's activations instead of all of them.

>>> import vkblas
>>> from vkblas.utils.checkpoint import checkpoint
>>> lin = vkblas.nn.Linear(3, 3).to("cpu")
>>> x = vkblas.ones(2, 3, device="cpu", requires_grad=True)
>>> checkpoint(lambda t: lin(t).tanh(), x, use_reentrant=False).sum().backward()
>>> x.grad.shape, lin.weight.grad.shape
((2, 3), (3, 3))

A tensor that ``fn`` takes from outside (a closure) must be a leaf (a parameter) or not require grad: one computed
by earlier ops with grad would need the graph before the checkpoint inside the recomputation, and is refused with
an error saying to pass it as an argument. Tensors nested in lists or dicts count as taken from outside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import autograd
from ..autograd import enable_grad, is_grad_enabled
from ..ops import autocast
from ..random import default_generator
from ..tensor import Tensor


def checkpoint(
    function: Callable[..., Any],
    *args: Any,
    use_reentrant: bool | None = None,
    preserve_rng_state: bool = True,
    **kwargs: Any,
) -> Any:
    """``function(*args, **kwargs)`` without keeping its activations; they are recomputed in backward.

    ``use_reentrant`` is accepted for PyTorch code and changes nothing: vkblas has one implementation, with the
    non-reentrant semantics (parameters get gradients even when no argument requires grad, keyword arguments are
    allowed). ``preserve_rng_state`` (default True) replays the global generator, so random ops inside ``function``
    (dropout) draw the same numbers in the recomputation; False skips that (faster to state, wrong with dropout).
    ``function`` returns a tensor or a tuple / list of values; tensors among them get the checkpoint's gradients.
    """
    if not is_grad_enabled():  # nothing will be differentiated: nothing to save or recompute
        return function(*args, **kwargs)
    return _Checkpoint(function, args, kwargs, preserve_rng_state).run()


class _Call:
    """One run of the function on detached arguments with grad mode on."""

    def __init__(self, owner: _Checkpoint) -> None:
        args, kwargs = list(owner.args), dict(owner.kwargs)
        #: (detached stand-in, the argument it stands for), one per tensor argument
        self.stand_ins: list[tuple[Tensor, Tensor]] = []
        for where, t in owner.tensor_args:
            d = t.detach().requires_grad_(t.requires_grad)
            self.stand_ins.append((d, t))
            if isinstance(where, int):
                args[where] = d
            else:
                kwargs[where] = d
        start = autograd.next_seq()
        with enable_grad(), autocast.restored(owner.autocast):
            out = owner.function(*args, **kwargs)
        self.kind = type(out) if isinstance(out, (tuple, list)) else None
        self.outs: list[Any] = list(out) if self.kind is not None else [out]
        self.leaves = _leaves_of(self.outs, start, {id(d) for d, _ in self.stand_ins})


class _Checkpoint:
    """One checkpointed call: what backward needs to run it again (no tensor that the call computed)."""

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rng: bool):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng_state = default_generator.get_state() if rng else None
        self.autocast = autocast.state()  # the recomputation casts as the first pass did (autocast is off in backward)
        #: (positional index or keyword, tensor) of every top-level tensor argument
        self.tensor_args: list[tuple[int | str, Tensor]] = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.tensor_args += [(k, v) for k, v in kwargs.items() if isinstance(v, Tensor)]
        self.inputs: list[Tensor] = []  # the outputs' node inputs: arguments that require grad, then leaves
        self.with_nodes: set[int] = set()  # indices of the outputs that got a node
        self.again: _Call | None = None  # the recomputation, while some output's gradient is still to come
        self.pending: set[int] = set()

    def run(self) -> Any:
        first = _Call(self)
        self.inputs = _unique([t for _, t in first.stand_ins if t.requires_grad] + first.leaves)
        result: list[Any] = []
        for i, o in enumerate(first.outs):
            original = next((t for d, t in first.stand_ins if d is o), None)
            if not isinstance(o, Tensor) or (original is not None and not original.requires_grad):
                result.append(o if original is None else original)  # not differentiable: handed back as it is
                continue
            r = o.detach()
            if o.requires_grad:
                autograd.record(r, "CheckpointBackward", self.inputs, self._rule(i))
                self.with_nodes.add(i)
            result.append(r)
        kind = first.kind
        del first  # the first pass's graph, and every activation it saved, go here
        return result[0] if kind is None else kind(result)

    def _rule(self, index: int) -> Callable[[autograd.Node, Tensor], tuple[Tensor | None, ...]]:
        return lambda node, g: self._backward(index, g)

    def _backward(self, index: int, g: Tensor) -> tuple[Tensor | None, ...]:
        if self.again is None:
            self.again = self._recompute()
            self.pending = set(self.with_nodes)
        again = self.again
        self.pending.discard(index)
        last = not self.pending
        if last:  # every output's gradient is through after this one: the recomputed graph can go
            self.again = None
        # with respect to the stand-ins of the arguments that require grad, and the leaves
        wrt = [d for d, t in again.stand_ins if t.requires_grad] + again.leaves
        means = [t for _, t in again.stand_ins if t.requires_grad] + again.leaves
        out = again.outs[index]
        grads = autograd.grad(out, wrt, g, retain_graph=not last) if out.requires_grad else (None,) * len(wrt)
        by_input: dict[int, Tensor] = {}
        for t, gi in zip(means, grads, strict=True):
            if gi is not None:
                by_input[id(t)] = by_input[id(t)] + gi if id(t) in by_input else gi
        return tuple(by_input.get(id(t)) for t in self.inputs)

    def _recompute(self) -> _Call:
        now = default_generator.get_state()
        if self.rng_state is not None:
            default_generator.set_state(self.rng_state)
        try:
            again = _Call(self)
        finally:
            default_generator.set_state(now)
        known = {id(t) for t in self.inputs}
        for t in again.leaves:
            if id(t) not in known:
                raise RuntimeError(
                    f"checkpoint: the recomputation used a tensor of shape {tuple(t.shape)} that requires grad and "
                    "that the first pass did not use; the checkpointed function must do the same work both times"
                )
        return again


def _unique(tensors: list[Tensor]) -> list[Tensor]:
    seen: set[int] = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]  # type: ignore[func-returns-value]


def _leaves_of(outs: list[Any], start: int, stand_ins: set[int]) -> list[Tensor]:
    """The leaves requiring grad that the graph of ``outs`` recorded after ``start`` reaches, other than the
    argument stand-ins; refuses a tensor computed with grad before ``start`` (taken from outside the function)."""
    leaves: list[Tensor] = []
    seen: set[int] = set()
    stack = [e for o in outs if isinstance(o, Tensor) and (e := autograd.edge(o)) is not None]
    while stack:
        e = stack.pop()
        key = id(e.leaf if e.node is None else e.node)
        if key in seen:
            continue
        seen.add(key)
        if e.node is None:
            if key not in stand_ins:
                leaves.append(e.leaf)  # type: ignore[arg-type]
            continue
        if e.node.seq < start:
            raise RuntimeError(
                f"checkpoint: the function uses a tensor of shape {tuple(e.shape)} that was computed with grad "
                "outside it; pass it as an argument of checkpoint() instead (only parameters and other leaves may "
                "be taken from outside)"
            )
        stack.extend(i for i in e.node.inputs or () if i is not None)
    return leaves
