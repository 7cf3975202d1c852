"""produce() keeps one dedup id across its retries: a produce retried after
a connection error or a 503 is stored once. A proxy in front of the real
server breaks the connection or answers 503 on cue."""

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import onceq

from .support import ServerTestCase, unique


class FaultyProxy:
    """Forwards to the server; ``plan`` says what to do with each produce:
    ``pass``, ``drop`` (forward, then close without answering),
    ``503-after`` (forward, then answer 503), ``503`` (answer 503 only)."""

    def __init__(self, upstream_port: int, plan: list[str]) -> None:
        self.plan = list(plan)
        self.bodies: list[dict] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self, body: bytes):
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                return resp.status, data

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                action = "pass"
                if self.path == "/v1/produce":
                    proxy.bodies.append(json.loads(body))
                    action = proxy.plan.pop(0) if proxy.plan else "pass"
                if action == "503":
                    return self._answer(503, b'{"error":"UNAVAILABLE","message":"test","retry_after_ms":200}')
                status, data = self._forward(body)
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "503-after":
                    return self._answer(503, b'{"error":"UNAVAILABLE","message":"fsync failed","retry_after_ms":200}')
                self._answer(status, data)

            def _answer(self, status, data):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class ProduceRetryTest(ServerTestCase):
    def setUp(self):
        self.direct = self.client()
        self.topic = unique("retry")
        self.direct.create_topic(self.topic)

    def proxy(self, plan):
        p = FaultyProxy(self.server.port, plan)
        self.addCleanup(p.close)
        return p, onceq.Client(p.url, retries=4)

    def stored(self):
        return [m.value for m in self.direct.consume(self.topic, "check", "c", max_messages=100, wait_ms=200)]

    def test_a_connection_dropped_after_the_store_is_retried_and_stored_once(self):
        p, c = self.proxy(["drop", "drop", "pass"])
        r = c.produce(self.topic, "pay order 1", idempotency_key="charge:1")
        self.assertEqual(len(p.bodies), 3)
        ids = {b["envelope"]["msg_id"] for b in p.bodies}
        self.assertEqual(ids, {r.msg_id})
        self.assertTrue(r.duplicate)  # the first copy was stored; its retry found it
        self.assertEqual(self.stored(), ["pay order 1"])

    def test_a_503_after_the_store_is_retried_after_retry_after_and_stored_once(self):
        p, c = self.proxy(["503-after", "pass"])
        t0 = time.monotonic()
        r = c.produce(self.topic, "x")
        self.assertGreaterEqual(time.monotonic() - t0, 0.18)  # retry_after_ms 200
        self.assertEqual(len({b["envelope"]["msg_id"] for b in p.bodies}), 1)
        self.assertTrue(r.duplicate)
        self.assertEqual(self.stored(), ["x"])

    def test_503s_past_the_retries_raise_unavailable_with_retry_after(self):
        p, c = self.proxy(["503"] * 10)
        c.retries = 2
        with self.assertRaises(onceq.Unavailable) as cm:
            c.produce(self.topic, "x")
        self.assertEqual(cm.exception.status, 503)
        self.assertAlmostEqual(cm.exception.retry_after, 0.2)
        self.assertEqual(len(p.bodies), 3)
        self.assertEqual(self.stored(), [])

    def test_skip_if_committed_survives_a_retry(self):
        self.direct.produce(self.topic, "p", idempotency_key="charge:2")
        d = self.direct.consume(self.topic, "billing", "w", max_messages=1, wait_ms=1000).messages[0]
        self.direct.ack(self.topic, "billing", "w", partition=d.partition, offset=d.offset, result={"ok": 1})
        p, c = self.proxy(["drop", "pass"])
        r = c.produce(self.topic, "p", idempotency_key="charge:2", skip_if_committed=["billing"])
        self.assertTrue(r.already_committed)
        self.assertEqual(r.committed["billing"].result, {"ok": 1})

    def test_without_dedup_a_connection_error_is_not_retried(self):
        p, c = self.proxy(["drop"])
        with self.assertRaises(onceq.TransportError):
            c.produce(self.topic, "x", dedup=False)
        self.assertEqual(len(p.bodies), 1)
        self.assertNotIn("envelope", p.bodies[0])
