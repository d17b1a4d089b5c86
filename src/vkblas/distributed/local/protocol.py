"""The control messages between the runner and a worker: small frozen dataclasses sent over a pipe. Arrays never
travel here; an update's bytes are in the worker's mailbox and its message carries only their layout.

Per algorithm (runner -> worker, worker -> runner):

* every worker: ``Hello`` once it is set up; ``Failed`` with a traceback if it breaks; ``Stop``.
* ``sync``: ``Step`` (apply the previous step, then compute a share of step k's batch) -> ``Ready`` (its gradient
  is in the mailbox): one message each way per step in ``replicated`` mode. In ``sharded`` mode then ``Reduce``
  (the accepted mailboxes and their weights) -> ``Applied`` (its slice of the step is written). ``attempt`` counts
  re-plans of a step after a worker died; older attempts' messages are ignored.
* ``async``: ``Work`` (a batch) -> ``Grad`` (the version it was computed from).
* ``diloco``: ``Round`` (the round's samples) -> ``Pseudo`` (start - end weights, through the codec).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .stream import Segment
from .transport import BlockHandle, FlatLayout, Layout


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process starts from (its only argument)."""

    name: str
    index: int
    device: str
    config: Any  # LocalConfig
    layout: FlatLayout
    board: BlockHandle  # async/diloco: the seqlock board; sync: the parameter and optimizer-state buffers
    mailboxes: tuple[BlockHandle, ...]
    faults: tuple[Any, ...] = ()  # Fault


@dataclass(frozen=True)
class Stats:
    """A worker's own accounting, sent with every result."""

    wall_s: float
    idle_s: float
    bytes_sent: int
    bytes_received: int


@dataclass(frozen=True)
class Hello:
    name: str
    pid: int
    device: str


@dataclass(frozen=True)
class Failed:
    error: str


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Result:
    """What every update message carries besides its algorithm's fields."""

    epoch: int
    samples: int
    steps: int  # the optimizer steps those samples took (diloco's inner steps; else 1)
    loss_sum: float
    correct: float
    compute_s: float
    layout: Layout
    stats: Stats


# ---------------------------------------------------------------------------------------------------- sync
Contributions = tuple[tuple[BlockHandle, float], ...]  # (a gradient's mailbox, its samples)


@dataclass(frozen=True)
class Step:
    """Step ``step`` (attempt ``attempt``) for one worker, done in this order:

    1. ``load``: set the model to the parameters in buffer ``load`` (``replicated``: and the optimizer state, at
       version ``version`` less one if ``apply`` is given, else at ``version``);
    2. ``apply`` (``replicated``): step the optimizer at ``lr`` on the weighted mean of these gradients (of the
       previous step);
    3. ``export`` (``replicated``): write parameters and optimizer state into buffer ``export``;
    4. compute the gradient of ``segment`` at version ``version`` into mailbox ``step % 2``, reply ``Ready``.

    Without a segment the worker replies ``Applied`` when :attr:`answered` (it loaded, applied or exported, or
    the step is a re-plan), else nothing.
    """

    step: int
    attempt: int
    version: int
    segment: Segment | None  # None: no share this step (fewer samples than workers, or too slow to help)
    load: int | None = None
    apply: Contributions = ()
    lr: float = 0.0
    export: int | None = None

    @property
    def answered(self) -> bool:
        """Whether the worker replies (``Ready`` with a segment, else ``Applied``), and so whether the step waits
        for it. A worker that applies the previous step reads the other workers' mailboxes of that step's parity,
        which they write again two steps later: until it has answered, the runner must not plan the next step,
        even when this worker has no share (else a worker slower than the others, on a loaded machine, averages
        gradients of a later step and its copy of the model silently leaves the others'). A re-plan
        (``attempt > 0``) is answered by every worker: the answer says that the earlier attempt, and the apply it
        may have carried, is done."""
        return (
            self.segment is not None
            or self.load is not None
            or self.export is not None
            or bool(self.apply)
            or self.attempt > 0
        )


@dataclass(frozen=True)
class Ready(Result):
    step: int
    attempt: int


@dataclass(frozen=True)
class Reduce:
    """``sharded``: step slice ``shard`` from version ``version`` (buffer ``read``) into buffer ``write``."""

    step: int
    attempt: int
    contributions: Contributions
    version: int
    read: int
    write: int
    lr: float
    shard: tuple[int, int]


@dataclass(frozen=True)
class Applied:
    step: int
    attempt: int
    stats: Stats


# ---------------------------------------------------------------------------------------------------- async
@dataclass(frozen=True)
class Work:
    seq: int
    segment: Segment


@dataclass(frozen=True)
class Grad(Result):
    seq: int
    version: int


# ---------------------------------------------------------------------------------------------------- diloco
@dataclass(frozen=True)
class Round:
    number: int
    segment: Segment  # inner steps of batch_size samples each (the last one may be smaller)
    batch_size: int
    lr: float


@dataclass(frozen=True)
class Pseudo(Result):
    round: int  # the global version the worker started from
    meta: dict[str, str]
