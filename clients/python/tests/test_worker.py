"""The Worker in-process against a real onceqd: acks carried on consume,
results committed, nacks with reasons and backoff, Retry and Fail, lease
extension, lost leases, stale acks, concurrency, stop and drain."""

import logging
import sqlite3
import threading
import time

import onceq
from onceq import Message

from .support import ServerTestCase, unique, wait_until


class SpyClient(onceq.Client):
    """Records each request's method, path and JSON body."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []
        self.slow_extends = 0  # the next N extends stall for `stall` seconds
        self.stall = 0.0

    def _request(self, method, path, *, body=onceq.UNSET, **kw):
        self.calls.append((method, path.split("?")[0], body))
        if path == "/v1/extend" and self.slow_extends > 0:
            self.slow_extends -= 1
            time.sleep(self.stall)  # a network partition or a GC pause
        return super()._request(method, path, body=body, **kw)


class WorkerTest(ServerTestCase):
    def setUp(self):
        self.c = self.client()
        self.topic = unique("jobs")

    def start(self, worker):
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()

        def stop():
            worker.stop()
            t.join(20)
            self.assertFalse(t.is_alive(), "worker.run() did not return")

        self.addCleanup(lambda: t.is_alive() and stop())
        return stop

    def spy(self):
        s = SpyClient(self.server.url)
        self.addCleanup(s.close)
        return s

    def key(self, k, group="g"):
        return self.c.get_key(self.topic, group, k)

    def test_returned_values_are_committed_with_acks_carried_on_the_next_consume(self):
        self.c.create_topic(self.topic)
        self.c.produce_batch(self.topic, [Message({"n": i}, idempotency_key=f"k{i}") for i in range(5)])
        spy = self.spy()
        w = onceq.Worker(spy, self.topic, "g", owner="w1", wait_ms=500)
        seen = []

        @w.handler
        def handle(job):
            seen.append(job)
            return {"double": job.json()["n"] * 2}

        stop = self.start(w)
        self.assertTrue(wait_until(lambda: w.stats.acked == 4, 10))
        stop()
        for i in range(5):
            k = self.key(f"k{i}")
            self.assertEqual((k.state, k.result, k.owner), ("committed", {"double": 2 * i}, "w1"))
        carried = sum(len(b.get("acks", [])) for m, p, b in spy.calls if p == "/v1/consume")
        direct_acks = [b for m, p, b in spy.calls if p == "/v1/ack"]
        self.assertGreaterEqual(carried, 4)  # every ack but the last rode on a consume
        self.assertLessEqual(len(direct_acks), 1)  # the last one, flushed at stop
        self.assertEqual(w.stats.acked, 5)
        j = seen[0]
        self.assertEqual((j.attempts, j.idempotency_key, j.key, j.offset), (1, "k0", "", 0))
        self.assertEqual(j.step_id, f"{self.topic}/g/0/0")
        self.assertFalse(j.lease_lost)
        self.assertEqual(self.c.get_topic(self.topic).groups["g"].acked, 5)

    def test_an_exception_nacks_with_its_message_and_the_topic_backoff(self):
        self.c.create_topic(self.topic, backoff_ms=400)
        self.c.produce(self.topic, "x", idempotency_key="k")
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300)
        jobs = []

        @w.handler
        def handle(job):
            jobs.append((time.monotonic(), job))
            if job.attempts == 1:
                raise ConnectionError("payment gateway timeout")
            return "ok"

        stop = self.start(w)
        self.assertTrue(wait_until(lambda: self.key("k").committed, 10))
        stop()
        (t1, j1), (t2, j2) = jobs
        self.assertEqual((j2.attempts, j2.last_error), (2, "payment gateway timeout"))
        self.assertGreaterEqual(t2 - t1, 0.35)
        self.assertEqual(j1.step_id, j2.step_id)  # stable across redeliveries
        self.assertGreater(j2.fencing_token, j1.fencing_token)
        self.assertEqual((w.stats.nacked, w.stats.acked), (1, 1))

    def test_retry_sets_the_delay_and_fail_gives_up_for_good(self):
        self.c.create_topic(self.topic)
        self.c.produce(self.topic, "retry-me", idempotency_key="r")
        self.c.produce(self.topic, "declined", idempotency_key="f", envelope={"step_id": "charge-f"})
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300)
        calls = []

        @w.handler
        def handle(job):
            calls.append((time.monotonic(), job.value, job.attempts, job.last_error, job.step_id))
            if job.value == "declined":
                raise onceq.Fail("card declined")
            if job.attempts == 1:
                return onceq.Retry(delay_ms=600, reason="rate limited")
            return "paid"

        stop = self.start(w)
        self.assertTrue(wait_until(lambda: self.key("r").committed and self.key("f").committed, 10))
        time.sleep(0.3)
        stop()
        self.assertEqual(self.key("f").result, {"failed": "card declined"})
        self.assertEqual(self.key("r").result, "paid")
        retried = [c for c in calls if c[1] == "retry-me"]
        self.assertEqual([c[2] for c in retried], [1, 2])
        self.assertEqual(retried[1][3], "rate limited")
        self.assertGreaterEqual(retried[1][0] - retried[0][0], 0.55)
        self.assertEqual([c[4] for c in calls if c[1] == "declined"], ["charge-f"])  # once, never retried
        self.assertEqual(w.stats.failed, 1)

    def test_a_handler_running_three_leases_is_extended_and_not_redelivered(self):
        self.c.create_topic(self.topic, lease_ms=1000)
        self.c.produce(self.topic, "slow", idempotency_key="slow")
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300)
        ran = []

        @w.handler
        def handle(job):
            ran.append(job)
            time.sleep(3.2)
            return {"lease_lost": job.lease_lost}

        stop = self.start(w)
        self.assertTrue(wait_until(lambda: ran, 5))
        # Another consumer of the group polls all along: it gets nothing.
        other = []
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline and not self.key("slow").committed:
            other += self.c.consume(self.topic, "g", "w2", max_messages=1, wait_ms=250).messages
        self.assertTrue(wait_until(lambda: self.key("slow").committed, 5))
        stop()
        self.assertEqual(other, [])
        k = self.key("slow")
        self.assertEqual((k.owner, k.attempts, k.result), ("w1", 1, {"lease_lost": False}))
        self.assertEqual(len(ran), 1)
        self.assertGreaterEqual(w.stats.extended, 6)  # every ~333 ms for 3.2 s
        g = self.c.get_topic(self.topic).groups["g"]
        self.assertEqual((g.redelivered, g.acked), (0, 1))

    def test_a_stale_workers_ack_is_refused_and_reported(self):
        self.c.create_topic(self.topic, lease_ms=600)
        self.c.produce(self.topic, "charge", idempotency_key="charge:1")
        started, resume = threading.Event(), threading.Event()
        stale = []
        w = onceq.Worker(self.client(), self.topic, "g", owner="slow", wait_ms=300, auto_extend=False,
                         on_stale=lambda job, err: stale.append((job, err)))

        @w.handler
        def handle(job):
            started.set()
            resume.wait(10)  # paused past its lease
            return {"by": "slow"}

        with self.assertLogs("onceq.worker", logging.WARNING) as logs:
            stop = self.start(w)
            self.assertTrue(started.wait(5))
            # The lease runs out; another consumer takes over and commits.
            d = self.c.consume(self.topic, "g", "fast", max_messages=1, wait_ms=5000).messages[0]
            self.assertEqual(d.attempts, 2)
            self.c.ack(self.topic, "g", "fast", partition=d.partition, offset=d.offset,
                       fencing_token=d.fencing_token, result={"by": "fast"})
            resume.set()
            self.assertTrue(wait_until(lambda: stale, 10))
            stop()
        job, err = stale[0]
        self.assertIsInstance(err, onceq.Fenced)
        self.assertTrue(job.lease_lost)
        self.assertEqual((w.stats.stale, w.stats.acked), (1, 0))
        self.assertTrue(any("refused" in line for line in logs.output), logs.output)
        self.assertEqual(self.key("charge:1").result, {"by": "fast"})  # the first commit stands

    def test_a_fenced_extend_tells_the_handler_its_lease_is_lost(self):
        self.c.create_topic(self.topic, lease_ms=600)
        self.c.produce(self.topic, "x", idempotency_key="x")
        spy = self.spy()
        spy.slow_extends, spy.stall = 1, 1.5  # the first extend arrives after the lease ran out
        w = onceq.Worker(spy, self.topic, "g", owner="paused", wait_ms=300)
        started, told = threading.Event(), []

        @w.handler
        def handle(job):
            started.set()
            told.append(job.wait_lease_lost(8))
            self.assertRaises(onceq.LeaseLost, job.check)
            return "too late"

        stop = self.start(w)
        self.assertTrue(started.wait(5))
        d = self.c.consume(self.topic, "g", "other", max_messages=1, wait_ms=5000, lease_ms=10000).messages[0]
        self.assertEqual(d.attempts, 2)
        self.assertTrue(wait_until(lambda: told, 10))
        self.assertEqual(told, [True])
        self.assertTrue(wait_until(lambda: w.stats.stale == 1, 5))
        stop()
        self.assertEqual(w.stats.lease_lost, 1)
        k = self.key("x")
        self.assertEqual((k.state, k.owner), ("leased", "other"))  # the late ack changed nothing
        self.c.ack(self.topic, "g", "other", partition=d.partition, offset=d.offset, result="right")
        self.assertEqual(self.key("x").result, "right")

    def test_the_fencing_token_guards_the_database_write(self):
        # The README's example: UPDATE ... WHERE last_token < :token.
        self.c.create_topic(self.topic, lease_ms=500)
        self.c.produce(self.topic, "10", idempotency_key="debit-1")
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER, last_token INTEGER)")
        db.execute("INSERT INTO accounts VALUES (1, 100, 0)")
        lock = threading.Lock()

        def debit(job):
            with lock:
                cur = db.execute("UPDATE accounts SET balance = balance - ?, last_token = ? WHERE id = 1 AND last_token < ?",
                                 (int(job.value), job.fencing_token, job.fencing_token))
                db.commit()
            if cur.rowcount == 0:
                raise onceq.LeaseLost("a newer delivery already wrote")
            return {"token": job.fencing_token}

        # A zombie holds the first delivery; a worker takes the redelivery and writes first.
        zombie = self.c.consume(self.topic, "g", "zombie", max_messages=1, wait_ms=1000).messages[0]
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300, handler=debit)
        stop = self.start(w)
        self.assertTrue(wait_until(lambda: self.key("debit-1").committed, 10))
        stop()

        class Z:  # the zombie wakes up and writes with its older token
            value, fencing_token = "10", zombie.fencing_token

        self.assertRaises(onceq.LeaseLost, debit, Z)
        self.assertEqual(db.execute("SELECT balance FROM accounts").fetchone(), (90,))

    def test_concurrency_runs_n_handlers_at_once(self):
        self.c.create_topic(self.topic)
        self.c.produce_batch(self.topic, [f"m{i}" for i in range(8)])
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", concurrency=4, wait_ms=300)
        lock, running, peak = threading.Lock(), [0], [0]

        @w.handler
        def handle(job):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.4)
            with lock:
                running[0] -= 1

        t0 = time.monotonic()
        stop = self.start(w)
        self.assertTrue(wait_until(lambda: w.stats.received == 8 and running[0] == 0, 10))
        stop()
        self.assertEqual(peak[0], 4)
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertEqual(self.c.get_topic(self.topic).groups["g"].acked, 8)

    def test_stop_finishes_the_running_handler_and_takes_no_more(self):
        self.c.create_topic(self.topic)
        self.c.produce_batch(self.topic, [Message(f"m{i}", idempotency_key=f"k{i}") for i in range(3)])
        started = threading.Event()
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300)

        @w.handler
        def handle(job):
            started.set()
            time.sleep(0.8)
            return {"stopping": job.stopping}

        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(started.wait(5))
        w.stop()
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(self.key("k0").result, {"stopping": True})
        g = self.c.get_topic(self.topic).groups["g"]
        self.assertEqual((g.acked, g.backlog, g.inflight), (1, 2, 0))

    def test_a_handler_still_running_after_the_drain_timeout_is_released(self):
        self.c.create_topic(self.topic)
        self.c.produce(self.topic, "stuck", idempotency_key="stuck")
        started, unblock = threading.Event(), threading.Event()
        w = onceq.Worker(self.client(), self.topic, "g", owner="w1", wait_ms=300, drain_timeout=0.3)

        @w.handler
        def handle(job):
            started.set()
            unblock.wait(10)
            return "late"

        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(started.wait(5))
        t0 = time.monotonic()
        w.stop()
        t.join(10)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertEqual(w.stats.released, 1)
        d = self.c.consume(self.topic, "g", "w2", max_messages=1, wait_ms=1000).messages[0]
        self.assertEqual((d.attempts, d.last_error), (2, "worker stopped before the handler finished"))
        unblock.set()
        time.sleep(0.2)
        self.assertEqual(self.key("stuck").state, "leased")  # the late result was dropped

    def test_an_unknown_topic_stops_run_with_the_error(self):
        w = onceq.Worker(self.client(), unique("missing"), "g", handler=lambda job: None)
        with self.assertRaises(onceq.InvalidArgument):
            w.run()
