"""Heterogeneous workers: measured speed -> how much work each gets, and where their time goes.

* :class:`RateMeter` measures one worker's samples/s: its first steps calibrate it (their plain average), then an
  exponential moving average follows changes (a card that throttles, a laptop that starts another job).
* :func:`split_batch` cuts a global batch into shares proportional to speed, so that in ``sync`` every worker
  finishes its share at about the same moment.
* :func:`batch_for_time` sizes a batch (``async``) or a work unit (the coordinator) so that it takes about a
  target wall time on a worker of a given speed.
* :class:`StepTimeModel` and :func:`split_for_time`: the same, with a step's time as a fixed cost plus a cost per
  sample, which matters when shares are small or devices differ (a GPU's step is mostly fixed cost).
* :class:`IdleClock` splits a worker's wall time into busy and idle (waiting for others, for parameters, for the
  network), for the idle fraction in the metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class RateMeter:
    """Samples per second of one worker. The first ``warmup`` observations only stand in until the next one (they
    pay one-time costs: a GPU's first unit compiles its pipelines, seconds for one batch, and averaging it in kept
    that worker's units tiny for several rounds); the next ``calibration`` are averaged (weighted by time);
    afterwards each new one moves the estimate by ``alpha`` (an exponential moving average)."""

    def __init__(self, alpha: float = 0.3, calibration: int = 2, warmup: int = 0) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if calibration < 1 or warmup < 0:
            raise ValueError(f"calibration must be >= 1 and warmup >= 0, got {calibration} and {warmup}")
        self.alpha, self.calibration, self.warmup = alpha, calibration, warmup
        self.observations = 0
        self._samples = 0.0
        self._seconds = 0.0
        self._rate: float | None = None

    def observe(self, samples: int, seconds: float) -> None:
        """Record that ``samples`` took ``seconds`` of compute (not of waiting)."""
        if samples <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return  # nothing to learn from an empty or untimed step
        self.observations += 1
        if self.observations <= self.warmup:
            self._rate = samples / seconds
        elif self.observations <= self.warmup + self.calibration:
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
        return self.observations >= self.warmup + self.calibration

    def state(self) -> dict[str, float]:
        """Everything the meter knows, as plain numbers (the coordinator keeps it in its database, so any of its
        processes can size a worker's next unit)."""
        return {
            "alpha": self.alpha,
            "calibration": self.calibration,
            "warmup": self.warmup,
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
        m = cls(float(state["alpha"]), int(state["calibration"]), int(state.get("warmup", 0)))  # older: none
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


class StepTimeModel:
    """How long one step of ``n`` samples takes a worker: ``fixed + per_sample * n``, fitted by least squares over
    its observations with exponential forgetting (weight ``1 - alpha`` per newer observation), so it follows a
    worker that changes speed.

    Why two terms: a step has a cost that does not shrink with the batch (Python dispatch of every op, moving the
    weights and the gradient, synchronising a device). With time taken as proportional to samples, as
    :class:`RateMeter` and :func:`split_batch` assume, a worker given a smaller share measures fewer samples/s and
    gets an even smaller share, while its fixed cost still sets the step's time. Until two different batch sizes
    have been seen the fit is proportional (``fixed = 0``).

    >>> m = StepTimeModel()
    >>> for n in (32, 64, 128, 64):
    ...     m.observe(n, 0.002 + 0.00005 * n)
    >>> round(m.fixed * 1e3, 3), round(m.per_sample * 1e6, 1)
    (2.0, 50.0)
    """

    def __init__(self, alpha: float = 0.2) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.observations = 0
        self._s = [0.0] * 5  # weighted sums of 1, n, t, n*n, n*t

    def observe(self, samples: int, seconds: float) -> None:
        """Record that a step of ``samples`` took ``seconds`` of compute."""
        if samples <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return
        keep = 1.0 - self.alpha if self.observations else 0.0
        n, t = float(samples), float(seconds)
        self._s = [keep * s + x for s, x in zip(self._s, (1.0, n, t, n * n, n * t), strict=True)]
        self.observations += 1

    def _fit(self) -> tuple[float, float] | None:
        w, sn, st, snn, snt = self._s
        if not self.observations:
            return None
        det = w * snn - sn * sn
        if det > 1e-9 * w * snn:  # different batch sizes seen: both terms
            per_sample = (w * snt - sn * st) / det
            fixed = (st - per_sample * sn) / w
            if per_sample > 0 and fixed >= 0:
                return fixed, per_sample
        return 0.0, st / sn  # one batch size (or a fit that noise made unphysical): proportional

    @property
    def fixed(self) -> float:
        fit = self._fit()
        return fit[0] if fit else 0.0

    @property
    def per_sample(self) -> float:
        fit = self._fit()
        return fit[1] if fit else 0.0

    def predict(self, samples: int) -> float | None:
        """Seconds for a step of ``samples``, or None before the first observation."""
        fit = self._fit()
        return None if fit is None else fit[0] + fit[1] * samples


def split_for_time(total: int, models: Sequence[StepTimeModel], minimum: int = 0) -> list[int]:
    """Shares of ``total`` samples that every worker is predicted to finish at the same time: ``n_i = (T - fixed_i)
    / per_sample_i`` with ``sum n_i = total``. A worker whose fixed cost alone is above that ``T`` gets ``minimum``
    (it would only make the others wait). Even shares while any model has no observation.

    >>> fast, slow, slower = StepTimeModel(), StepTimeModel(), StepTimeModel()
    >>> for n in (50, 100):
    ...     fast.observe(n, 0.001 + 0.00001 * n)  # 1 ms per step + 10 us per sample
    ...     slow.observe(n, 0.002 + 0.00004 * n)
    ...     slower.observe(n, 0.004 + 0.00001 * n)  # its fixed cost exceeds the others' whole step
    >>> split_for_time(200, [fast, slow]), split_for_time(200, [fast, slow, slower])
    ([180, 20], [180, 20, 0])
    """
    k = len(models)
    if k == 0:
        raise ValueError("split_for_time needs at least one worker")
    if total < k * minimum:
        raise ValueError(f"a batch of {total} cannot give {k} workers at least {minimum} sample(s) each")
    fits = [m._fit() for m in models]
    if any(f is None for f in fits):
        return split_batch(total, [1.0] * k, minimum)
    fixed = [f[0] for f in fits if f is not None]
    per = [f[1] for f in fits if f is not None]
    spare = total - k * minimum
    active = list(range(k))
    while True:  # drop the workers that cannot start before the others are done, then solve for T again
        t = (spare + sum(fixed[i] / per[i] for i in active)) / sum(1.0 / per[i] for i in active)
        slow = [i for i in active if fixed[i] >= t]
        if not slow or len(slow) == len(active):
            break
        active = [i for i in active if i not in slow]
    exact = [0.0] * k
    for i in active:
        exact[i] = max(0.0, (t - fixed[i]) / per[i])
    scale = spare / sum(exact) if sum(exact) > 0 else 0.0
    exact = [e * scale for e in exact] if scale else [spare / k] * k
    shares = [minimum + int(e) for e in exact]
    order = sorted(range(k), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares
