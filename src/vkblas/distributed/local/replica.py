"""A worker's model on its device, fed and read as flat float32 host vectors: weights go in with :meth:`load`, and
:meth:`Replica.gradient` runs forward + backward of a batch and writes the gradient, in the run's flat layout,
into a host vector (a mailbox in shared memory).

On a device that captures graphs (Vulkan; ``vkblas.graphs.can_capture``), each transfer is one copy of the whole
vector: the weights are uploaded into one device vector and copied into the parameters on the device; the
gradients (and the batch's loss and correct count) are concatenated on the device and downloaded at once. The
step itself (forward, backward, the concatenation) is captured as a graph per batch size — the second time a size
that is a multiple of ``quantum`` comes, as ``training/loop.py``'s ``GraphedStep`` does with its warm-up — and
replayed from then on; other sizes, and sizes beyond the :data:`MAX_GRAPHS` kept, run eagerly. The runner
quantises the shares of such workers to multiples of ``quantum`` so that a few graphs serve a whole run.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import graphs
from ...autograd import no_grad
from ...creation import zeros
from ...data.collate import to_device
from ...ops.shape import cat
from ...tensor import Tensor

MAX_GRAPHS = 8  # captured batch sizes kept per worker (each pins its activations on the device)


@dataclass
class _Captured:
    graph: Any
    x: Tensor
    y: Tensor
    out: Tensor


class Replica:
    """``model``'s ``params`` (in the run's flat order) on ``device``, trained with ``loss_fn``; batch sizes that
    are multiples of ``quantum`` are captured as graphs where the device can (and ``capture`` allows)."""

    def __init__(
        self,
        model: Any,
        params: Sequence[Tensor],
        device: str,
        loss_fn: Callable[[Tensor, Tensor], Tensor],
        quantum: int = 32,
        capture: bool = True,
    ) -> None:
        self.model, self.params, self.device, self.loss_fn = model, list(params), device, loss_fn
        self.sizes = [p.numel() for p in self.params]
        self.size = sum(self.sizes)
        self.quantum = max(1, quantum)
        self.capture = capture and graphs.can_capture(device)
        self.staged = graphs.can_capture(device)  # one upload of the whole vector, then device copies
        self._flat = zeros(self.size, device=device) if self.staged else None
        self._views: list[Tensor] = []
        off = 0
        for p, n in zip(self.params, self.sizes, strict=True):
            if self._flat is not None:
                self._views.append(self._flat[off : off + n].reshape(tuple(p.shape)))
            off += n
        self.graphs: OrderedDict[int, _Captured] = OrderedDict()
        self.seen: dict[int, int] = {}
        self.replays = self.captures = self.eager = 0
        model.train()

    # ------------------------------------------------------------------ weights
    def load(self, flat: np.ndarray) -> None:
        """Set the parameters to the host vector ``flat``."""
        with no_grad():
            if self._flat is not None:
                self._flat.copy_(flat)  # the one upload
                for p, view in zip(self.params, self._views, strict=True):
                    p.copy_(view)
                return
            off = 0
            for p, n in zip(self.params, self.sizes, strict=True):
                p.copy_(flat[off : off + n].reshape(tuple(p.shape)))
                off += n

    def weights(self, out: np.ndarray) -> np.ndarray:
        """The parameters, into the host vector ``out``."""
        with no_grad():
            host = cat([p.detach().reshape(-1) for p in self.params]).numpy()
        np.copyto(out, host)
        return out

    # ------------------------------------------------------------------ gradients
    def _body(self, x: Tensor, y: Tensor) -> Tensor:
        """Forward + backward; the flat gradient followed by the loss sum and the correct count, on the device."""
        for p in self.params:
            p.grad = None
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        loss.backward()
        with no_grad():
            n = float(y.shape[0])
            correct = (logits.detach().argmax(1) == y).float().sum()
            tail = [(loss.detach() * n).reshape(1), correct.reshape(1)]
            return cat([p.grad.reshape(-1) for p in self.params] + tail)  # type: ignore[union-attr]

    def gradient(self, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> tuple[float, float]:
        """The mean-loss gradient of the batch ``(x, y)`` (host arrays) into ``out``; returns (loss sum,
        correct)."""
        n = int(y.shape[0])
        captured = self.graphs.get(n)
        if captured is None and self._should_capture(n):
            flat = self._capture(n, x, y)  # capture runs the step once: it is this batch's gradient
            self.captures += 1
        elif captured is not None:
            self.graphs.move_to_end(n)
            captured.x.copy_(x)
            captured.y.copy_(y)
            captured.graph.replay()
            flat = captured.out
            self.replays += 1
        elif not self.staged:  # the cpu: each gradient straight into ``out``, no concatenated copy
            self.eager += 1
            return self._host_body(x, y, out)
        else:
            flat = self._body(to_device(x, self.device), to_device(y, self.device))
            self.eager += 1
        host = flat.numpy()  # the one download
        np.copyto(out, host[: self.size])
        return float(host[self.size]), float(host[self.size + 1])

    def _host_body(self, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> tuple[float, float]:
        for p in self.params:
            p.grad = None
        xs, ys = to_device(x, self.device), to_device(y, self.device)
        logits = self.model(xs)
        loss = self.loss_fn(logits, ys)
        loss.backward()
        off = 0
        for p, n in zip(self.params, self.sizes, strict=True):
            np.copyto(out[off : off + n], p.grad.numpy().reshape(-1))  # type: ignore[union-attr]
            off += n
        with no_grad():
            correct = (logits.detach().argmax(1) == ys).float().sum().item()
        return loss.item() * int(y.shape[0]), correct

    def _should_capture(self, n: int) -> bool:
        """Whether to capture batch size ``n`` now: a multiple of the quantum seen once before (the first batch of
        a size runs eagerly: it plans the matmuls of that shape)."""
        if not self.capture or n % self.quantum:
            return False
        self.seen[n] = self.seen.get(n, 0) + 1
        return self.seen[n] >= 2

    def _capture(self, n: int, x: np.ndarray, y: np.ndarray) -> Tensor:
        if len(self.graphs) >= MAX_GRAPHS:  # the least recently used size goes
            _, old = self.graphs.popitem(last=False)
            old.graph.reset()
        sx, sy = to_device(x, self.device), to_device(y, self.device)
        graph = graphs.Graph()
        with graphs.capture(graph, device=self.device):
            out = self._body(sx, sy)
        self.graphs[n] = _Captured(graph, sx, sy, out)
        return out

    def stats(self) -> dict[str, Any]:
        return {
            "graphs": sorted(self.graphs),
            "captures": self.captures,
            "replays": self.replays,
            "eager_steps": self.eager,
        }
