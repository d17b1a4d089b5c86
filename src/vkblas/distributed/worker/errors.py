"""The worker's exceptions, the whole tree here (httpx's own errors never leak out of the client)::

WorkerError
├── ServerError        the coordinator answered with an error (``code``, ``status``, ``message``)
├── UnreachableError   no answer within the retry budget (network down, coordinator down)
├── IntegrityError     downloaded bytes do not hash to their name
└── DoesNotFitError    this device cannot hold the run's model (raised before any unit is leased)
"""

from __future__ import annotations


class WorkerError(RuntimeError):
    pass


class ServerError(WorkerError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"coordinator answered {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class UnreachableError(WorkerError):
    pass


class IntegrityError(WorkerError):
    pass


class DoesNotFitError(WorkerError):
    pass
