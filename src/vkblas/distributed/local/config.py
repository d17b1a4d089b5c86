"""What a local distributed run is: a :class:`~vkblas.training.TrainConfig` (dataset, model, epochs, batch size,
optimizer, seed, output folder, as ``vkblas train`` takes them) plus the workers and the algorithm's settings."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ...backend import parse
from ...training.fit import TrainConfig
from ..algorithms import ALGORITHMS, STALENESS_RULES
from ..codec import CODECS, DEFAULT_BLOCK, MAX_BLOCK

SYNC_APPLY = ("replicated", "sharded", "holder")
GRAPH_QUANTUM = 32  # the share multiple of a worker whose device captures graphs


def parse_workers(text: str, default_device: str | None = None) -> tuple[str, ...]:
    """``"cpu,vulkan:0"`` -> ``("cpu", "vulkan:0")``; ``"3"`` -> three workers on ``default_device`` (vkblas's
    default device when None). Raises ValueError naming the bad entry."""
    text = text.strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise ValueError(f"--workers {text}: expected at least one worker")
        if default_device is None:
            from ...backend import default_device_name

            default_device = default_device_name()[0]
        return (default_device,) * n
    devices = tuple(d.strip() for d in text.split(","))
    for d in devices:
        if not d:
            raise ValueError(f"--workers {text!r}: empty entry (expected devices like cpu,vulkan:0 or a count)")
        try:
            parse(d)
        except ValueError as e:
            raise ValueError(f"--workers {text!r}: {e}") from None
    return devices


def default_threads(workers: tuple[str, ...], cores: int | None = None) -> int:
    """BLAS threads per ``cpu`` worker when none are asked for: the host's cores shared out among the cpu workers
    (at least one each), so that N workers together use what one worker alone would."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    cpu_workers = sum(1 for w in workers if parse(w)[0] == "cpu")
    return max(1, cores // max(1, cpu_workers))


@dataclass
class LocalConfig:
    """A run of ``train`` on ``workers`` (device names, one process each; a device may repeat).

    * ``algorithm``: ``sync`` (data parallel, every step), ``async`` (bounded staleness) or ``diloco``.
    * ``max_staleness``: async: versions; diloco: rounds. None: async ``max(4, 2 * workers)``, diloco 1.
    * ``staleness_rule``: the learning-rate factor of an accepted stale update (see ``StalenessFilter``).
    * ``sync_apply``: who applies a sync step: ``replicated`` (every worker steps its whole copy of the model
      from the same averaged gradient with the same host optimizer, so all hold the same bits: one message each way
      per step), ``sharded`` (every worker steps its slice of the parameters in shared memory, ZeRO-1 style: two
      rounds of messages per step) or ``holder`` (the runner steps the model while the workers wait).
    * diloco: ``inner_steps`` (H), ``outer_lr``, ``outer_momentum``; a round closes when ``round_quorum`` of its
      planned samples have arrived or at ``round_deadline`` times its predicted duration; ``codec``,
      ``codec_block`` and ``error_feedback`` say how pseudo-gradients travel.
    * ``batch_per_worker`` (``async``, ``diloco``): every worker's batch is ``batch_size`` itself (the global batch
      grows with the workers, as DiLoCo's workers each train on a batch of their own: the per-step cost of a
      worker stays what it is alone, so N workers can take N times the samples per second) instead of its share
      of ``batch_size`` (the default, which keeps the global batch, and so the training, of one worker). Workers of
      different speeds share ``N x batch_size`` by speed.
    * ``threads_per_worker``: BLAS threads of each ``cpu`` worker (None: :func:`default_threads`).
    * ``share_quantum``: every worker's share of a batch is a multiple of this (the remainder goes to one worker);
      None: :data:`GRAPH_QUANTUM` for Vulkan workers (so that a few captured step sizes serve the whole run), 1
      for ``cpu`` ones.
    * ``model_options``: keyword arguments of the model builder (``{"dropout": 0.0}`` in tests).
    * ``eval_device``: where the runner evaluates each epoch's weights.
    * ``worker_timeout_s``: a worker with work outstanding that says nothing for this long is killed and
      counted as dead; ``startup_timeout_s``: how long workers may take to start.
    """

    train: TrainConfig
    workers: tuple[str, ...]
    algorithm: str = "sync"
    max_staleness: int | None = None
    staleness_rule: str = "inverse"
    sync_apply: str = "replicated"
    inner_steps: int = 20
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    round_quorum: float = 1.0
    round_deadline: float = 1.5
    codec: str = "fp32"
    codec_block: int = DEFAULT_BLOCK
    error_feedback: bool = False
    batch_per_worker: bool = False
    threads_per_worker: int | None = None
    share_quantum: int | None = None
    model_options: dict[str, Any] = field(default_factory=dict)
    eval_device: str = "cpu"
    worker_timeout_s: float = 120.0
    startup_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        self.workers = tuple(self.workers)
        if not self.workers:
            raise ValueError("a distributed run needs at least one worker")
        for w in self.workers:
            parse(w)
        parse(self.eval_device)
        _choice("algorithm", self.algorithm, ALGORITHMS)
        _choice("staleness_rule", self.staleness_rule, STALENESS_RULES)
        _choice("sync_apply", self.sync_apply, SYNC_APPLY)
        _choice("codec", self.codec, CODECS)
        if self.batch_per_worker and self.algorithm == "sync":
            raise ValueError(
                "batch_per_worker is for async and diloco; a sync step's batch is batch_size (give a larger one)"
            )
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        for name in ("inner_steps", "threads_per_worker", "share_quantum"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if not 1 <= self.codec_block <= MAX_BLOCK:
            raise ValueError(f"codec_block must be in [1, {MAX_BLOCK}], got {self.codec_block}")
        if not self.outer_lr > 0:
            raise ValueError(f"outer_lr must be positive, got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:  # 0: no momentum (and no Nesterov)
            raise ValueError(f"outer_momentum must be in [0, 1), got {self.outer_momentum}")
        if not 0 < self.round_quorum <= 1:
            raise ValueError(f"round_quorum must be in (0, 1], got {self.round_quorum}")
        if not self.round_deadline >= 1:
            raise ValueError(
                f"round_deadline must be >= 1 (a multiple of the predicted round time), got {self.round_deadline}"
            )
        for name in ("worker_timeout_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def staleness_bound(self) -> int:
        if self.max_staleness is not None:
            return self.max_staleness
        return 1 if self.algorithm == "diloco" else max(4, 2 * len(self.workers))

    def quantum(self, device: str) -> int:
        """The multiple ``device``'s worker's shares are rounded to (decided from the name: the runner never opens
        a device)."""
        if self.share_quantum is not None:
            return self.share_quantum
        return GRAPH_QUANTUM if self.train.graph and parse(device)[0] != "cpu" else 1

    @property
    def threads(self) -> int:
        return self.threads_per_worker or default_threads(self.workers)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["workers"] = list(self.workers)
        out["max_staleness"] = self.staleness_bound
        out["threads_per_worker"] = self.threads
        return out


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}: choose from {', '.join(choices)}")
