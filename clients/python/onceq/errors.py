"""Exceptions raised by the onceq client.

Every error answer of the server has the body
``{"error": "<CODE>", "message": "..."}`` (docs/API.md, "Errors"); the
client raises the class that ``CODE`` maps to, all subclasses of
:class:`OnceqError`. A failure to reach the server at all (refused
connection, reset, timeout) is :class:`TransportError`.
"""

from __future__ import annotations

from typing import Optional


__all__ = [
    "Conflict", "Fenced", "Forbidden", "InternalError", "InvalidArgument", "MethodNotAllowed", "NotFound",
    "OnceqError", "PayloadTooLarge", "ResourceExhausted", "TransportError", "Unauthorized", "Unavailable",
]


class OnceqError(Exception):
    """Base class of every error the client raises.

    Attributes:
        code: the server's stable error code (``"NOT_FOUND"``, ...), or
            ``"TRANSPORT"`` for :class:`TransportError`.
        message: the server's human-readable message.
        status: the HTTP status (0 when no answer was received).
        request_id: the ``X-Request-Id`` of the answer, to quote in reports.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        status: int = 0,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        head = f"{self.code} ({self.status})" if self.status else self.code
        return f"{head}: {self.message}" if head else self.message


class InvalidArgument(OnceqError):
    """400 INVALID_ARGUMENT: a malformed or out-of-range request, or an
    unknown topic on produce/consume. Retrying the same request fails again."""


class Unauthorized(OnceqError):
    """401 UNAUTHENTICATED: no bearer token, or one the server does not know."""


class Forbidden(OnceqError):
    """403 PERMISSION_DENIED: the token lacks the route's scope or the topic."""


class NotFound(OnceqError):
    """404 NOT_FOUND: unknown topic (on a topic URL or on ack), path or key."""


class MethodNotAllowed(OnceqError):
    """405 METHOD_NOT_ALLOWED (a client bug)."""


class Conflict(OnceqError):
    """409: the request conflicts with the broker's state.

    Raised as is for ``ALREADY_EXISTS`` (a topic exists with other
    settings); :class:`Fenced` is the subclass for ``FAILED_PRECONDITION``.
    """


class Fenced(Conflict):
    """409 FAILED_PRECONDITION: you do not hold that delivery any more (the
    lease went to another consumer, the attempt or fencing token is not the
    current one, the key was committed by another delivery). Nothing
    changed on the server: stop the work and do not retry."""


class PayloadTooLarge(OnceqError):
    """413 PAYLOAD_TOO_LARGE: the body is over the server's limit."""


class Unavailable(OnceqError):
    """503 UNAVAILABLE (shutting down, storage not writable); also the base
    class of :class:`ResourceExhausted` (429). Safe to retry after
    ``retry_after`` seconds; the client already did, ``Client(retries=)``
    times, before raising it."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ResourceExhausted(Unavailable):
    """429 RESOURCE_EXHAUSTED: backpressure or a topic limit; retry later."""


class InternalError(OnceqError):
    """500 INTERNAL: a bug in onceq; report it with ``request_id``."""


class TransportError(OnceqError, ConnectionError):
    """The server could not be reached or the connection broke before a
    complete answer (after the client's retries)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="TRANSPORT", status=0)


_BY_CODE: dict[str, type[OnceqError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "UNAUTHENTICATED": Unauthorized,
    "PERMISSION_DENIED": Forbidden,
    "NOT_FOUND": NotFound,
    "METHOD_NOT_ALLOWED": MethodNotAllowed,
    "ALREADY_EXISTS": Conflict,
    "FAILED_PRECONDITION": Fenced,
    "PAYLOAD_TOO_LARGE": PayloadTooLarge,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "INTERNAL": InternalError,
}

_BY_STATUS: dict[int, type[OnceqError]] = {
    400: InvalidArgument,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    429: ResourceExhausted,
    503: Unavailable,
}


def error_class(code: str, status: int) -> type[OnceqError]:
    """The exception class for an error code, falling back on the status."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_STATUS.get(status, InternalError if status >= 500 else OnceqError)
    return cls


def make_error(
    status: int,
    code: str,
    message: str,
    request_id: Optional[str] = None,
    retry_after: Optional[float] = None,
) -> OnceqError:
    cls = error_class(code, status)
    kw = dict(code=code, status=status, request_id=request_id)
    if issubclass(cls, Unavailable):
        return cls(message, retry_after=retry_after if retry_after is not None else 1.0, **kw)
    return cls(message, **kw)
