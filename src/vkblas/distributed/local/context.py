"""A worker process's side of the runner: its data, its model replica on its device, its mailboxes and the board,
its clock (busy and idle time) and traffic counters. The algorithm loops (``sync``, ``asynchronous``,
``diloco``) are written with these few operations."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ... import nn
from ...autograd import no_grad
from ...creation import tensor
from ...data.collate import to_device
from ...device import device as Device
from ...training import models
from ...training.fit import load_dataset
from ..sizing import IdleClock
from .faults import FaultPlan
from .protocol import Stats, Stop, WorkerSpec
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
        self.blocks = [SharedArrays.attach(h) for h in (spec.board, *spec.mailboxes)]  # kept: views need them
        self.board_block = self.blocks[0]
        self.mailboxes = [b["bytes"] for b in self.blocks[1:]]
        self.faults = FaultPlan(f for f in spec.faults)
        self.flat = np.empty(self.layout.size, np.float32)  # host copy of the weights last loaded
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

    def load(self, flat: np.ndarray) -> None:
        """Set the replica's weights to ``flat`` (a host vector in the run's layout)."""
        with no_grad():
            for p, view in zip(self.params, self.layout.views(flat).values(), strict=True):
                p.copy_(tensor(view, device=self.device))
        self.bytes_received += flat.nbytes

    def weights(self) -> dict[str, np.ndarray]:
        return {n: p.detach().numpy() for n, p in zip(self.layout.names, self.params, strict=True)}

    def grads(self) -> dict[str, np.ndarray]:
        return {n: p.grad.numpy() for n, p in zip(self.layout.names, self.params, strict=True)}

    # ------------------------------------------------------------------ compute
    def batch(self, seg: Segment) -> tuple[Any, Any]:
        x, y = self.dataset.get_batch(self.order.indices(seg))
        return to_device(x, self.device), to_device(y, self.device)

    def gradient(self, seg: Segment) -> tuple[float, float, dict[str, np.ndarray], float]:
        """(loss sum, correct, gradients of the mean loss over ``seg`` on the host, compute seconds)."""
        t0 = time.perf_counter()
        x, y = self.batch(seg)
        self.model.train()
        for p in self.params:
            p.grad = None
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        loss.backward()
        grads = self.grads()
        loss_sum = loss.item() * seg.size
        correct = (logits.detach().argmax(1) == y).float().sum().item()
        return loss_sum, correct, grads, time.perf_counter() - t0

    # ------------------------------------------------------------------ updates
    def put(self, arrays: Mapping[str, np.ndarray], box: int, version: Callable[[], int]) -> Layout:
        """Write an update (through the fault plan) into mailbox ``box``; count its bytes as sent. ``version``
        reads the global model's version (for the ``hold`` fault)."""
        layout = pack(self.faults.corrupt(arrays), self.mailboxes[box])
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
