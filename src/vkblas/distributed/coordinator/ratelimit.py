"""Rate limits: a token bucket per key (a client address, a token), kept in this process's memory.

Each key gets ``burst`` requests at once and ``rate`` per second after that; a refused request learns how long to
wait (``Retry-After``). The number of keys is bounded (least recently used ones are forgotten), so a flood of new
addresses or forged tokens cannot grow the table without end. Buckets are per process: several uvicorn processes
each keep their own (a client may then get up to N times the rate; the kernel spreads connections over them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_KEYS = 100_000


class RateLimiter:
    def __init__(self, rate: float, burst: int, max_keys: int = MAX_KEYS) -> None:
        if rate < 0 or burst < 1:
            raise ValueError(f"rate must be >= 0 and burst >= 1, got rate {rate}, burst {burst}")
        self.rate, self.burst, self.max_keys = rate, float(burst), max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, last time)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str, now: float) -> float:
        """Take one request from ``key``'s bucket: 0.0 when allowed, else the seconds until one is."""
        if not self.enabled:
            return 0.0
        with self._lock:
            tokens, last = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate)
            if tokens >= 1.0:
                tokens -= 1.0
                wait = 0.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return wait
