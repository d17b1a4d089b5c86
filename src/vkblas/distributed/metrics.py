"""Counters of a distributed run, per worker and in total, for ``metrics.json``, progress bars and ``status``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("accepted", "stale", "rejected")


@dataclass
class WorkerMetrics:
    """One worker: what it did and where its time went. ``idle_s`` is time spent waiting (for the others, for
    parameters, for the network) within ``wall_s``. ``bytes_sent`` / ``bytes_received``: the update and weight
    bytes it sent and received (tensor data; headers not counted)."""

    name: str
    device: str = ""
    samples: int = 0
    batch_size: int = 0
    samples_per_s: float = 0.0
    wall_s: float = 0.0
    idle_s: float = 0.0
    accepted: int = 0
    stale: int = 0
    rejected: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    alive: bool = True
    bytes_sent: int = 0
    bytes_received: int = 0

    @property
    def idle_fraction(self) -> float:
        return self.idle_s / self.wall_s if self.wall_s > 0 else 0.0

    def count(self, outcome: str, staleness: int | None = None) -> None:
        """Count one update as ``accepted``, ``stale`` (dropped by the staleness bound) or ``rejected``
        (failed validation); ``staleness`` goes into the histogram for accepted and stale ones."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}: expected one of {OUTCOMES}")
        setattr(self, outcome, getattr(self, outcome) + 1)
        if staleness is not None and outcome != "rejected":
            self.staleness[int(staleness)] += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": self.device,
            "samples": self.samples,
            "batch_size": self.batch_size,
            "samples_per_s": round(self.samples_per_s, 2),
            "wall_s": round(self.wall_s, 3),
            "idle_s": round(self.idle_s, 3),
            "idle_fraction": round(self.idle_fraction, 4),
            "accepted": self.accepted,
            "stale": self.stale,
            "rejected": self.rejected,
            "staleness_histogram": {str(k): v for k, v in sorted(self.staleness.items())},
            "alive": self.alive,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }


@dataclass
class RunMetrics:
    """All workers of a run, keyed by name (a replacement worker gets a new name)."""

    workers: dict[str, WorkerMetrics] = field(default_factory=dict)

    def worker(self, name: str, device: str = "") -> WorkerMetrics:
        w = self.workers.get(name)
        if w is None:
            w = self.workers[name] = WorkerMetrics(name, device)
        elif device:
            w.device = device
        return w

    def totals(self) -> dict[str, Any]:
        hist: Counter[int] = Counter()
        for w in self.workers.values():
            hist.update(w.staleness)
        return {
            "samples": sum(w.samples for w in self.workers.values()),
            "samples_per_s": round(sum(w.samples_per_s for w in self.workers.values() if w.alive), 2),
            "accepted": sum(w.accepted for w in self.workers.values()),
            "stale": sum(w.stale for w in self.workers.values()),
            "rejected": sum(w.rejected for w in self.workers.values()),
            "staleness_histogram": {str(k): v for k, v in sorted(hist.items())},
            "workers_alive": sum(w.alive for w in self.workers.values()),
            "bytes_sent": sum(w.bytes_sent for w in self.workers.values()),
            "bytes_received": sum(w.bytes_received for w in self.workers.values()),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals(), "workers": [w.to_dict() for w in self.workers.values()]}

    def postfix(self) -> dict[str, str]:
        """A short summary for a tqdm bar: total samples/s, accepted/stale/rejected, and each worker's
        samples/s, last batch size and idle %."""
        t = self.totals()
        out = {"samples_s": f"{t['samples_per_s']:,.0f}", "upd": f"{t['accepted']}/{t['stale']}/{t['rejected']}"}
        for w in self.workers.values():
            if w.alive:
                out[w.name] = f"{w.samples_per_s:,.0f}/s b{w.batch_size} idle {100 * w.idle_fraction:.0f}%"
        return out
