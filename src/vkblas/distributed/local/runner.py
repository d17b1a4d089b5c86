"""The local runner: one process per worker, watched by this one, which also holds the global model.

A worker goes through these states (the runner's single monitor loop drives them, in the manner of
``torch.distributed.elastic``'s agent)::

    spawned --Hello--> ready --(work, results ...)--> stopped      (the runner said Stop)
       |                 |
       +-----------------+--> dead   (exit, kill -9, a Failed report, or silent with work outstanding for
                                      worker_timeout_s): its work goes back to the others; the run goes on

The loop waits on every worker's pipe *and* process sentinel with ``multiprocessing.connection.wait``, so a
death is seen the moment the process is gone, not at the next poll. Workers can be added while it runs
(:meth:`LocalRunner.add_worker`); they take part from the next step or round.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import numpy as np
from tqdm import tqdm

from ...random import manual_seed
from ...training.fit import load_dataset
from . import outputs
from .asynchronous import AsyncHolder
from .config import LocalConfig
from .context import build_model
from .diloco import DilocoHolder
from .faults import Fault
from .handle import WorkerHandle
from .holder import Holder
from .procs import spawn, stop
from .protocol import Failed, Hello, WorkerSpec
from .sync import sync_holder
from .transport import FlatLayout, SharedArrays
from .worker import main as worker_main

HOLDERS: dict[str, Callable[..., Holder]] = {"sync": sync_holder, "async": AsyncHolder, "diloco": DilocoHolder}
MAILBOX_SLACK = 4096  # bytes beyond the fp32 update: int8 scales and alignment fit in it
POLL_S = 0.2  # the loop wakes at least this often (progress bar, callback, watchdog)
BAR_S = 0.5

Callback = Callable[["LocalRunner"], None]


def initial_params(cfg: LocalConfig) -> dict[str, np.ndarray]:
    """The weights every worker starts from: the model built after ``manual_seed(seed)``, as ``vkblas train``
    builds it."""
    manual_seed(cfg.train.seed)
    model = build_model(cfg).to("cpu")
    buffers = [n for n, _ in model.named_buffers()]
    if buffers:
        raise ValueError(f"the local runner trains models without buffers; {cfg.train.model!r} has {buffers}")
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


class LocalRunner:
    """Train ``config`` on its workers (see :func:`run_local`). ``faults`` inject failures (tests, benchmarks);
    ``callback(runner)`` is called from the monitor loop at least every 0.2 s, and may call
    :meth:`add_worker` and :meth:`kill_worker`."""

    def __init__(self, config: LocalConfig, faults: Sequence[Fault] = (), callback: Callback | None = None) -> None:
        self.config, self.faults, self.callback = config, tuple(faults), callback
        self.handles: list[WorkerHandle] = []
        self.blocks: list[SharedArrays] = []
        self.deaths: list[dict[str, Any]] = []
        self.holder: Holder | None = None
        self.layout: FlatLayout | None = None
        self._busy_since: dict[str, float] = {}
        self._running = False

    # ------------------------------------------------------------------ public, also from the callback
    @property
    def processed(self) -> int:
        """Samples whose updates have arrived so far (applied, dropped or rejected)."""
        return self.holder.arrived if self.holder is not None else 0

    def worker(self, name: str) -> WorkerHandle:
        for h in self.handles:
            if h.name == name:
                return h
        raise KeyError(f"no worker named {name!r}; workers: {[h.name for h in self.handles]}")

    def add_worker(self, device: str) -> str:
        """Start another worker on ``device``; it joins at the next step or round. Returns its name."""
        assert self.holder is not None and self.layout is not None, "add_worker needs a running run"
        index = len(self.handles)
        name = f"w{index}"
        # two for sync (gradients alternate by step parity), one for the others
        count = 2 if self.config.algorithm == "sync" else 1
        box = (("bytes", (4 * self.layout.size + MAILBOX_SLACK,), "uint8"),)
        mailboxes = [SharedArrays.create(box) for _ in range(count)]
        self.blocks.extend(mailboxes)
        board = self.holder.blocks[0].handle  # sync: the parameter/state buffers; else the seqlock board
        spec = WorkerSpec(
            name=name,
            index=index,
            device=device,
            config=self.config,
            layout=self.layout,
            board=board,
            mailboxes=tuple(m.handle for m in mailboxes),
            faults=tuple(f for f in self.faults if f.worker == index),
        )
        self.handles.append(spawn(worker_main, spec, mailboxes, self.config.threads))
        return name

    def kill_worker(self, name: str) -> None:
        """``kill -9`` worker ``name`` (tests and benchmarks)."""
        pid = self.worker(name).pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        """Train to the end; write ``model.safetensors``, ``metrics.json``, ``curves.png``; return the metrics."""
        cfg = self.config
        train = cfg.train
        n_train = len(load_dataset(train.dataset, True, train.data, train.limit))
        params = initial_params(cfg)
        self.layout = layout = FlatLayout.of(params)
        try:
            holder = self.holder = HOLDERS[cfg.algorithm](cfg, layout, n_train, layout.flatten(params))
            self.blocks.extend(holder.blocks)
            for device in cfg.workers:
                self.add_worker(device)
            self._wait_ready()
            for h in self.handles:
                holder.add(h)
            holder.start()
            self._running = True
            self._loop()
            train_seconds = time.monotonic() - holder.started_at
            final = holder.params()
        finally:
            self._running = False
            self._stop()
            self._release()
        return outputs.write(cfg, holder, layout, final, train_seconds, self.summary(train_seconds))

    def summary(self, train_seconds: float) -> dict[str, Any]:
        assert self.holder is not None
        return {
            **self.holder.metrics.to_dict(),
            **self.holder.summary(),
            "processed_samples": self.holder.processed,
            "train_seconds": train_seconds,
            "deaths": self.deaths,
            "threads_per_worker": self.config.threads,
        }

    def _stop(self) -> None:
        stop([h for h in self.handles if h.process.is_alive() or h.alive])
        for h in self.handles:
            h.alive = False

    def _release(self) -> None:
        for b in self.blocks:
            b.close()
            b.unlink()
        self.blocks = []

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while not all(h.ready for h in self.handles):
            if time.monotonic() > deadline:
                late = [h.name for h in self.handles if not h.ready]
                raise RuntimeError(f"workers {late} did not start within {self.config.startup_timeout_s:g} s")
            for h in self._events(0.5):
                if not h.alive:
                    raise RuntimeError(f"worker {h.name} on {h.device} failed to start: {_first_line(h.error, h)}")

    def _events(self, timeout: float) -> list[WorkerHandle]:
        """Wait up to ``timeout`` for messages or exits; handle them; return the workers concerned."""
        live = [h for h in self.handles if h.alive]
        by_conn = {id(h.conn): h for h in live}
        by_sentinel = {h.sentinel: h for h in live}
        touched = []
        for obj in wait([h.conn for h in live] + list(by_sentinel), timeout):
            h = by_sentinel.get(obj) if isinstance(obj, int) else by_conn.get(id(obj))
            if h is None or not h.alive:
                continue
            touched.append(h)
            if isinstance(obj, int):
                self._died(h)
                continue
            try:
                msg = h.conn.recv()
            except (EOFError, OSError):
                self._died(h)
                continue
            h.last_heard = time.monotonic()
            self._dispatch(h, msg)
        return touched

    def _dispatch(self, h: WorkerHandle, msg: Any) -> None:
        if isinstance(msg, Hello):
            h.ready = True
            if self._running and self.holder is not None:
                self.holder.add(h)  # a worker joining mid-run
        elif isinstance(msg, Failed):
            h.error = msg.error
        elif h.ready and self.holder is not None:
            self.holder.on_message(h, msg)

    def _died(self, h: WorkerHandle) -> None:
        try:
            while h.conn.poll():
                msg = h.conn.recv()
                if isinstance(msg, Failed):
                    h.error = msg.error
        except (EOFError, OSError):
            pass
        h.alive = False
        h.exit_noticed_at = time.monotonic()
        h.process.join(1.0)
        code = h.process.exitcode
        record = {
            "name": h.name,
            "device": h.device,
            "exitcode": code,
            "error": _first_line(h.error, h),
            "after_samples": self.processed,
            "noticed_at": h.exit_noticed_at,
        }
        self.deaths.append(record)
        if self.holder is not None and h.name in self.holder.workers:
            self.holder.remove(h)
            left = len(self.holder.workers)
            tqdm.write(f"worker {h.name} ({h.device}) is gone ({record['error']}); {left} worker(s) continue")

    def _loop(self) -> None:
        holder = self.holder
        assert holder is not None
        cfg = self.config
        bar = tqdm(
            total=holder.stream.total,
            unit="sample",
            unit_scale=True,
            desc=f"{cfg.algorithm} on {len(cfg.workers)} workers",
            disable=not cfg.train.progress,
            dynamic_ncols=True,
            leave=False,
        )
        last_bar = 0.0
        try:
            while not holder.done:
                if not any(h.alive for h in self.handles):
                    errors = "; ".join(f"{d['name']}: {d['error']}" for d in self.deaths)
                    raise RuntimeError(f"every worker has exited, the run cannot finish ({errors})")
                now = time.monotonic()
                wake = holder.next_wakeup()
                timeout = POLL_S if wake is None else min(POLL_S, max(0.0, wake - now))
                self._events(timeout)
                now = time.monotonic()
                holder.tick(now)
                self._watchdog(now)
                if now - last_bar > BAR_S:
                    bar.n = holder.arrived
                    bar.set_postfix(holder.metrics.postfix(), refresh=True)
                    last_bar = now
                if self.callback is not None:
                    self.callback(self)
        finally:
            bar.close()

    def _watchdog(self, now: float) -> None:
        """Kill a worker that has had work outstanding, and said nothing, for ``worker_timeout_s``."""
        assert self.holder is not None
        for h in self.handles:
            if not (h.alive and h.ready and self.holder.busy(h.name)):
                self._busy_since.pop(h.name, None)
                continue
            since = max(self._busy_since.setdefault(h.name, now), h.last_heard)
            if now - since > self.config.worker_timeout_s:
                h.error = f"silent for {self.config.worker_timeout_s:g} s with work outstanding"
                h.process.kill()


def _first_line(error: str | None, h: WorkerHandle) -> str:
    if error:
        return error.strip().splitlines()[0]
    code = h.process.exitcode
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def run_local(config: LocalConfig, *, faults: Sequence[Fault] = (), callback: Callback | None = None) -> dict[str, Any]:
    """Train ``config.train`` on ``config.workers`` with ``config.algorithm``; write ``model.safetensors``,
    ``metrics.json`` and ``curves.png`` into ``config.train.out``; return the metrics. Worker processes and shared
    memory are released however it ends."""
    return LocalRunner(config, faults, callback).run()
