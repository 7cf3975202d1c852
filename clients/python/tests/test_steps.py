"""Workflow steps: an ack that produces the next messages in the same atomic
step (``produce`` on POST /v1/ack), the worker's ``Complete`` and
``Job.produce``, and the topic setting ``ordering``.

StepsEncodingTest and StepsWorkerRoutingTest run against tests/fake.py (no
onceqd needed). StepsServerTest runs against a real onceqd and skips, saying
so, when that binary does not have the feature yet."""

import logging
import threading
import time
import unittest

import onceq
from onceq import AckItem, AckResult, Message, Produced
from onceq.types import step_message_json

from .fake import FakeBroker
from .support import ServerTestCase, unique, wait_until


class StepsEncodingTest(unittest.TestCase):
    """Request bodies and answers, against the fake."""

    def setUp(self):
        self.fake = FakeBroker()
        self.addCleanup(self.fake.close)
        self.c = onceq.Client(self.fake.url, retries=0)
        self.addCleanup(self.c.close)

    def test_a_message_is_encoded_as_a_produce_body(self):
        m = Message({"order": 7}, key="customer-1", idempotency_key="charge:7", msg_id="m-1",
                    envelope={"delay_ms": 500, "tenant_id": "acme"}, topic="charges")
        self.assertEqual(step_message_json(m), {
            "topic": "charges", "key": "customer-1", "value": '{"order":7}',
            "envelope": {"delay_ms": 500, "tenant_id": "acme", "idempotency_key": "charge:7", "msg_id": "m-1"},
        })
        # The least: topic and value; no envelope, no generated msg_id (the ack is the step's dedup).
        self.assertEqual(step_message_json(Message("hi", topic="emails")), {"topic": "emails", "value": "hi"})
        # A dict is sent as given, its value made text.
        self.assertEqual(step_message_json({"topic": "t", "value": [1, 2], "envelope": {"delay_ms": 5}}),
                         {"topic": "t", "value": "[1,2]", "envelope": {"delay_ms": 5}})
        with self.assertRaisesRegex(ValueError, "topic"):
            step_message_json(Message("no topic"))
        with self.assertRaisesRegex(ValueError, "topic"):
            step_message_json({"value": "x"})
        with self.assertRaises(TypeError):
            step_message_json("just a string")

    def test_ack_with_produce_sends_the_list_and_returns_where_each_went(self):
        self.fake.on_ack = lambda body: (200, {"status": "acked", "produced": [
            {"topic": "charges", "partition": 1, "offset": 12, "duplicate": False},
            {"topic": "emails", "status": "pending"},
            {"topic": "charges", "partition": 0, "offset": 3, "duplicate": True},
        ]})
        produced = self.c.ack("orders", "billing", "w1", partition=0, offset=4, attempts=1, fencing_token=9,
                              result={"ok": True},
                              produce=[Message("a", topic="charges", idempotency_key="k-a"),
                                       {"topic": "emails", "value": {"to": "x@example.com"}},
                                       Message("c", topic="charges")])
        self.assertEqual(self.fake.bodies("/v1/ack"), [{
            "topic": "orders", "group": "billing", "owner": "w1", "partition": 0, "offset": 4, "attempts": 1,
            "fencing_token": 9, "result": {"ok": True},
            "produce": [{"topic": "charges", "value": "a", "envelope": {"idempotency_key": "k-a"}},
                        {"topic": "emails", "value": '{"to":"x@example.com"}'},
                        {"topic": "charges", "value": "c"}],
        }])
        self.assertEqual(produced, [Produced("charges", "produced", 1, 12, False),
                                    Produced("emails", "pending"),
                                    Produced("charges", "produced", 0, 3, True)])
        self.assertEqual([p.pending for p in produced], [False, True, False])

    def test_an_empty_produce_list_is_sent_and_an_ack_without_one_answers_nothing(self):
        self.assertEqual(self.c.ack("t", "g", "w", partition=0, offset=0, produce=[]), [])
        self.assertEqual(self.c.ack("t", "g", "w", partition=0, offset=1), [])  # 204
        first, second = self.fake.bodies("/v1/ack")
        self.assertEqual(first["produce"], [])
        self.assertNotIn("produce", second)
        # A repeated ack of a message without an idempotency key: 204 even with produce.
        self.fake.on_ack = lambda body: (204, None)
        self.assertEqual(self.c.ack("t", "g", "w", partition=0, offset=0, produce=[Message("x", topic="t2")]), [])

    def test_batch_ack_carries_produce_per_entry_and_decodes_produced(self):
        items = [AckItem(0, 1, 1, 5, {"r": 1}, [Message("x", topic="next")]), AckItem(0, 2)]
        results = self.c.ack_batch("t", "g", "w", items)
        (body,) = self.fake.bodies("/v1/ack")
        self.assertEqual(body["acks"], [
            {"partition": 0, "offset": 1, "attempts": 1, "fencing_token": 5, "result": {"r": 1},
             "produce": [{"topic": "next", "value": "x"}]},
            {"partition": 0, "offset": 2},
        ])
        self.assertEqual(results, [AckResult(0, 1, "acked", "", [Produced("next", "produced", 0, 0, False)]),
                                   AckResult(0, 2, "acked")])
        self.assertEqual(AckResult.from_json({"partition": 0, "offset": 1, "status": "error",
                                              "error": "FAILED_PRECONDITION"}).produced, [])

    def test_refusals_are_raised_by_class(self):
        for status, code, cls in [(409, "FAILED_PRECONDITION", onceq.Fenced), (404, "NOT_FOUND", onceq.NotFound),
                                  (400, "INVALID_ARGUMENT", onceq.InvalidArgument),
                                  (403, "PERMISSION_DENIED", onceq.Forbidden)]:
            self.fake.on_ack = lambda body, s=status, c=code: (s, {"error": c, "message": "refused"})
            with self.assertRaises(cls):
                self.c.ack("t", "g", "w", partition=0, offset=0, produce=[Message("x", topic="t2")])

    def test_acks_carried_on_a_consume_cannot_produce(self):
        with self.assertRaisesRegex(ValueError, "ack_batch"):
            self.c.consume("t", "g", "w", acks=[AckItem(0, 0, produce=[Message("x", topic="t2")])])
        self.assertEqual(self.fake.requests, [])

    def test_create_topic_sends_ordering(self):
        self.fake.requests.clear()
        try:
            self.c.create_topic("t", ordering="key")
        except onceq.OnceqError:
            pass  # the fake has no /v1/topics: only the request matters
        self.assertEqual(self.fake.bodies("/v1/topics"), [{"name": "t", "ordering": "key"}])


class StepsWorkerRoutingTest(unittest.TestCase):
    """What the worker sends, and on which path, against the fake."""

    def setUp(self):
        self.fake = FakeBroker()
        self.addCleanup(self.fake.close)
        self.c = onceq.Client(self.fake.url, retries=0)
        self.addCleanup(self.c.close)

    def run_worker(self, handler, until, **kw):
        w = onceq.Worker(self.c, "orders", "billing", owner="w1", wait_ms=50, handler=handler,
                         handle_signals=False, **kw)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        try:
            self.assertTrue(wait_until(lambda: until(w), 5), (w.stats, self.fake.requests))
        finally:
            w.stop()
            t.join(10)
        self.assertFalse(t.is_alive())
        return w

    def paths(self):
        return [p for m, p, b in self.fake.requests]

    def test_complete_and_staged_messages_go_on_the_jobs_own_ack(self):
        d = self.fake.delivery("orders", '{"order_id": 7}')

        def handle(job):
            job.produce("audit", {"seen": 7})
            job.produce(Message({"n": 1}, topic="emails", key="k", idempotency_key="mail:7"))
            return onceq.Complete({"charge_id": "ch_7"},
                                  produce=[Message({"order_id": 7}, topic="charges", idempotency_key="charge:7")])

        w = self.run_worker(handle, lambda w: w.stats.acked == 1)
        (ack,) = self.fake.bodies("/v1/ack")
        self.assertEqual(ack, {
            "topic": "orders", "group": "billing", "owner": "w1", "partition": 0, "offset": d["offset"],
            "attempts": 1, "fencing_token": d["fencing_token"], "result": {"charge_id": "ch_7"},
            "produce": [
                {"topic": "audit", "value": '{"seen":7}'},
                {"topic": "emails", "key": "k", "value": '{"n":1}', "envelope": {"idempotency_key": "mail:7"}},
                {"topic": "charges", "value": '{"order_id":7}', "envelope": {"idempotency_key": "charge:7"}},
            ],
        })
        self.assertNotIn("/v1/produce", self.paths())
        self.assertFalse(any(b.get("acks") for b in self.fake.bodies("/v1/consume")))
        self.assertEqual((w.stats.acked, w.stats.produced), (1, 3))

    def test_jobs_without_messages_keep_riding_on_the_next_consume(self):
        self.fake.delivery("orders", "a")
        self.fake.delivery("orders", "b")
        done = []

        def handle(job):
            done.append(job.value)
            if job.value == "a":
                return onceq.Complete("ra", produce=[Message("next-a", topic="charges")])
            return onceq.Complete("rb")  # no messages: the ordinary path

        w = self.run_worker(handle, lambda w: w.stats.acked == 2)
        acks = self.fake.bodies("/v1/ack")
        self.assertEqual([a.get("result") for a in acks if "produce" in a], ["ra"])
        carried = [a for b in self.fake.bodies("/v1/consume") for a in b.get("acks", [])]
        flushed = [a for b in acks if "acks" in b for a in b["acks"]]
        self.assertEqual([a["result"] for a in carried + flushed], ["rb"])
        self.assertTrue(all("produce" not in a for a in carried + flushed))
        self.assertEqual(w.stats.produced, 1)

    def test_a_refused_ack_stores_nothing_and_is_never_retried_as_a_produce(self):
        self.fake.delivery("orders")
        self.fake.on_ack = lambda body: (409, {"error": "FAILED_PRECONDITION", "message": "lease lost"})
        stale = []

        def handle(job):
            job.produce("charges", "x")
            return onceq.Complete("r", produce=[Message("y", topic="charges")])

        with self.assertLogs("onceq.worker", logging.WARNING):
            w = self.run_worker(handle, lambda w: w.stats.stale == 1, on_stale=lambda j, e: stale.append(e))
        time.sleep(0.2)  # nothing more comes
        self.assertEqual(len(self.fake.bodies("/v1/ack")), 1)
        self.assertNotIn("/v1/produce", self.paths())
        self.assertNotIn("/v1/nack", self.paths())
        self.assertIsInstance(stale[0], onceq.Fenced)
        self.assertEqual((w.stats.acked, w.stats.produced), (0, 0))

    def test_a_refusal_of_the_messages_nacks_the_job_with_the_reason(self):
        self.fake.delivery("orders")
        self.fake.on_ack = lambda body: (404, {"error": "NOT_FOUND", "message": "unknown topic 'chargez'"})

        with self.assertLogs("onceq.worker", logging.WARNING):
            w = self.run_worker(lambda job: onceq.Complete("r", produce=[Message("y", topic="chargez")]),
                                lambda w: w.stats.nacked == 1)
        (nack,) = self.fake.bodies("/v1/nack")
        self.assertIn("unknown topic 'chargez'", nack["reason"])
        self.assertNotIn("delay_ms", nack)  # the topic's backoff
        self.assertEqual(len(self.fake.bodies("/v1/ack")), 1)
        self.assertNotIn("/v1/produce", self.paths())
        self.assertEqual((w.stats.acked, w.stats.produced), (0, 0))

    def test_a_failed_handler_sends_none_of_its_messages(self):
        self.fake.delivery("orders", "raise")
        self.fake.delivery("orders", "fail")
        self.fake.delivery("orders", "retry")
        self.fake.delivery("orders", "no-topic")

        def handle(job):
            job.produce("charges", "staged")
            if job.value == "raise":
                raise RuntimeError("boom")
            if job.value == "fail":
                raise onceq.Fail("declined")
            if job.value == "retry":
                return onceq.Retry(100)
            return onceq.Complete("r", produce=[Message("m")])  # no topic: nacked

        with self.assertLogs("onceq.worker", logging.WARNING):
            w = self.run_worker(handle, lambda w: w.stats.nacked == 3 and w.stats.acked == 1)
        acks = [a for b in self.fake.bodies("/v1/ack") for a in b.get("acks", [b])]
        acks += [a for b in self.fake.bodies("/v1/consume") for a in b.get("acks", [])]
        self.assertEqual([a["result"] for a in acks], [{"failed": "declined"}])
        self.assertTrue(all("produce" not in a for a in acks))
        reasons = sorted(b["reason"] for b in self.fake.bodies("/v1/nack"))
        self.assertEqual(reasons[0], "boom")
        self.assertIn("topic", reasons[1])
        self.assertNotIn("/v1/produce", self.paths())
        self.assertEqual(w.stats.produced, 0)


class StepsServerTest(ServerTestCase):
    """Against a real onceqd (skipped if it does not have the feature yet)."""

    _has_steps = None
    _has_ordering = None

    def setUp(self):
        self.c = self.client()
        self.src = unique("orders")
        self.dst = unique("charges")

    def require_steps(self):
        cls = type(self)
        if cls._has_steps is None:
            try:
                self.c.ack(unique("probe"), "g", "w", partition=0, offset=0, produce=[])
                cls._has_steps = True
            except onceq.InvalidArgument as e:
                cls._has_steps = "unknown field 'produce'" not in e.message
            except onceq.OnceqError:
                cls._has_steps = True
        if not cls._has_steps:
            self.skipTest("this onceqd has no workflow steps yet (POST /v1/ack: unknown field 'produce')")

    def require_ordering(self):
        cls = type(self)
        if cls._has_ordering is None:
            try:
                self.c.create_topic(unique("probe"), ordering="none")
                cls._has_ordering = True
            except onceq.InvalidArgument as e:
                cls._has_ordering = "unknown field 'ordering'" not in e.message
        if not cls._has_ordering:
            self.skipTest("this onceqd has no topic setting 'ordering' yet")

    def topics(self, *names, **settings):
        for n in names:
            self.c.create_topic(n, partitions=1, **settings)

    def drain(self, topic, group="check", wait_ms=2000):
        """Consumes and acks what is new in ``topic`` for ``group``: waits up
        to ``wait_ms`` for the first (a pending message comes through the
        broker's outbox), then takes what follows at once."""
        out = []
        while True:
            batch = self.c.consume(topic, group, "checker", max_messages=100, wait_ms=wait_ms if not out else 300)
            if not batch.messages:
                return out
            out += batch.messages
            self.c.ack_batch(topic, group, "checker", [AckItem.of(m) for m in batch])

    def assert_produced(self, produced, topics):
        """``produced`` names ``topics`` in order; those stored (not pending:
        a target on another shard may be) are at offsets 0, 1, ... of a
        fresh one-partition topic."""
        self.assertEqual([p.topic for p in produced], topics, produced)
        self.assertTrue(all(p.status in ("produced", "pending") and not p.duplicate for p in produced), produced)
        for i, p in enumerate(produced):
            if not p.pending:
                self.assertEqual((p.partition, p.offset), (0, i), produced)

    def assert_same_list(self, a, b):
        """The same messages; a pending one may have its position by now."""
        self.assertEqual([p.topic for p in a], [p.topic for p in b])
        for x, y in zip(a, b):
            if not x.pending and not y.pending:
                self.assertEqual(x, y)

    def test_an_ack_stores_its_messages_in_the_same_step(self):
        self.require_steps()
        self.topics(self.src, self.dst)
        self.c.produce(self.src, {"order_id": 7}, idempotency_key="order:7")
        d = self.c.consume(self.src, "billing", "w1", max_messages=1, wait_ms=2000).messages[0]
        step = dict(partition=d.partition, offset=d.offset, attempts=d.attempts, fencing_token=d.fencing_token,
                    result={"charge": "ch_7"},
                    produce=[Message({"order_id": 7}, key="customer-1", idempotency_key="charge:7", topic=self.dst),
                             Message("second", topic=self.dst, envelope={"tenant_id": "acme"})])
        produced = self.c.ack(self.src, "billing", "w1", **step)
        self.assert_produced(produced, [self.dst, self.dst])
        # Retried at once by its owner (its answer was lost): the same list, stored once.
        self.assert_same_list(self.c.ack(self.src, "billing", "w1", **step), produced)
        self.assertEqual(self.c.get_key(self.src, "billing", "order:7").result, {"charge": "ch_7"})
        got = self.drain(self.dst)
        self.assertEqual([(m.value, m.key, m.idempotency_key) for m in got],
                         [('{"order_id":7}', "customer-1", "charge:7"), ("second", "", None)])
        self.assertEqual(got[1].envelope["tenant_id"], "acme")

    def test_a_batch_ack_produces_per_entry(self):
        self.require_steps()
        self.topics(self.src, self.dst)
        self.c.produce_batch(self.src, ["a", "b"])
        batch = self.c.consume(self.src, "g", "w1", max_messages=2, wait_ms=2000)
        results = self.c.ack_batch(self.src, "g", "w1", [
            AckItem.of(batch.messages[0], "ra", produce=[Message("from-a", topic=self.dst)]),
            AckItem.of(batch.messages[1], "rb"),
        ])
        self.assertEqual([r.status for r in results], ["acked", "acked"])
        self.assert_produced(results[0].produced, [self.dst])
        self.assertEqual(results[1].produced, [])
        self.assertEqual([m.value for m in self.drain(self.dst)], ["from-a"])

    def test_a_fenced_ack_stores_none_of_its_messages(self):
        self.require_steps()
        self.topics(self.src, self.dst)
        self.c.produce(self.src, "x", idempotency_key="x")
        d1 = self.c.consume(self.src, "g", "slow", max_messages=1, wait_ms=2000, lease_ms=300).messages[0]
        d2 = self.c.consume(self.src, "g", "fast", max_messages=1, wait_ms=3000).messages[0]
        self.assertEqual(d2.attempts, 2)
        with self.assertRaises(onceq.Fenced):
            self.c.ack(self.src, "g", "slow", partition=d1.partition, offset=d1.offset,
                       fencing_token=d1.fencing_token, produce=[Message("stale", topic=self.dst)])
        self.assertEqual(self.drain(self.dst, wait_ms=1000), [])
        self.assertEqual(self.c.get_key(self.src, "g", "x").owner, "fast")

    def test_an_unknown_target_topic_refuses_the_ack(self):
        self.require_steps()
        self.topics(self.src)
        self.c.produce(self.src, "x", idempotency_key="x")
        d = self.c.consume(self.src, "g", "w1", max_messages=1, wait_ms=2000).messages[0]
        with self.assertRaises(onceq.NotFound):
            self.c.ack(self.src, "g", "w1", partition=d.partition, offset=d.offset,
                       produce=[Message("y", topic=unique("missing"))])
        self.assertEqual(self.c.get_key(self.src, "g", "x").state, "leased")  # not acked
        with self.assertRaises(onceq.InvalidArgument):  # over 1000 messages
            self.c.ack(self.src, "g", "w1", partition=d.partition, offset=d.offset,
                       produce=[Message("y", topic=self.src)] * 1001)
        self.assertEqual(self.c.get_key(self.src, "g", "x").state, "leased")

    def test_a_three_step_pipeline_with_workers(self):
        # order -> charge -> receipt, the docs/CLIENTS.md example.
        self.require_steps()
        orders, charges, receipts = unique("orders"), unique("charges"), unique("receipts")
        self.topics(orders, charges, receipts)
        spies = []

        def worker(topic, group, handler):
            spy = SpyClient(self.server.url)
            self.addCleanup(spy.close)
            spies.append(spy)
            w = onceq.Worker(spy, topic, group, owner=group, wait_ms=200, handler=handler, handle_signals=False)
            t = threading.Thread(target=w.run, daemon=True)
            t.start()
            self.addCleanup(lambda: (w.stop(), t.join(10)))
            return w

        def charge(job):
            order = job.json()
            charge_id = f"ch_{order['order_id']}"
            return onceq.Complete({"charge_id": charge_id}, produce=[
                Message({"order_id": order["order_id"], "charge_id": charge_id}, topic=charges,
                        idempotency_key=f"receipt:{order['order_id']}")])

        def receipt(job):
            c = job.json()
            job.produce(receipts, {"to": f"customer-{c['order_id']}", "charge_id": c["charge_id"]},
                        idempotency_key=f"mail:{c['order_id']}")
            return {"receipt": f"r_{c['order_id']}"}

        w1 = worker(orders, "billing", charge)
        w2 = worker(charges, "receipts", receipt)
        for n in (1, 2, 3):
            self.c.produce(orders, {"order_id": n}, idempotency_key=f"order:{n}")
        self.assertTrue(wait_until(lambda: w2.stats.acked == 3, 15), (w1.stats, w2.stats))
        mails = self.drain(receipts)
        self.assertEqual(sorted(m.json()["charge_id"] for m in mails), ["ch_1", "ch_2", "ch_3"])
        self.assertEqual(sorted(m.idempotency_key for m in mails), ["mail:1", "mail:2", "mail:3"])
        self.assertEqual(self.c.get_key(orders, "billing", "order:2").result, {"charge_id": "ch_2"})
        self.assertEqual(self.c.get_key(charges, "receipts", "receipt:2").result, {"receipt": "r_2"})
        self.assertEqual((w1.stats.produced, w2.stats.produced), (3, 3))
        for spy in spies:
            self.assertNotIn("/v1/produce", [p for _, p, _ in spy.calls])

    def test_a_stale_workers_messages_are_never_stored(self):
        self.require_steps()
        self.topics(self.src, self.dst, lease_ms=500)
        self.c.produce(self.src, "charge", idempotency_key="charge:1")
        started, resume = threading.Event(), threading.Event()
        spy = SpyClient(self.server.url)
        self.addCleanup(spy.close)
        w = onceq.Worker(spy, self.src, "g", owner="slow", wait_ms=200, auto_extend=False, handle_signals=False)

        @w.handler
        def handle(job):
            job.produce(self.dst, "staged by the slow one")
            started.set()
            resume.wait(10)  # paused past its lease
            return onceq.Complete({"by": "slow"}, produce=[Message("returned by the slow one", topic=self.dst)])

        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        self.addCleanup(lambda: (w.stop(), t.join(10)))
        with self.assertLogs("onceq.worker", logging.WARNING):
            self.assertTrue(started.wait(5))
            d = self.c.consume(self.src, "g", "fast", max_messages=1, wait_ms=5000).messages[0]
            self.c.ack(self.src, "g", "fast", partition=d.partition, offset=d.offset, fencing_token=d.fencing_token,
                       result={"by": "fast"}, produce=[Message("by the fast one", topic=self.dst)])
            resume.set()
            self.assertTrue(wait_until(lambda: w.stats.stale == 1, 10))
        self.assertEqual([m.value for m in self.drain(self.dst)], ["by the fast one"])
        self.assertEqual(self.c.get_key(self.src, "g", "charge:1").result, {"by": "fast"})
        self.assertNotIn("/v1/produce", [p for _, p, _ in spy.calls])
        self.assertEqual(w.stats.produced, 0)

    def test_ordering_key_leases_one_message_per_key_at_a_time(self):
        self.require_ordering()
        self.topics(self.src, ordering="key")
        self.assertEqual(self.c.get_topic(self.src).settings["ordering"], "key")
        self.c.produce(self.src, "k1-first", key="k1")
        self.c.produce(self.src, "k1-second", key="k1")
        self.c.produce(self.src, "k2-first", key="k2")
        first = self.c.consume(self.src, "g", "w1", max_messages=3, wait_ms=1000)
        self.assertEqual([m.value for m in first], ["k1-first", "k2-first"])
        self.assertEqual(len(self.c.consume(self.src, "g", "w2", max_messages=3, wait_ms=300)), 0)
        self.c.ack(self.src, "g", "w1", partition=0, offset=first.messages[0].offset)
        nxt = self.c.consume(self.src, "g", "w2", max_messages=3, wait_ms=1000)
        self.assertEqual([m.value for m in nxt], ["k1-second"])
        # Another group has its own order.
        self.assertEqual([m.value for m in self.c.consume(self.src, "g2", "w3", max_messages=3, wait_ms=1000)],
                         ["k1-first", "k2-first"])


class SpyClient(onceq.Client):
    """Records each request's method, path and JSON body."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []

    def _request(self, method, path, *, body=onceq.UNSET, **kw):
        self.calls.append((method, path.split("?")[0], body))
        return super()._request(method, path, body=body, **kw)
