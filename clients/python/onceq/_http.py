"""The HTTP/1.1 transport: a small keep-alive connection pool over
``http.client`` (thread-safe; one request per connection at a time)."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from .errors import TransportError

# Errors that mean "the connection is dead", as opposed to an answer.
_CONN_ERRORS = (OSError, http.client.HTTPException)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class Transport:
    """Keeps up to ``pool_size`` idle connections to one server.

    Thread safety: ``request`` may be called from any number of threads;
    each call checks a connection out of the pool for its duration.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"onceq: expected an http:// or https:// URL, got {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl_context = ssl_context
        if self.https and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self._pool_size = pool_size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- connections -------------------------------------------------------

    def _new_conn(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _checkout(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._new_conn(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    # -- requests ----------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes],
        headers: dict[str, str],
        timeout: float,
        retry_stale: bool = True,
    ) -> Response:
        """One request; raises TransportError if no complete answer came.

        A kept-alive connection that the server closed while idle fails on
        first use; with ``retry_stale`` that case is retried at once on a
        fresh connection (the server most likely never read the request;
        callers whose request must not run twice pass False).
        """
        conn, reused = self._checkout(timeout)
        try:
            return self._once(conn, method, path, body, headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
            conn.close()
            if not (reused and retry_stale):
                raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        except _CONN_ERRORS as e:
            conn.close()
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        conn = self._new_conn(timeout)
        try:
            return self._once(conn, method, path, body, headers)
        except _CONN_ERRORS as e:
            conn.close()
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e

    def _once(self, conn, method, path, body, headers) -> Response:
        conn.request(method, self.prefix + path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.will_close:
            conn.close()
        else:
            self._checkin(conn)
        return Response(resp.status, resp.headers, data)

    def open_stream(
        self, method: str, path: str, *, headers: dict[str, str], timeout: Optional[float]
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A dedicated connection for a streamed answer; the caller closes it."""
        conn = self._new_conn(timeout if timeout is not None else socket.getdefaulttimeout())
        try:
            conn.request(method, self.prefix + path, headers=headers)
            return conn, conn.getresponse()
        except _CONN_ERRORS as e:
            conn.close()
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
