"""A worker process's side of the runner: its data, its model replica on its device, its mailboxes and the board,
its clock (busy and idle time) and traffic counters. The algorithm loops (``sync``, ``asynchronous``,
``diloco``) are written with these few operations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ... import graphs, nn
from ...data.collate import to_device
from ...device import device as Device
from ...training import models
from ...training.fit import load_dataset
from ..sizing import IdleClock
from .faults import FaultPlan
from .protocol import Stats, Stop, WorkerSpec
from .replica import Replica
from .stream import EpochOrder, Segment
from .transport import Layout, SeqlockBoard, SharedArrays, layout_nbytes, pack


class StopWorker(Exception):  # noqa: N818 (a signal, not an error)
    """The runner said ``Stop``."""


def build_model(config: Any) -> Any:
    """The run's model, from ``config.train.model`` and ``config.model_options``."""
    builder = models.MODELS.get(config.train.model)
    if builder is None:
        raise ValueError(f"unknown model {config.train.model!r}: choose from {', '.join(models.MODELS)}")
    return builder(**config.model_options)


class WorkerContext:
    """Set up from ``spec`` (data split, model replica on ``spec.device``, shared blocks attached), talking to the
    runner over ``conn``."""

    def __init__(self, spec: WorkerSpec, conn: Any) -> None:
        cfg = spec.config
        self.spec, self.conn, self.config = spec, conn, cfg
        self.name, self.index = spec.name, spec.index
        self.device = str(Device(spec.device))
        self.dataset = load_dataset(cfg.train.dataset, True, cfg.train.data, cfg.train.limit)
        self.dataset.get_batch(np.arange(1))  # the split's one-off transform, before the clock starts
        self.order = EpochOrder(len(self.dataset), cfg.train.seed)
        self.model = build_model(cfg).to(self.device)
        named = dict(self.model.named_parameters())
        if list(named) != list(spec.layout.names):
            raise RuntimeError(f"worker {self.name}: model parameters {list(named)} differ from the run's")
        self.params = [named[n] for n in spec.layout.names]
        self.loss_fn = nn.CrossEntropyLoss()
        self.layout = spec.layout
        self.expected = spec.layout.mailbox  # the layout of an uncorrupted flat update
        capture = cfg.train.graph and graphs.can_capture(self.device)
        self.replica = Replica(self.model, self.params, self.device, self.loss_fn, cfg.quantum(spec.device), capture)
        self.blocks = [SharedArrays.attach(h) for h in (spec.board, *spec.mailboxes)]  # kept: views need them
        self.board_block = self.blocks[0]
        self.mailboxes = [b["bytes"] for b in self.blocks[1:]]
        self.vectors = [m[: 4 * self.layout.size].view(np.float32) for m in self.mailboxes]
        self.faults = FaultPlan(f for f in spec.faults)
        self.flat = np.empty(self.layout.size, np.float32)  # host copy of the weights last pulled
        self.clock = IdleClock()
        self.bytes_sent = self.bytes_received = 0

    def start_clock(self) -> None:
        self.clock = IdleClock()

    # ------------------------------------------------------------------ messages
    def recv(self) -> Any:
        """The next message from the runner; waiting counts as idle. ``Stop`` raises :class:`StopWorker`."""
        with self.clock.idle():
            msg = self.conn.recv()
        if isinstance(msg, Stop):
            raise StopWorker
        return msg

    def send(self, msg: Any) -> None:
        self.conn.send(msg)

    def stats(self) -> Stats:
        return Stats(self.clock.wall_s, self.clock.idle_s, self.bytes_sent, self.bytes_received)

    # ------------------------------------------------------------------ weights
    def board(self) -> SeqlockBoard:
        return SeqlockBoard(self.board_block)

    def attach(self, handle: Any) -> SharedArrays:
        """Another block of the run (kept attached for the life of the process)."""
        block = SharedArrays.attach(handle)
        self.blocks.append(block)
        return block

    def pull(self) -> int:
        """Load the newest global weights from the seqlock board into the replica (and :attr:`flat`); return
        their version."""
        version = self.board().read(self.flat)
        self.load(self.flat)
        return version

    def load(self, flat: np.ndarray, count: bool = True) -> None:
        """Set the replica's weights to ``flat`` (a host vector in the run's layout); ``count``: as weights received
        (not when this process computed them itself)."""
        self.replica.load(flat)
        if count:
            self.bytes_received += flat.nbytes

    def weights(self) -> dict[str, np.ndarray]:
        return self.layout.views(self.replica.weights(np.empty(self.layout.size, np.float32)))

    # ------------------------------------------------------------------ compute
    def batch(self, seg: Segment) -> tuple[Any, Any]:
        x, y = self.dataset.get_batch(self.order.indices(seg))
        return to_device(x, self.device), to_device(y, self.device)

    def gradient(self, seg: Segment, box: int) -> tuple[float, float]:
        """The mean-loss gradient over ``seg``, written as the flat vector into mailbox ``box``; returns (loss
        sum, correct)."""
        x, y = self.dataset.get_batch(self.order.indices(seg))
        return self.replica.gradient(x, y, self.vectors[box])

    # ------------------------------------------------------------------ updates
    def put(self, arrays: Mapping[str, np.ndarray], box: int, version: Callable[[], int]) -> Layout:
        """Write an update (through the fault plan) into mailbox ``box``; count its bytes as sent. ``version``
        reads the global model's version (for the ``hold`` fault)."""
        layout = pack(self.faults.corrupt(arrays), self.mailboxes[box])
        return self._sent(layout, version)

    def put_gradient(self, box: int, version: Callable[[], int]) -> Layout:
        """Send the flat gradient :meth:`gradient` left in mailbox ``box`` (re-packed if a fault corrupts it)."""
        if self.faults.corrupts():
            return self.put(self.layout.views(self.vectors[box].copy()), box, version)
        return self._sent(self.expected, version)

    def _sent(self, layout: Layout, version: Callable[[], int]) -> Layout:
        self.faults.before_send(version)
        self.bytes_sent += layout_nbytes(layout)
        return layout

    def result(
        self, seg: Segment, loss_sum: float, correct: float, compute_s: float, layout: Layout, steps: int = 1
    ) -> dict:
        """The fields every update message shares (:class:`~.protocol.Result`)."""
        return dict(
            epoch=seg.epoch,
            samples=seg.size,
            steps=steps,
            loss_sum=loss_sum,
            correct=correct,
            compute_s=compute_s,
            layout=layout,
            stats=self.stats(),
        )
