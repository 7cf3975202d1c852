"""Workers as real processes: kill -9 mid-handler, and SIGTERM draining."""

import signal
import time

import onceq

from .support import ServerTestCase, WorkerProcess, unique, wait_until


class WorkerProcessTest(ServerTestCase):
    def setUp(self):
        self.c = self.client()
        self.topic = unique("orders")

    def worker(self, owner, *args):
        w = WorkerProcess(self.server.url, self.topic, "billing", owner, *args)
        self.addCleanup(w.kill)
        return w

    def test_a_worker_killed_mid_handler_is_replaced_and_the_key_committed_once(self):
        self.c.create_topic(self.topic, lease_ms=1000)
        self.c.produce(self.topic, "order 7", idempotency_key="charge:order-7")
        a = self.worker("worker-a", "--sleep", "60")
        first = a.wait_event("started")
        self.assertEqual(first["attempts"], 1)
        a.kill()  # SIGKILL, mid-handler: no ack, no nack, no release
        self.assertEqual(a.proc.returncode, -signal.SIGKILL)
        # The same work produced again meanwhile (a duplicate upstream).
        self.c.produce(self.topic, "order 7 again", idempotency_key="charge:order-7")

        b = self.worker("worker-b")
        second = b.wait_event("started")
        self.assertEqual((second["offset"], second["attempts"]), (first["offset"], 2))
        self.assertGreater(second["token"], first["token"])
        self.assertTrue(wait_until(lambda: self.c.get_key(self.topic, "billing", "charge:order-7").committed, 10))
        k = self.c.get_key(self.topic, "billing", "charge:order-7")
        self.assertEqual((k.owner, k.attempts, k.result), ("worker-b", 2, {"by": "worker-b", "offset": 0}))
        # The duplicate is never delivered: auto-acked by the committed key.
        self.assertTrue(wait_until(lambda: self.c.get_topic(self.topic).groups["billing"].auto_acked == 1, 5))
        time.sleep(0.5)
        self.assertEqual([e["offset"] for e in b.events if e["event"] == "started"], [0])
        g = self.c.get_topic(self.topic).groups["billing"]
        self.assertEqual((g.acked, g.auto_acked, g.backlog, g.inflight), (1, 1, 0, 0))

    def test_sigterm_finishes_the_running_handler_then_exits(self):
        self.c.create_topic(self.topic)
        self.c.produce_batch(self.topic, [onceq.Message(f"m{i}", idempotency_key=f"k{i}") for i in range(3)])
        w = self.worker("worker-t", "--sleep", "1.5")
        w.wait_event("started")
        t0 = time.monotonic()
        w.signal(signal.SIGTERM)
        self.assertEqual(w.wait(15), 0)
        self.assertLess(time.monotonic() - t0, 5)
        finished = w.wait_event("finished", 1)
        self.assertEqual((finished["offset"], finished["stopping"], finished["lease_lost"]), (0, True, False))
        stopped = w.wait_event("stopped", 1)
        self.assertEqual((stopped["acked"], stopped["received"], stopped["released"]), (1, 1, 0))
        self.assertEqual([e["offset"] for e in w.events if e["event"] == "started"], [0])
        self.assertTrue(self.c.get_key(self.topic, "billing", "k0").committed)
        g = self.c.get_topic(self.topic).groups["billing"]
        self.assertEqual((g.acked, g.backlog, g.inflight), (1, 2, 0))

    def test_sigint_drains_too(self):
        self.c.create_topic(self.topic)
        self.c.produce(self.topic, "m", idempotency_key="k")
        w = self.worker("worker-i", "--sleep", "0.5")
        w.wait_event("started")
        w.signal(signal.SIGINT)
        self.assertEqual(w.wait(15), 0)
        self.assertTrue(self.c.get_key(self.topic, "billing", "k").committed)

    def test_a_second_signal_releases_running_jobs_at_once(self):
        self.c.create_topic(self.topic)
        self.c.produce(self.topic, "m", idempotency_key="k")
        w = self.worker("worker-2x", "--sleep", "60")
        w.wait_event("started")
        w.signal(signal.SIGTERM)  # drain: the handler has 30 s to finish
        time.sleep(0.5)
        t0 = time.monotonic()
        w.signal(signal.SIGTERM)  # now
        self.assertEqual(w.wait(10), 0)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertEqual(w.wait_event("stopped", 1)["released"], 1)
        d = self.c.consume(self.topic, "billing", "other", max_messages=1, wait_ms=2000).messages[0]
        self.assertEqual((d.attempts, d.last_error), (2, "worker stopped before the handler finished"))

    def test_a_second_ctrl_c_cuts_the_long_poll(self):
        self.c.create_topic(self.topic)
        w = self.worker("worker-idle", "--wait-ms", "30000")
        w.wait_event("ready")
        time.sleep(0.5)  # in its long poll
        w.signal(signal.SIGINT)
        time.sleep(0.3)
        t0 = time.monotonic()
        w.signal(signal.SIGINT)
        w.wait(10)  # KeyboardInterrupt, as Python does on a second Ctrl-C
        self.assertLess(time.monotonic() - t0, 3)
