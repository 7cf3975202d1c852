"""Every Client method against a real onceqd."""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import onceq
from onceq import AckItem, Message

from .support import Server, ServerTestCase, unique, wait_until


class ClientTest(ServerTestCase):
    def setUp(self) -> None:
        self.c = self.client()
        self.topic = unique("orders")
        self.c.create_topic(self.topic, partitions=1)

    def consume_one(self, group="g", owner="w1", **kw):
        batch = self.c.consume(self.topic, group, owner, max_messages=1, wait_ms=2000, **kw)
        self.assertEqual(len(batch.messages), 1, batch)
        return batch.messages[0]

    def test_healthz_version_openapi_metrics(self):
        h = self.c.healthz()
        self.assertTrue(h.ok)
        self.assertEqual(h.status, "ok")
        v = self.c.version()
        self.assertTrue(v.version)
        self.assertIsInstance(v.wal_enabled, bool)
        self.assertEqual(self.c.openapi()["info"]["title"], "onceq")
        self.assertIn("onceq_", self.c.metrics())

    def test_topics_create_list_get_delete(self):
        name = unique("topic")
        created = self.c.create_topic(name, partitions=2, lease_ms=1500, max_attempts=3, key_history=True)
        self.assertEqual((created.name, created.partitions, created.status), (name, 2, "created"))
        # Same settings again: accepted (safe at every start-up).
        self.c.create_topic(name, partitions=2, lease_ms=1500, max_attempts=3, key_history=True)
        with self.assertRaises(onceq.Conflict) as cm:
            self.c.create_topic(name, partitions=4)
        self.assertEqual(cm.exception.code, "ALREADY_EXISTS")
        self.assertNotIsInstance(cm.exception, onceq.Fenced)
        self.assertIn(name, self.c.list_topics())
        info = self.c.get_topic(name)
        self.assertEqual(info.partitions, 2)
        self.assertEqual(info.settings["lease_ms"], 1500)
        self.assertEqual(info.settings["max_attempts"], 3)
        self.c.delete_topic(name)
        self.assertNotIn(name, self.c.list_topics())
        with self.assertRaises(onceq.NotFound) as cm:
            self.c.get_topic(name)
        self.assertEqual(cm.exception.status, 404)
        self.assertTrue(cm.exception.request_id)

    def test_produce_consume_ack_commits_the_key_with_the_result(self):
        r = self.c.produce(self.topic, {"order": 7}, key="customer-42", idempotency_key="charge:order-7",
                           tenant_id="acme", headers={"trace-id": "t1"})
        self.assertEqual((r.status, r.partition, r.offset, r.duplicate), ("produced", 0, 0, False))
        self.assertFalse(r.already_committed)
        self.assertTrue(r.msg_id)
        d = self.consume_one(lease_ms=10000)
        self.assertEqual((d.topic, d.partition, d.offset, d.attempts), (self.topic, 0, 0, 1))
        self.assertEqual(d.key, "customer-42")
        self.assertEqual(d.json(), {"order": 7})
        self.assertEqual(d.last_error, "")
        self.assertEqual(d.idempotency_key, "charge:order-7")
        self.assertEqual(d.envelope["tenant_id"], "acme")
        self.assertEqual(d.envelope["headers"], {"trace-id": "t1"})
        self.assertEqual(d.envelope["msg_id"], r.msg_id)
        self.assertGreater(d.fencing_token, 0)
        self.assertGreater(d.lease_expires_at_ms, time.time() * 1000 + 5000)
        leased = self.c.get_key(self.topic, "g", "charge:order-7", tenant_id="acme")
        self.assertEqual((leased.state, leased.owner, leased.fencing_token), ("leased", "w1", d.fencing_token))
        self.c.ack(self.topic, "g", "w1", partition=0, offset=0, fencing_token=d.fencing_token,
                   result={"charge_id": "ch_1"})
        # Repeated by its owner: accepted again.
        self.c.ack(self.topic, "g", "w1", partition=0, offset=0)
        k = self.c.get_key(self.topic, "g", "charge:order-7", tenant_id="acme")
        self.assertTrue(k.committed)
        self.assertEqual(k.result, {"charge_id": "ch_1"})
        self.assertEqual((k.owner, k.attempts, k.offset), ("w1", 1, 0))
        self.assertGreater(k.expires_at_ms, k.committed_at_ms)
        self.assertEqual(self.c.get_key(self.topic, "g", "nope").state, "none")
        g = self.c.get_topic(self.topic).groups["g"]
        self.assertEqual((g.acked, g.backlog, g.inflight), (1, 0, 0))

    def test_a_second_message_with_a_committed_key_is_auto_acked(self):
        self.c.produce(self.topic, "a", idempotency_key="k1")
        d = self.consume_one()
        self.c.ack(self.topic, "g", "w1", partition=d.partition, offset=d.offset)
        self.c.produce(self.topic, "a again", idempotency_key="k1")
        self.assertEqual(len(self.c.consume(self.topic, "g", "w1", max_messages=5, wait_ms=300)), 0)
        self.assertEqual(self.c.get_topic(self.topic).groups["g"].auto_acked, 1)

    def test_produce_with_the_same_msg_id_is_stored_once(self):
        a = self.c.produce(self.topic, "x", msg_id="req-1")
        b = self.c.produce(self.topic, "x", msg_id="req-1")
        self.assertEqual((a.msg_id, a.duplicate, b.duplicate), ("req-1", False, True))
        self.assertEqual((a.partition, a.offset), (b.partition, b.offset))
        # Every call gets a fresh dedup id of its own.
        c1 = self.c.produce(self.topic, "x")
        c2 = self.c.produce(self.topic, "x")
        self.assertNotEqual(c1.msg_id, c2.msg_id)
        self.assertFalse(c2.duplicate)
        plain = self.c.produce(self.topic, "y", dedup=False)
        self.assertIsNone(plain.msg_id)

    def test_skip_if_committed_answers_already_committed_with_the_result(self):
        self.c.produce(self.topic, "pay", idempotency_key="charge:9")
        d = self.consume_one(group="billing")
        self.c.ack(self.topic, "billing", "w1", partition=d.partition, offset=d.offset, result={"charge_id": "ch_9"})
        r = self.c.produce(self.topic, "pay", idempotency_key="charge:9", skip_if_committed=["billing"])
        self.assertTrue(r.already_committed)
        self.assertIsNone(r.offset)
        self.assertEqual(r.committed["billing"].result, {"charge_id": "ch_9"})
        self.assertEqual(r.committed["billing"].owner, "w1")
        # Not committed in every listed group: stored.
        r2 = self.c.produce(self.topic, "pay", idempotency_key="charge:9", skip_if_committed=["billing", "audit"])
        self.assertEqual(r2.status, "produced")

    def test_produce_batch(self):
        rs = self.c.produce_batch(self.topic, ["a", Message({"n": 2}, key="k", idempotency_key="b2"),
                                               {"value": "c", "envelope": {"tenant_id": "t"}}])
        self.assertEqual([r.offset for r in rs], [0, 1, 2])
        self.assertTrue(all(r.msg_id for r in rs))
        batch = self.c.consume(self.topic, "g", "w1", max_messages=10, wait_ms=1000)
        self.assertEqual([m.value for m in batch], ["a", '{"n":2}', "c"])
        self.assertEqual(batch.messages[2].envelope["tenant_id"], "t")
        results = self.c.ack_batch(self.topic, "g", "w1", [AckItem.of(m, result={"i": i}) for i, m in enumerate(batch)])
        self.assertTrue(all(r.ok for r in results))
        rs2 = self.c.produce_batch(self.topic, [Message("b", idempotency_key="b2"), Message("d", idempotency_key="d4")],
                                   skip_if_committed=["g"])
        self.assertTrue(rs2[0].already_committed)
        self.assertEqual(rs2[0].committed["g"].result, {"i": 1})
        self.assertEqual(rs2[1].offset, 3)

    def test_long_poll_waits_then_returns_empty(self):
        t0 = time.monotonic()
        batch = self.c.consume(self.topic, "g", "w1", max_messages=5, wait_ms=400)
        self.assertEqual((batch.messages, batch.acks), ([], []))
        self.assertGreaterEqual(time.monotonic() - t0, 0.35)

    def test_long_poll_wakes_on_produce(self):
        threading.Timer(0.3, lambda: self.c.produce(self.topic, "late")).start()
        t0 = time.monotonic()
        batch = self.c.consume(self.topic, "g", "w1", max_messages=5, wait_ms=10000)
        self.assertEqual([m.value for m in batch], ["late"])
        self.assertLess(time.monotonic() - t0, 5)

    def test_consume_carries_the_previous_batchs_acks(self):
        self.c.produce_batch(self.topic, [Message("a", idempotency_key="ka"), Message("b", idempotency_key="kb")])
        first = self.c.consume(self.topic, "g", "w1", max_messages=1, wait_ms=1000)
        acks = [AckItem.of(first.messages[0], result="done-a"), AckItem(0, 99)]
        second = self.c.consume(self.topic, "g", "w1", max_messages=1, wait_ms=1000, acks=acks)
        self.assertEqual([(a.offset, a.status) for a in second.acks], [(0, "acked"), (99, "error")])
        self.assertEqual(second.acks[1].error, "FAILED_PRECONDITION")
        self.assertEqual([m.value for m in second], ["b"])
        self.assertEqual(self.c.get_key(self.topic, "g", "ka").result, "done-a")
        # Acks only, nothing left to consume: the acks line is the whole answer.
        third = self.c.consume(self.topic, "g", "w1", max_messages=1, wait_ms=100, acks=[AckItem.of(second.messages[0])])
        self.assertEqual(([a.status for a in third.acks], third.messages), (["acked"], []))

    def test_ack_by_another_owner_or_token_is_fenced(self):
        self.c.produce(self.topic, "x")
        d = self.consume_one()
        with self.assertRaises(onceq.Fenced) as cm:
            self.c.ack(self.topic, "g", "w2", partition=0, offset=0)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "FAILED_PRECONDITION"))
        self.assertIsInstance(cm.exception, onceq.Conflict)
        with self.assertRaises(onceq.Fenced):
            self.c.ack(self.topic, "g", "w1", partition=0, offset=0, fencing_token=d.fencing_token + 1000)
        with self.assertRaises(onceq.Fenced):
            self.c.extend(self.topic, "g", "w2", partition=0, offset=0, lease_ms=1000)
        with self.assertRaises(onceq.Fenced):
            self.c.nack(self.topic, "g", "w1", partition=0, offset=0, attempts=7)
        self.c.ack(self.topic, "g", "w1", partition=0, offset=0, attempts=1, fencing_token=d.fencing_token)

    def test_nack_redelivers_with_reason_after_delay(self):
        self.c.produce(self.topic, "x")
        d = self.consume_one()
        self.c.nack(self.topic, "g", "w1", partition=0, offset=0, fencing_token=d.fencing_token,
                    reason="gateway timeout", delay_ms=500)
        t0 = time.monotonic()
        self.assertEqual(len(self.c.consume(self.topic, "g", "w1", max_messages=1, wait_ms=200)), 0)
        d2 = self.consume_one()
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        self.assertEqual((d2.attempts, d2.last_error), (2, "gateway timeout"))
        self.assertGreater(d2.fencing_token, d.fencing_token)

    def test_extend_moves_the_lease(self):
        self.c.produce(self.topic, "x")
        d = self.consume_one(lease_ms=500)
        until = self.c.extend(self.topic, "g", "w1", partition=0, offset=0, lease_ms=5000, fencing_token=d.fencing_token)
        self.assertGreater(until, d.lease_expires_at_ms + 3000)
        time.sleep(0.7)  # past the first lease: not redelivered
        self.assertEqual(len(self.c.consume(self.topic, "g", "w2", max_messages=1, wait_ms=0)), 0)

    def test_get_key_waits_for_the_commit_and_history(self):
        topic = unique("hist")
        self.c.create_topic(topic, key_history=True)
        self.c.produce(topic, "x", idempotency_key="k")
        d = self.c.consume(topic, "g", "w1", max_messages=1, wait_ms=1000).messages[0]
        threading.Timer(0.3, lambda: self.c.ack(topic, "g", "w1", partition=0, offset=0, result=42)).start()
        k = self.c.get_key(topic, "g", "k", wait_ms=5000)
        self.assertEqual((k.state, k.result), ("committed", 42))
        events = self.c.key_history(topic, "g", "k")
        self.assertEqual([e.event for e in events], ["leased", "committed"])
        self.assertEqual(events[0].fencing_token, d.fencing_token)
        with self.assertRaises(onceq.Fenced):  # FAILED_PRECONDITION: no key_history on that topic
            self.c.key_history(self.topic, "g", "k")

    def test_dead_letter_and_redrive(self):
        topic = unique("dlq")
        self.c.create_topic(topic, max_attempts=1)
        self.c.produce(topic, "poison", idempotency_key="p")
        d = self.c.consume(topic, "g", "w1", max_messages=1, wait_ms=1000).messages[0]
        self.c.nack(topic, "g", "w1", partition=d.partition, offset=d.offset, reason="bad input")
        dead = self.c.consume("dlq." + topic, "ops", "me", max_messages=1, wait_ms=2000).messages[0]
        self.assertEqual(dead.envelope["dlq"]["original_topic"], topic)
        self.assertEqual(dead.envelope["dlq"]["last_error"], "bad input")
        self.assertEqual(self.c.get_key(topic, "g", "p").state, "failed")
        self.assertEqual(self.c.redrive(topic, max_messages=10), 1)
        again = self.c.consume(topic, "g", "w1", max_messages=1, wait_ms=2000).messages
        self.assertEqual([m.value for m in again], ["poison"])

    def test_stream_yields_deliveries(self):
        self.c.produce_batch(self.topic, ["s1", "s2"])
        got = []
        stream = self.c.stream(self.topic, "g", "w1")
        for d in stream:
            got.append(d)
            self.c.ack(self.topic, "g", "w1", partition=d.partition, offset=d.offset)
            if len(got) == 2:
                break
        stream.close()
        self.assertEqual([d.value for d in got], ["s1", "s2"])

    def test_errors_by_class(self):
        with self.assertRaises(onceq.InvalidArgument) as cm:
            self.c.produce(unique("missing"), "x")
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "INVALID_ARGUMENT"))
        self.assertTrue(cm.exception.message)
        with self.assertRaises(onceq.InvalidArgument):
            self.c.create_topic("bad name!")
        with self.assertRaises(onceq.NotFound):
            self.c.ack(unique("missing"), "g", "w", partition=0, offset=0)
        with self.assertRaises(onceq.NotFound):
            self.c.delete_topic(unique("missing"))
        with self.assertRaises(onceq.Fenced):  # never delivered to this group
            self.c.ack(self.topic, "g", "w", partition=0, offset=5)

    def test_connections_are_kept_alive_and_pooled(self):
        c = self.client()
        c.list_topics()
        sock = c._transport._idle[0].sock.getsockname()
        for _ in range(20):
            c.produce(self.topic, "x")
        self.assertEqual(len(c._transport._idle), 1)
        self.assertEqual(c._transport._idle[0].sock.getsockname(), sock)  # the same TCP connection
        # Shared by threads: each checks a connection out of the pool.
        threads = [threading.Thread(target=lambda: [c.produce(self.topic, "y") for _ in range(10)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertLessEqual(len(c._transport._idle), 4)
        self.assertEqual(len(self.c.consume(self.topic, "g", "w", max_messages=100, wait_ms=100)), 60)

    def test_a_full_topic_raises_resource_exhausted_with_retry_after(self):
        topic = unique("full")
        self.c.create_topic(topic, max_backlog_messages=1)
        self.c.produce(topic, "a")
        c = self.client(retries=0)
        with self.assertRaises(onceq.ResourceExhausted) as cm:
            c.produce(topic, "b")
        self.assertIsInstance(cm.exception, onceq.Unavailable)  # retryable, like a 503
        self.assertEqual((cm.exception.status, cm.exception.code), (429, "RESOURCE_EXHAUSTED"))
        self.assertGreater(cm.exception.retry_after, 0)

    def test_transport_error_when_nothing_listens(self):
        c = onceq.Client("http://127.0.0.1:9", retries=1, timeout=2)
        with self.assertRaises(onceq.TransportError):
            c.list_topics()
        self.assertFalse(issubclass(onceq.TransportError, onceq.Unavailable))


def _write_auth_file(path: str) -> None:
    with open(path, "w") as f:
        json.dump({"tokens": [
            {"name": "ops", "token": "ops-secret", "scopes": ["admin", "produce", "consume", "metrics"], "topics": ["*"]},
            {"name": "reader", "token": "reader-secret", "scopes": ["consume"], "topics": ["orders"]},
        ]}, f)


class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="onceq-py-auth-")
        auth = os.path.join(cls.dir, "auth.json")
        _write_auth_file(auth)
        cls.server = Server("--auth-file", auth)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_token_scopes(self):
        ops = onceq.Client(self.server.url, token="ops-secret")
        ops.create_topic("orders")
        self.assertEqual(ops.produce("orders", "x").offset, 0)
        self.assertTrue(onceq.Client(self.server.url).healthz().ok)  # open route
        with self.assertRaises(onceq.Unauthorized) as cm:
            onceq.Client(self.server.url).list_topics()
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(onceq.Unauthorized):
            onceq.Client(self.server.url, token="wrong").list_topics()
        reader = onceq.Client(self.server.url, token="reader-secret")
        with self.assertRaises(onceq.Forbidden) as cm:
            reader.produce("orders", "x")
        self.assertEqual(cm.exception.code, "PERMISSION_DENIED")
        self.assertEqual(len(reader.consume("orders", "g", "r", max_messages=1, wait_ms=1000)), 1)


@unittest.skipUnless(shutil.which("openssl"), "needs openssl to make a test certificate")
class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="onceq-py-tls-")
        cls.cert, key = os.path.join(cls.dir, "cert.pem"), os.path.join(cls.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cls.cert], check=True, capture_output=True)
        cls.server = Server(tls=(cls.cert, key))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_https_with_the_servers_ca(self):
        self.assertTrue(self.server.url.startswith("https://"))
        c = onceq.Client(self.server.url, ca_file=self.cert)
        c.create_topic("tls")
        c.produce("tls", "over tls")
        self.assertEqual([m.value for m in c.consume("tls", "g", "w", max_messages=1, wait_ms=1000)], ["over tls"])
        # Kept alive: a second call reuses the pooled connection.
        self.assertTrue(c.healthz().ok)

    def test_an_unknown_certificate_is_refused(self):
        with self.assertRaises(onceq.TransportError) as cm:
            onceq.Client(self.server.url, retries=0).list_topics()
        self.assertIn("CERTIFICATE", str(cm.exception).upper())


if __name__ == "__main__":
    unittest.main()
