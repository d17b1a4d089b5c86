"""Heterogeneous workers: measured speed -> how much work each gets, and where their time goes.

* :class:`RateMeter` measures one worker's samples/s: its first steps calibrate it (their plain average), then an
  exponential moving average follows changes (a card that throttles, a laptop that starts another job).
* :func:`split_batch` cuts a global batch into shares proportional to speed, so that in ``sync`` every worker
  finishes its share at about the same moment.
* :func:`batch_for_time` sizes a batch (``async``) or a work unit (the coordinator) so that it takes about a
  target wall time on a worker of a given speed.
* :class:`IdleClock` splits a worker's wall time into busy and idle (waiting for others, for parameters, for the
  network), for the idle fraction in the metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class RateMeter:
    """Samples per second of one worker. The first ``calibration`` observations are averaged (weighted by time);
    afterwards each new one moves the estimate by ``alpha`` (an exponential moving average)."""

    def __init__(self, alpha: float = 0.3, calibration: int = 2) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if calibration < 1:
            raise ValueError(f"calibration must be >= 1, got {calibration}")
        self.alpha, self.calibration = alpha, calibration
        self.observations = 0
        self._samples = 0.0
        self._seconds = 0.0
        self._rate: float | None = None

    def observe(self, samples: int, seconds: float) -> None:
        """Record that ``samples`` took ``seconds`` of compute (not of waiting)."""
        if samples <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return  # nothing to learn from an empty or untimed step
        self.observations += 1
        if self.observations <= self.calibration:
            self._samples += samples
            self._seconds += seconds
            self._rate = self._samples / self._seconds
        else:
            assert self._rate is not None
            self._rate += self.alpha * (samples / seconds - self._rate)

    @property
    def rate(self) -> float | None:
        """samples/s, or None before the first observation."""
        return self._rate

    @property
    def calibrated(self) -> bool:
        return self.observations >= self.calibration

    def state(self) -> dict[str, float]:
        """Everything the meter knows, as plain numbers (the coordinator keeps it in its database, so any of its
        processes can size a worker's next unit)."""
        return {
            "alpha": self.alpha,
            "calibration": self.calibration,
            "observations": self.observations,
            "samples": self._samples,
            "seconds": self._seconds,
            "rate": -1.0 if self._rate is None else self._rate,
        }

    @classmethod
    def from_state(cls, state: dict[str, float]) -> RateMeter:
        """The meter :meth:`state` described.

        >>> m = RateMeter(); m.observe(100, 0.5)
        >>> RateMeter.from_state(m.state()).rate
        200.0
        """
        m = cls(float(state["alpha"]), int(state["calibration"]))
        m.observations = int(state["observations"])
        m._samples, m._seconds = float(state["samples"]), float(state["seconds"])
        m._rate = None if state["rate"] < 0 else float(state["rate"])
        return m


def split_batch(total: int, rates: Sequence[float | None], minimum: int = 1) -> list[int]:
    """Shares of ``total`` samples proportional to ``rates`` (largest remainders; every share at least
    ``minimum``; a worker with no measurement yet counts as the mean of the others, or 1 if none is measured).

    >>> split_batch(512, [3000.0, 1000.0])
    [384, 128]
    """
    n = len(rates)
    if n == 0:
        raise ValueError("split_batch needs at least one worker")
    if total < n * minimum:
        raise ValueError(f"a batch of {total} cannot give {n} workers at least {minimum} sample(s) each")
    known = [r for r in rates if r is not None and r > 0 and math.isfinite(r)]
    fill = sum(known) / len(known) if known else 1.0
    weights = [r if r is not None and r > 0 and math.isfinite(r) else fill for r in rates]
    spare = total - n * minimum
    scale = spare / sum(weights)
    exact = [w * scale for w in weights]
    shares = [minimum + int(e) for e in exact]
    order = sorted(range(n), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def batch_for_time(
    rate: float | None, seconds: float, minimum: int = 1, maximum: int | None = None, multiple: int = 1
) -> int:
    """The number of samples a worker of speed ``rate`` (samples/s) processes in about ``seconds``, rounded down to
    a ``multiple`` and clipped to ``[minimum, maximum]``; ``minimum`` while the speed is unknown."""
    if rate is None or not rate > 0 or not math.isfinite(rate):
        return minimum
    n = int(rate * seconds) // multiple * multiple
    n = max(minimum, n)
    return min(n, maximum) if maximum is not None else n


class IdleClock:
    """Wall time since creation, split into busy and idle spans (``with clock.idle(): wait()``)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.idle_s = 0.0

    @contextmanager
    def idle(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.idle_s += time.perf_counter() - t0

    def add_idle(self, seconds: float) -> None:
        self.idle_s += max(0.0, seconds)

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.start

    @property
    def idle_fraction(self) -> float:
        wall = self.wall_s
        return self.idle_s / wall if wall > 0 else 0.0
