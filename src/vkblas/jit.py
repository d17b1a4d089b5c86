"""``vkblas.compile``: run a step function eagerly a few times, then capture it once with ``vkblas.graphs`` and replay
the graph (tinygrad's ``TinyJit``, ``torch.compile(mode="reduce-overhead")``).

>>> @vkblas.compile                                                    # doctest: +SKIP
... def train_step(x, y):
...     opt.zero_grad()
...     loss = F.cross_entropy(model(x), y)
...     loss.backward()
...     opt.step()
...     return loss
>>> for x, y in batches:                                               # doctest: +SKIP
...     loss = train_step(x, y)        # calls 1-2 eager, 3 captured (and run), then replays

How it works: the tensors among the arguments (positional and keyword, and inside lists/tuples) are the inputs.
Per *signature* -- their shapes, dtypes and devices, plus the other arguments (which must be hashable, and are
frozen in the graph, like every Python number of the step) -- the first ``warmup`` calls run ``fn`` eagerly (this
creates the optimizer state that capture needs); the next one allocates static copies of the inputs, copies the
arguments into them, and captures ``fn`` on them (the capture runs the step: that call is a real step); later calls
copy the arguments into the static inputs and replay. A new signature is warmed up and captured on its own; at most
``max_graphs`` graphs are kept (the least recently used one is reset first).

The value returned by a replayed call is the graph's own outputs (as in PyTorch's CUDA graphs): the next call of
the same signature overwrites them in place, so copy (``.clone()``) what must outlive it.

On a device that cannot capture (``cpu``) ``fn`` always runs eagerly: the decorator changes nothing there.

Errors: what graph capture forbids raises at the capturing call, as a ``RuntimeError`` that names the function and
says what to change: an optimizer built without ``capturable=True``, host reads (``.item()``, ``.numpy()``,
printing a tensor) or uploads of host data inside ``fn``. The capture is then discarded (the work issued before the
failure has run).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from . import graphs
from .autograd import no_grad
from .backend.base import GraphCaptureError
from .tensor import Tensor

F = TypeVar("F", bound=Callable[..., Any])


class _Entry:
    __slots__ = ("calls", "graph", "output", "statics")

    def __init__(self) -> None:
        self.calls = 0
        self.graph: graphs.Graph | None = None
        self.statics: list[Tensor] = []
        self.output: Any = None


def _tensors(args: Any) -> list[Tensor]:
    """The tensors of ``args`` in a fixed order (lists, tuples and dict values searched)."""
    if isinstance(args, Tensor):
        return [args]
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in _tensors(a)]
    if isinstance(args, dict):
        return [t for k in sorted(args, key=str) for t in _tensors(args[k])]
    return []


def _replace(args: Any, statics: Any) -> Any:
    """``args`` with each tensor replaced by the next of ``statics`` (an iterator), in :func:`_tensors`' order."""
    if isinstance(args, Tensor):
        return next(statics)
    if isinstance(args, (list, tuple)):
        return type(args)(_replace(a, statics) for a in args)
    if isinstance(args, dict):
        out = dict(args)
        for k in sorted(args, key=str):
            out[k] = _replace(args[k], statics)
        return out
    return args


def _frozen(args: Any) -> Hashable:
    """The non-tensor part of the signature (tensors stand in as their shape, dtype, device)."""
    if isinstance(args, Tensor):
        return (tuple(args.shape), args.dtype.name, str(args.device), args.requires_grad)
    if isinstance(args, (list, tuple)):
        return (type(args).__name__, *(_frozen(a) for a in args))
    if isinstance(args, dict):
        return ("dict", *((k, _frozen(args[k])) for k in sorted(args, key=str)))
    try:
        hash(args)
    except TypeError:
        raise TypeError(
            f"vkblas.compile: argument {args!r} of type {type(args).__name__} is not hashable; a compiled function's "
            "non-tensor arguments are part of its signature (frozen into the graph)"
        ) from None
    return args


class CompiledFunction:
    """``fn`` with warm-up, capture and replay per input signature (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], warmup: int = 2, max_graphs: int = 8) -> None:
        if warmup < 1:
            raise ValueError(f"vkblas.compile: warmup must be >= 1 (optimizer state is created eagerly), got {warmup}")
        if max_graphs < 1:
            raise ValueError(f"vkblas.compile: max_graphs must be >= 1, got {max_graphs}")
        self.fn, self.warmup, self.max_graphs = fn, warmup, max_graphs
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        functools.update_wrapper(self, fn)

    @property
    def num_graphs(self) -> int:
        """Captured graphs held now."""
        return sum(e.graph is not None for e in self._entries.values())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inputs = _tensors((args, kwargs))
        backend = inputs[0]._backend if inputs else None
        if backend is None or not backend.can_capture or graphs.current_graph() is not None:
            return self.fn(*args, **kwargs)
        key = _frozen((args, kwargs))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            while len(self._entries) > self.max_graphs:
                _, old = self._entries.popitem(last=False)
                if old.graph is not None:
                    old.graph.reset()
        self._entries.move_to_end(key)
        if entry.calls < self.warmup:
            entry.calls += 1
            return self.fn(*args, **kwargs)
        if entry.graph is None:
            return self._capture(entry, inputs, args, kwargs)
        with no_grad():
            for s, t in zip(entry.statics, inputs, strict=True):
                s.copy_(t)
        entry.graph.replay()
        return entry.output

    def _capture(self, entry: _Entry, inputs: list[Tensor], args: Any, kwargs: Any) -> Any:
        with no_grad():
            statics = [t.detach().clone() for t in inputs]  # before capture: uploads and allocations are not replayed
        for s, t in zip(statics, inputs, strict=True):
            if t.requires_grad:
                s.requires_grad_()
        s_args, s_kwargs = _replace((args, kwargs), iter(statics))
        graph = graphs.Graph()
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        try:
            with graphs.capture(graph, device=inputs[0].device):
                output = self.fn(*s_args, **s_kwargs)
        except GraphCaptureError as e:
            raise RuntimeError(
                f"vkblas.compile({name}): the function does something a graph cannot replay; keep host reads "
                f"(.item(), .numpy(), print) and new host data out of it (return tensors and read them after the "
                f"call): {e}"
            ) from e
        except RuntimeError as e:
            if "capturable" in str(e) or "warm-up" in str(e):
                raise RuntimeError(f"vkblas.compile({name}): {e}") from e
            raise
        entry.graph, entry.statics, entry.output = graph, statics, output
        return output

    def reset(self) -> None:
        """Forget every graph (their memory goes back to the pool); the next calls warm up again."""
        for e in self._entries.values():
            if e.graph is not None:
                e.graph.reset()
        self._entries.clear()


def compile(  # noqa: A001 - PyTorch's name
    fn: F | None = None, *, warmup: int = 2, max_graphs: int = 8
) -> Any:
    """Decorate ``fn`` (a training or inference step) to be captured and replayed with ``vkblas.graphs`` after
    ``warmup`` eager calls per input signature; ``max_graphs`` bounds the graphs kept. Usable as ``@compile`` or
    ``@compile(warmup=3)``. See :mod:`vkblas.jit`."""
    if fn is None:
        return lambda f: CompiledFunction(f, warmup, max_graphs)
    return CompiledFunction(fn, warmup, max_graphs)


__all__ = ["CompiledFunction", "compile"]
