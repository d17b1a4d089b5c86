"""The coordinator's one exception: :class:`ApiError` carries an error code of ``protocol.ERROR_CODES`` (which fixes
the HTTP status) and a message naming the values involved. Everything a request can get wrong is raised as one, so
a bad request is a 4xx with a message, never a 5xx."""

from __future__ import annotations

from ..protocol import ERROR_CODES


class ApiError(Exception):
    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        return ERROR_CODES[self.code]
