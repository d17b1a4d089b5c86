"""Distributed training on one machine: one worker process per device (``cpu``, ``vulkan:0``, …; a device may
appear more than once), parameters and updates in shared memory, the update rules of :mod:`vkblas.distributed`.

>>> from vkblas.training import TrainConfig
>>> cfg = LocalConfig(TrainConfig(epochs=1, limit=512), workers=("cpu", "cpu"), algorithm="async")
>>> cfg.staleness_bound
4

Run it with :func:`run_local` (or ``vkblas train mnist --workers cpu,cpu --algorithm async``).

Modules: :mod:`.config` (what a run is), :mod:`.runner` (the monitor loop), :mod:`.procs` (worker processes),
:mod:`.worker` and :mod:`.context` (a worker's side), :mod:`.transport` (shared memory), :mod:`.protocol` (control
messages), :mod:`.stream` (which samples go where), :mod:`.holder` and :mod:`.sync` / :mod:`.asynchronous` /
:mod:`.diloco` (the algorithms), :mod:`.sharded` (the sharded sync step), :mod:`.faults` (fault injection for
tests), :mod:`.outputs` (evaluation and files).
"""

from .config import LocalConfig, default_threads, parse_workers
from .faults import Fault
from .runner import LocalRunner, run_local

__all__ = ["Fault", "LocalConfig", "LocalRunner", "default_threads", "parse_workers", "run_local"]
