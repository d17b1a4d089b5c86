"""An httpx transport that counts the bytes a worker moves both ways (request and response lines, headers and
bodies) and can hold its uplink to a rate (a token bucket), to measure what a slow home connection costs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx


class TokenBucket:
    """At most ``rate`` bytes/s on average, bursts up to ``burst`` bytes."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate, self.burst = rate, burst if burst is not None else rate / 20
        self.tokens, self.t = self.burst, time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        with self.lock:  # one sender at a time, like one uplink
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
            self.t = now
            self.tokens -= n
            if self.tokens < 0:
                time.sleep(-self.tokens / self.rate)


def _head_bytes(request: httpx.Request) -> int:
    line = len(request.method) + len(request.url.raw_path) + 12
    return line + sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2


class _Counted(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, meter: Metered) -> None:
        self.stream, self.meter = stream, meter

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            self.meter.add(received=len(chunk))
            yield chunk

    def close(self) -> None:
        self.stream.close()


class Metered(httpx.BaseTransport):
    """Wraps ``inner``; ``sent``/``received`` count bytes; ``uplink_bits`` (per second) throttles what is sent."""

    CHUNK = 16 * 1024

    def __init__(self, inner: httpx.BaseTransport, uplink_bits: float | None = None) -> None:
        self.inner = inner
        self.bucket = TokenBucket(uplink_bits / 8) if uplink_bits else None
        self.sent = self.received = 0
        self._lock = threading.Lock()

    def add(self, sent: int = 0, received: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.received += received

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        n = _head_bytes(request) + len(body)
        if self.bucket is not None:
            for start in range(0, n, self.CHUNK):
                self.bucket.take(min(self.CHUNK, n - start))
        self.add(sent=n)
        response = self.inner.handle_request(request)
        head = 17 + sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
        self.add(received=head)
        try:
            body = response.content  # already read: an in-process or mock transport
        except httpx.ResponseNotRead:
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _Counted(response.stream, self)  # counted as the caller reads it
        else:
            self.add(received=len(body))
        return response

    def close(self) -> None:
        self.inner.close()
