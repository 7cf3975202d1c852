#!/usr/bin/env python3
"""Orders paid through a (simulated) payment API, with a worker killed
mid-payment: nobody is charged twice.

    python3 examples/payments.py demo [--url http://127.0.0.1:8080]

runs the whole story against a running onceqd: it starts a fake payment
API (which, like Stripe's, remembers each Idempotency-Key), produces five
orders and a duplicate, starts a worker, kills it with SIGKILL in the
middle of a payment (after the API charged the card, before the worker
heard back), starts a second worker, and prints the ledger.

    python3 examples/payments.py worker --url URL --payments URL --topic T

is one worker (what you would deploy); the demo runs it as a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onceq  # noqa: E402

GROUP = "billing"


# -- the worker ----------------------------------------------------------------


def charge_card(payments_url: str, order: dict, idempotency_key: str) -> dict:
    """POST /charges to the payment API, with the key that makes it safe to repeat."""
    req = urllib.request.Request(
        payments_url + "/charges",
        data=json.dumps(order).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def run_worker(url: str, payments_url: str, topic: str, name: str) -> None:
    client = onceq.Client(url)
    worker = onceq.Worker(client, topic, GROUP, owner=name, wait_ms=1000)

    @worker.handler
    def pay(job: onceq.Job):
        order = job.json()
        print(f"  {name}: paying {order['order_id']} (attempt {job.attempts})", flush=True)
        # The payment is the side effect that must not happen twice: the
        # message's idempotency key goes to the payment API, so a
        # redelivery after a crash replays the first charge.
        charge = charge_card(payments_url, order, job.idempotency_key or job.step_id)
        return {"charge_id": charge["charge_id"]}

    worker.run()
    print(f"  {name}: stopped ({worker.stats.acked} acked)", flush=True)


# -- the fake payment API --------------------------------------------------------


class PaymentApi:
    """Charges once per Idempotency-Key; kills the first worker mid-payment."""

    def __init__(self) -> None:
        self.charges: dict[str, dict] = {}  # idempotency key -> charge
        self.attempts: list[str] = []
        self.kill_on: str | None = None
        self.victim: subprocess.Popen | None = None
        self.killed = threading.Event()
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                key = self.headers["Idempotency-Key"]
                order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api.lock:
                    api.attempts.append(order["order_id"])
                    replay = key in api.charges
                    if not replay:
                        api.charges[key] = {"charge_id": f"ch_{len(api.charges) + 1}", **order}
                    charge = api.charges[key]
                amount = f"${order['amount_cents'] / 100:.2f}"
                if replay:
                    print(f"[payments] {order['order_id']}: key {key} seen before -> {charge['charge_id']} "
                          "replayed, card NOT charged again", flush=True)
                else:
                    print(f"[payments] {order['order_id']}: charged {amount} -> {charge['charge_id']}", flush=True)
                if order["order_id"] == api.kill_on and api.victim and not api.killed.is_set():
                    print(f"[payments] ...and worker pid {api.victim.pid} is killed (SIGKILL) before it hears back",
                          flush=True)
                    api.victim.send_signal(signal.SIGKILL)
                    api.victim.wait()
                    api.killed.set()
                    return
                body = json.dumps(charge).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


# -- the demo ---------------------------------------------------------------------


def demo(url: str) -> int:
    client = onceq.Client(url)
    topic = f"orders-demo-{os.getpid()}"
    # A short lease so that the killed worker's payment comes back in 2 s.
    client.create_topic(topic, partitions=1, lease_ms=2000)
    api = PaymentApi()
    api.kill_on = "order-3"
    print(f"payment API on {api.url}; onceq at {url}; topic {topic}")

    orders = [{"order_id": f"order-{i}", "customer": f"customer-{i}", "amount_cents": 1000 * i} for i in range(1, 6)]
    for o in orders:
        client.produce(topic, o, key=o["customer"], idempotency_key=f"charge:{o['order_id']}")
    client.produce(topic, orders[1], key=orders[1]["customer"], idempotency_key="charge:order-2")  # a double click
    print(f"produced {len(orders)} orders and a duplicate of order-2")

    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", "--url", url,
                                 "--payments", api.url, "--topic", topic, "--name", name])

    first = api.victim = start("worker-1")
    if not api.killed.wait(30):
        first.kill()
        print("FAIL: the first worker never reached order-3")
        return 1
    second = start("worker-2")
    try:
        for o in orders:
            k = client.get_key(topic, GROUP, f"charge:{o['order_id']}", wait_ms=20000)
            if not k.committed:
                print(f"FAIL: {o['order_id']} not committed: {k}")
                return 1
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)

    print("\nledger (payment API):")
    per_order: dict[str, int] = {}
    for key, ch in sorted(api.charges.items(), key=lambda kv: kv[1]["charge_id"]):
        per_order[ch["order_id"]] = per_order.get(ch["order_id"], 0) + 1
        print(f"  {ch['charge_id']}  {ch['order_id']}  ${ch['amount_cents'] / 100:.2f}")
    g = client.get_topic(topic).groups[GROUP]
    print(f"payment attempts: {len(api.attempts)} (order-3 twice: once by the killed worker, once replayed)")
    print(f"onceq: acked {g.acked}, duplicates auto-acked {g.auto_acked}, redelivered {g.redelivered}")
    client.delete_topic(topic)
    twice = [o for o, n in per_order.items() if n > 1]
    if twice or len(per_order) != len(orders):
        print(f"FAIL: charged twice: {twice}; charged orders: {sorted(per_order)}")
        return 1
    print(f"OK: {len(orders)} orders, {len(api.charges)} charges: nobody was charged twice")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo")
    d.add_argument("--url", default=os.environ.get("ONCEQ_URL", "http://127.0.0.1:8080"))
    w = sub.add_parser("worker")
    w.add_argument("--url", default=os.environ.get("ONCEQ_URL", "http://127.0.0.1:8080"))
    w.add_argument("--payments", required=True)
    w.add_argument("--topic", required=True)
    w.add_argument("--name", default=None)
    a = p.parse_args()
    if a.cmd == "demo":
        return demo(a.url)
    run_worker(a.url, a.payments, a.topic, a.name or onceq.worker.default_owner())
    return 0


if __name__ == "__main__":
    sys.exit(main())
