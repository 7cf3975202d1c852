"""A tiny in-process fake of onceqd's HTTP API, for unit tests of request
encoding, answer decoding and the worker's routing: it records every
request and answers from a script. It knows nothing of leases or keys."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional


class FakeBroker:
    """``deliveries``: what the next consumes hand out, in order (dicts as
    the consume answer has them; see :meth:`delivery`). ``on_ack(body)``:
    the answer to a ``POST /v1/ack`` as ``(status, doc)``; by default 204
    for a single ack without produce, 200 ``{"status": "acked",
    "produced": [...]}`` with one, and ``{"results": [...]}`` for a batch.
    ``requests``: ``(method, path, body)`` of every request, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.deliveries: list[dict] = []
        self.on_ack: Optional[Callable[[dict], tuple[int, Any]]] = None
        self._lock = threading.Lock()
        self._offset = 100
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _body(self) -> Any:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                return json.loads(raw) if raw else None

            def do_GET(self) -> None:
                fake._record("GET", self.path, None)
                if self.path.startswith("/v1/topics/"):
                    name = self.path.rsplit("/", 1)[1]
                    return self._answer(200, {"name": name, "partitions": 1, "settings": {"lease_ms": 30000},
                                              "groups": {}})
                self._answer(404, {"error": "NOT_FOUND", "message": "fake: no such path"})

            def do_POST(self) -> None:
                body = self._body()
                fake._record("POST", self.path, body)
                status, doc = fake._route(self.path, body)
                if isinstance(doc, str):
                    return self._answer(status, doc.encode(), "application/x-ndjson")
                self._answer(status, doc)

            def _answer(self, status: int, doc: Any, ctype: str = "application/json") -> None:
                data = b"" if doc is None else doc if isinstance(doc, bytes) else json.dumps(doc).encode()
                self.send_response(status)
                if status != 204:
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if status != 204:
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- script ----------------------------------------------------------------

    def delivery(self, topic: str, value: str = "v", *, key: str = "", envelope: Optional[dict] = None) -> dict:
        """Queues one delivery for the next consume and returns it."""
        with self._lock:
            self._offset += 1
            d = {"topic": topic, "partition": 0, "offset": self._offset, "attempts": 1, "key": key, "value": value,
                 "last_error": "", "envelope": envelope or {},
                 "lease_expires_at_ms": int(time.time() * 1000) + 30000, "fencing_token": self._offset + 1000}
            self.deliveries.append(d)
        return d

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [b for m, p, b in self.requests if p.split("?")[0] == path]

    # -- answers ---------------------------------------------------------------

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((method, path, body))

    def _route(self, path: str, body: dict) -> tuple[int, Any]:
        if path == "/v1/consume":
            return self._consume(body)
        if path == "/v1/ack":
            if self.on_ack is not None:
                return self.on_ack(body)
            return self.default_ack(body)
        if path == "/v1/nack":
            return 204, None
        if path == "/v1/extend":
            return 200, {"lease_expires_at_ms": int(time.time() * 1000) + 30000}
        return 404, {"error": "NOT_FOUND", "message": "fake: no such path"}

    @staticmethod
    def produced_for(messages: list[dict]) -> list[dict]:
        return [{"topic": m["topic"], "partition": 0, "offset": i, "duplicate": False} for i, m in enumerate(messages)]

    def default_ack(self, body: dict) -> tuple[int, Any]:
        if "acks" in body:
            results = []
            for a in body["acks"]:
                r = {"partition": a["partition"], "offset": a["offset"], "status": "acked"}
                if "produce" in a:
                    r["produced"] = self.produced_for(a["produce"])
                results.append(r)
            return 200, {"results": results}
        if "produce" in body:
            return 200, {"status": "acked", "produced": self.produced_for(body["produce"])}
        return 204, None

    def _consume(self, body: dict) -> tuple[int, Any]:
        lines = []
        if body.get("acks"):
            lines.append({"acks": [{"partition": a["partition"], "offset": a["offset"], "status": "acked"}
                                   for a in body["acks"]]})
        with self._lock:
            n = int(body.get("max_messages", 1))
            got, self.deliveries = self.deliveries[:n], self.deliveries[n:]
        if not got and not lines:
            time.sleep(min(int(body.get("wait_ms", 0)), 50) / 1000.0)  # a short long poll
        lines += got
        return 200, "".join(json.dumps(x) + "\n" for x in lines)
