"""Reverse-mode autograd: a define-by-run tape of :class:`Node` objects, walked iteratively.

An op whose inputs require grad records a Node holding an :class:`Edge` per input (where its gradient goes), the
tensors its backward rule needs (``saved``) and the rule itself. As in PyTorch, a node keeps only what its rule
needs: an input it does not save is not kept alive by the graph (a residual branch's output, say, is freed once the
add that consumes it has run), so a forward's memory is the saved tensors and nothing more. ``backward()`` orders
the graph with an iterative depth-first search (deep graphs must not hit Python's recursion limit), runs each rule
once with the summed incoming gradient, undoes broadcasting in exactly one place (:func:`_sum_to_shape`), and
accumulates into ``.grad`` of leaves. Rules are written with Tensor ops, so
autograd lives above the backends and is written once.

The engine imports nothing of vkblas: it only calls methods of the tensors it is given (``Tensor.backward`` hands
it the seed gradient as a tensor), so ``tensor.py`` and every op can import it without an import circle.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .tensor import Tensor

Rule = Callable[["Node", "Tensor"], Sequence["Tensor | None"]]


class _GradMode(threading.local):
    """This thread's grad mode, and the modes the contexts it is inside replaced (innermost last). The saved modes
    are the thread's, not the context object's: one ``@no_grad`` function (one object) runs in many threads at
    once, and a mode saved on the object by one thread was restored in another (a worker thread then trained on
    with grad mode off: "element 0 of tensors does not require grad")."""

    def __init__(self) -> None:
        self.enabled = True
        self.saved: list[bool] = []


_mode = _GradMode()


def is_grad_enabled() -> bool:
    return _mode.enabled


class set_grad_enabled(contextlib.ContextDecorator):
    """Context manager / decorator that sets whether ops record the graph (PyTorch's name and behaviour)."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        _mode.saved.append(_mode.enabled)
        _mode.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        _mode.enabled = _mode.saved.pop()


class _NoArgsDecorator(set_grad_enabled):
    """A grad-mode context that is also a decorator with or without parentheses: ``@no_grad`` and ``@no_grad()``
    (PyTorch's ``_NoParamDecoratorContextManager``)."""

    _mode_value = False

    def __new__(cls, orig_func: Callable[..., Any] | None = None) -> Any:
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise TypeError(f"{cls.__name__}() takes no arguments, got {orig_func!r}")
        return cls()(orig_func)

    def __init__(self, orig_func: Callable[..., Any] | None = None) -> None:
        super().__init__(self._mode_value)


class no_grad(_NoArgsDecorator):
    """Ops inside record nothing: for evaluation and for optimizer updates."""

    _mode_value = False


class enable_grad(_NoArgsDecorator):
    _mode_value = True


class inference_mode(set_grad_enabled):
    """PyTorch's ``inference_mode``: here exactly ``no_grad`` (``mode=False``: grad mode unchanged, as ``enable_grad``
    is not implied); usable as ``with``, ``@inference_mode`` and ``@inference_mode()``."""

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: Any = True) -> None:
        super().__init__(False)
        self.active = bool(mode)

    def __enter__(self) -> None:
        _mode.saved.append(_mode.enabled)
        if self.active:
            _mode.enabled = False


class _AutocastMode(threading.local):
    """What ``vkblas.amp.autocast`` switched on in this thread (the ops read it through ``ops/autocast.py``). It
    lives beside grad mode because the engine runs every backward rule with it off, as PyTorch's does: a gradient
    keeps its forward's dtype whatever context ``backward()`` is called in."""

    def __init__(self) -> None:
        #: device type ("cpu", "vulkan") -> the lower-precision dtype, for each device type autocast is on for
        self.dtypes: dict[str, Any] = {}
        self.cache_enabled = True
        #: id(float32 leaf) -> (the leaf, its version, its cast): a parameter is cast once per autocast region
        self.cache: dict[int, tuple[Any, int, Any]] = {}
        self.depth = 0  # nesting of enabled autocast regions: the cache is emptied on leaving the outermost
        #: what each region this thread is inside replaced (innermost last): kept here, not on the ``autocast``
        #: object, which one decorated function shares between threads and recursive calls
        self.saved: list[tuple[dict[str, Any], bool]] = []


autocast_mode = _AutocastMode()


@contextlib.contextmanager
def autocast_off() -> Iterator[None]:
    """No autocast inside (the backward pass; code that must compute in the dtypes it is given)."""
    saved = autocast_mode.dtypes
    autocast_mode.dtypes = {}
    try:
        yield
    finally:
        autocast_mode.dtypes = saved


#: numbers the Nodes in the order they are recorded (PyTorch's ``sequence_nr``): a node recorded after a point of
#: the program has a larger ``seq`` than ``next_seq()`` returned there (activation checkpointing uses this)
_seq = itertools.count()


def next_seq() -> int:
    """A number larger than every Node's ``seq`` so far and smaller than every later one's."""
    return next(_seq)


class Edge(NamedTuple):
    """Where an input's gradient goes, fixed when the op is recorded (PyTorch's ``next_edges``): the node that made
    the input, or the leaf to accumulate into; with the input's shape and dtype (to undo broadcasting and casts).
    A non-leaf input is only weakly referenced (for ``retain_grad``), so the graph does not keep it alive."""

    node: Node | None
    leaf: Tensor | None
    shape: tuple[int, ...]
    dtype: Any
    ref: weakref.ref[Tensor] | None


_new_tuple = tuple.__new__  # several times faster than a NamedTuple's own __new__, on every recorded op


def edge(t: Tensor | None) -> Edge | None:
    """The edge to ``t``'s gradient, or None where ``t`` takes no gradient."""
    if t is None or not t.requires_grad:
        return None
    fn, view = t.grad_fn, t._view
    if fn is None:
        return _new_tuple(Edge, (None, t, view.shape, view.storage.dtype, None))
    return _new_tuple(Edge, (fn, None, view.shape, view.storage.dtype, weakref.ref(t)))


class Node:
    """One recorded op. ``needs[i]`` says whether input i wants a gradient, so rules can skip work."""

    __slots__ = ("name", "inputs", "saved", "rule", "needs", "_versions", "extra", "seq")

    def __init__(self, name: str, inputs: Sequence[Tensor | None], rule: Rule, saved: Sequence[Any] = (), **extra: Any):
        self.name = name
        #: one edge per input (None: no gradient goes there); None once backward has freed the node
        edges = tuple([edge(t) for t in inputs])  # (list comprehensions: faster than generators here)
        self.inputs: tuple[Edge | None, ...] | None = edges
        self.needs = tuple([e is not None for e in edges])
        self.rule: Rule | None = rule
        self.saved = saved = tuple(saved)
        self._versions = tuple([getattr(s, "_version", None) for s in saved]) if saved else ()
        self.extra = extra
        self.seq = next(_seq)

    def __repr__(self) -> str:
        return f"<{self.name}>"

    def name_(self) -> str:
        return self.name

    def next_nodes(self) -> tuple[Node, ...]:
        """The nodes this one's gradient flows into (a freed node: none)."""
        return tuple(e.node for e in self.inputs or () if e is not None and e.node is not None)

    def check_saved(self) -> None:
        if not self.saved:
            return
        for i, (s, v) in enumerate(zip(self.saved, self._versions, strict=True)):
            if v is not None and s._version != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: saved tensor {i} of {self.name} (shape {tuple(s.shape)}) is at version {s._version}; "
                    f"expected version {v} instead."
                )


def record(out: Tensor, name: str, inputs: Sequence[Tensor | None], rule: Rule, saved: Sequence[Any] = (), **extra):
    """Attach a Node to ``out`` if grad mode is on and some input requires grad. Returns ``out``."""
    if _mode.enabled:
        for t in inputs:  # (a loop, not any() over a generator: this runs for every op)
            if t is not None and t.requires_grad:
                out.grad_fn = Node(name, inputs, rule, saved, **extra)
                out.requires_grad = True
                break
    return out


def _sum_to_shape(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Undo broadcasting: sum ``g`` over the dims that were broadcast to reach its shape."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1)
    if axes:
        g = g.sum(dim=axes, keepdim=True)
    return g.reshape(shape)


def _topo_order(root: Node) -> list[Node]:
    """Nodes reachable from root, each after every node that consumes it (iterative post-order DFS)."""
    order: list[Node] = []
    visited: set[int] = {id(root)}
    stack: list[tuple[Node, Iterator[Node]]] = [(root, iter(root.next_nodes()))]
    while stack:
        node, it = stack[-1]
        for child in it:
            if id(child) not in visited:
                visited.add(id(child))
                stack.append((child, iter(child.next_nodes())))
                break
        else:
            stack.pop()
            order.append(node)
    order.reverse()
    return order


def backward(tensor: Tensor, gradient: Tensor, retain_graph: bool = False) -> None:
    """Run the backward pass from ``tensor`` seeded with ``gradient``, a tensor of its shape (``Tensor.backward``
    makes it: ones by default, or from host data)."""
    if not tensor.requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    if tuple(gradient.shape) != tuple(tensor.shape):
        raise RuntimeError(
            f"grad can be implicitly created only for matching shapes: gradient has shape "
            f"{tuple(gradient.shape)} but the output has shape {tuple(tensor.shape)}"
        )
    if gradient._backend is not tensor._backend and gradient.device != tensor.device:
        raise RuntimeError(f"gradient is on {gradient.device} but the output is on {tensor.device}")
    root = tensor.grad_fn
    with no_grad(), autocast_off():
        if root is None:  # a leaf
            tensor._accumulate_grad(gradient)
            return
        if root.inputs is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved tensors after they "
                "have already been freed). Specify retain_graph=True if you need to backward through the graph a "
                "second time."
            )
        grads: dict[int, Tensor] = {id(root): gradient}
        # storages already visible to the user (their gradient, and each .grad handed out): a gradient living in
        # one of them is copied before it becomes a .grad; any other contiguous gradient is kept as it is
        seen: set[int] = {id(gradient._view.storage)}

        def owned(g: Tensor) -> bool:
            st = g._view.storage
            if id(st) in seen or g._view.offset or st.numel != g._view.numel or not g._view.is_contiguous():
                return False
            seen.add(id(st))
            return True

        for node in _topo_order(root):
            g = grads.pop(id(node), None)
            if g is None or node.inputs is None:
                if node.inputs is None:
                    raise RuntimeError(
                        f"Trying to backward through the graph a second time ({node.name} was freed); "
                        "specify retain_graph=True on the first backward."
                    )
                continue
            node.check_saved()
            assert node.rule is not None
            in_grads = node.rule(node, g)
            for e, gi in zip(node.inputs, in_grads, strict=True):
                if e is None or gi is None:
                    continue
                if gi._view.shape != e.shape:
                    gi = _sum_to_shape(gi, e.shape)
                if gi._view.storage.dtype is not e.dtype:
                    gi = gi.to(e.dtype)
                if e.node is None:
                    e.leaf._accumulate_grad(gi, owned(gi))  # type: ignore[union-attr]
                else:
                    t = e.ref()  # type: ignore[misc]
                    if t is not None and t._retains_grad:
                        t._accumulate_grad(gi)
                    key = id(e.node)
                    grads[key] = grads[key] + gi if key in grads else gi
            if not retain_graph:
                node.inputs, node.rule, node.saved = None, None, ()


def grad(
    outputs: Tensor, inputs: Sequence[Tensor], grad_outputs: Tensor | None = None, retain_graph: bool = False
) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` with respect to ``inputs`` without touching their ``.grad`` (first order only)."""
    saved = [(t.grad, t._retains_grad) for t in inputs]
    for t in inputs:
        t.grad = None
        if t.grad_fn is not None:
            t._retains_grad = True
    try:
        outputs.backward(grad_outputs, retain_graph=retain_graph)  # Tensor.backward turns host data into a tensor
        return tuple(t.grad for t in inputs)
    finally:
        for t, (g, r) in zip(inputs, saved, strict=True):
            t.grad, t._retains_grad = g, r
