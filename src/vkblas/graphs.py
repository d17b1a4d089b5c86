"""Graph capture and replay: record a piece of device work once, replay it with almost no Python (PyTorch's
``torch.cuda.CUDAGraph`` / ``torch.cuda.graph``).

>>> g = vkblas.graphs.Graph()                                          # doctest: +SKIP
>>> with vkblas.graphs.capture(g, device="vulkan"):                    # doctest: +SKIP
...     loss = train_step(static_x, static_y)  # runs once, and every dispatch is recorded
>>> static_x.copy_(next_x); static_y.copy_(next_y); g.replay()        # doctest: +SKIP
>>> loss.item()                                                        # doctest: +SKIP

Capture is a capability of a backend, declared in the backend contract (``backend/base.py``: ``can_capture``,
``capture_begin`` / ``capture_end`` / ``capture_replay`` / ``capture_release``, ``capture_paused``); this module uses
nothing else. On Vulkan, during capture every dispatch is executed as usual *and* recorded as (pipeline, bind group,
params window, grid); a replay copies all params into the runtime's uniform ring in one slice and re-issues the
dispatches (set pipeline, set bind group, dispatch: three C calls each). Nothing of the Python that produced them
runs again: shapes, strides, Python-number operands and control flow are frozen at capture.

Rules (as in PyTorch, with the differences marked):

* Capture **runs** the work once (PyTorch's capture does not execute it): the captured step is a real step.
* Tensors created inside the block (the loss, new ``.grad`` tensors) are the graph's outputs: each replay rewrites
  them in place. Tensors that existed before (parameters, optimizer state, static inputs) are used as they are.
* Every buffer that a recorded dispatch binds is pinned in the pool while the graph lives, so it is never handed
  to another tensor; ``reset()`` or deleting the graph gives them back (PyTorch: the graph's private memory pool).
  Unlike PyTorch, parameters deleted while a graph still names them are pinned too, not silently reused.
* Forbidden inside the block, with an error saying what to do instead: host reads (``.numpy()``, ``.item()``),
  uploads of host data (create static inputs before, copy batches into them outside), a buffer copy,
  ``synchronize``, nested captures, and ``optimizer.step()`` of an optimizer built without ``capturable=True``.
  Optimizer state must exist before capture: run one eager warm-up step first (PyTorch asks for warm-up too).
* Matmul planning (autotuning, GEMM self-checks) for a shape first seen inside capture runs eagerly, unrecorded.
* Device checks (``check_values``: cross-entropy targets, embeddings, gather, BCE inputs, divisors) are replayed: a
  failure in any replay raises (IndexError, RuntimeError) at the next sync point, as in eager mode.
* Random numbers (dropout, ``rand``) take fresh seeds/counters from their generator on each replay, in the same
  order as eager steps would (PyTorch: the philox offset of the graph-safe generator).
* Python-number operands are frozen. Optimizers with ``capturable=True`` keep lr, step and bias corrections in
  device tensors and register a replay hook (:meth:`Graph.register_replay_hook`) that copies a changed
  ``group["lr"]`` into the device lr before each replay, so LR schedulers keep working.
* Ops on the ``cpu`` backend inside the block run normally (they touch no GPU) but are not replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .backend.base import Backend, Capture
from .device import DeviceLike, resolve

_current: Graph | None = None


class Graph:
    """A recorded sequence of device work (PyTorch's ``torch.cuda.CUDAGraph``): fill it with :func:`capture`,
    re-run it with :meth:`replay`, free its memory with :meth:`reset` (or by dropping it)."""

    def __init__(self) -> None:
        self._backend: Backend | None = None
        self._rec: Capture | None = None
        self._hooks: list[Callable[[], None]] = []
        self._capturing = False

    # -- capture
    def capture_begin(self, device: DeviceLike = None) -> None:
        """Start recording the device work of ``device`` (default: vkblas's default device)."""
        global _current
        if _current is not None:
            raise RuntimeError("a graph capture is already in progress (captures do not nest)")
        if self._rec is not None:
            raise RuntimeError("this graph already holds a capture; call reset() before capturing again")
        backend = resolve(device)
        if not backend.can_capture:
            raise RuntimeError(f"graph capture needs a Vulkan device, got {backend.name!r}; pass device='vulkan'")
        self._rec = backend.capture_begin()
        self._backend, self._capturing = backend, True
        _current = self

    def capture_end(self) -> None:
        """Stop recording; the buffers the graph binds are pinned until :meth:`reset`."""
        global _current
        if not self._capturing:
            raise RuntimeError("capture_end() without capture_begin()")
        assert self._backend is not None
        self._backend.capture_end()
        self._capturing = False
        _current = None

    def _abort(self) -> None:
        self.capture_end()
        self.reset()

    # -- replay
    def replay(self) -> None:
        """Run the captured work again (asynchronously, like every device op), after the replay hooks."""
        if self._rec is None or self._capturing:
            raise RuntimeError("replay() needs a finished capture (use `with vkblas.graphs.capture(graph): ...`)")
        if _current is not None:
            raise RuntimeError("replay() inside a graph capture is not supported")
        for hook in self._hooks:
            hook()
        assert self._backend is not None
        self._backend.capture_replay(self._rec)

    def register_replay_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` before each replay (registered once, however often it is asked): how host-side state
        that a replay cannot see reaches the device, e.g. an optimizer copying a changed ``group["lr"]`` into its
        device lr."""
        if hook not in self._hooks:
            self._hooks.append(hook)

    def reset(self) -> None:
        """Forget the capture and give its pinned buffers back to the pool (PyTorch: ``CUDAGraph.reset``)."""
        rec, self._rec = self._rec, None
        self._hooks = []
        if rec is not None and self._backend is not None:
            self._backend.capture_release(rec)

    def profile(self) -> list[Any]:
        """Replay once with every dispatch timed on the device (timestamp queries): records with ``kernel`` (what
        compiled it), ``grid`` and ``seconds``, in order. Separate timing of each dispatch adds a little per
        dispatch, so use the figures as shares; the work really runs, as in :meth:`replay`."""
        if self._rec is None or self._capturing:
            raise RuntimeError("profile() needs a finished capture (use `with vkblas.graphs.capture(graph): ...`)")
        if _current is not None:
            raise RuntimeError("profile() inside a graph capture is not supported")
        assert self._backend is not None
        for hook in self._hooks:
            hook()
        return self._backend.capture_profile(self._rec)

    @property
    def num_dispatches(self) -> int:
        """Dispatches one replay issues."""
        return self._rec.num_dispatches if self._rec is not None else 0

    def __del__(self) -> None:
        try:
            if not self._capturing:
                self.reset()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass


@contextmanager
def capture(graph: Graph, device: DeviceLike = None) -> Iterator[Graph]:
    """Record the device work of the ``with`` block into ``graph`` (PyTorch's ``torch.cuda.graph(g)``). An
    exception inside the block discards the capture."""
    graph.capture_begin(device)
    try:
        yield graph
    except BaseException:
        graph._abort()
        raise
    graph.capture_end()


def current_graph() -> Graph | None:
    """The graph being captured, if any."""
    return _current


def is_current_stream_capturing() -> bool:
    """Whether a capture is in progress (PyTorch's ``torch.cuda.is_current_stream_capturing``)."""
    return _current is not None


def can_capture(device: DeviceLike = None) -> bool:
    """Whether ``device`` (default: vkblas's default device) can capture graphs."""
    return resolve(device).can_capture


@contextmanager
def paused() -> Iterator[None]:
    """Run device work in the middle of a capture without recording it (one-time set-up, e.g. an optimizer
    writing its device lr)."""
    g = _current
    if g is None or g._backend is None:
        yield
        return
    with g._backend.capture_paused():
        yield


def note_random(backend: Any, generator: Any, numel: int) -> None:
    """Called by the random ops right after their dispatch: inside a capture on ``backend``, replays re-take
    ``numel`` counters from ``generator`` for that dispatch."""
    g = _current
    if g is not None and g._backend is backend and numel and g._rec is not None:
        g._rec.note_random(generator, numel)


__all__ = ["Graph", "can_capture", "capture", "current_graph", "is_current_stream_capturing", "paused"]
