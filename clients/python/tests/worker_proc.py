"""A worker process for the tests: prints one JSON event per line.

usage: worker_proc.py URL TOPIC GROUP OWNER [--sleep S] [--concurrency N]
"""

import argparse
import json
import sys
import time

import onceq


def emit(event: str, **kw) -> None:
    print(json.dumps({"event": event, **kw}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("owner")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds each handler runs")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--drain-timeout", type=float, default=30.0)
    p.add_argument("--wait-ms", type=int, default=1000)
    a = p.parse_args()

    client = onceq.Client(a.url)
    worker = onceq.Worker(client, a.topic, a.group, owner=a.owner, concurrency=a.concurrency,
                          wait_ms=a.wait_ms, drain_timeout=a.drain_timeout)

    @worker.handler
    def handle(job: onceq.Job):
        emit("started", offset=job.offset, attempts=job.attempts, token=job.fencing_token,
             key=job.idempotency_key, value=job.value)
        end = time.monotonic() + a.sleep
        while time.monotonic() < end:
            time.sleep(0.02)
        emit("finished", offset=job.offset, lease_lost=job.lease_lost, stopping=job.stopping)
        return {"by": a.owner, "offset": job.offset}

    emit("ready", owner=worker.owner)
    worker.run()
    s = worker.stats
    emit("stopped", acked=s.acked, nacked=s.nacked, extended=s.extended, stale=s.stale,
         released=s.released, received=s.received)
    return 0


if __name__ == "__main__":
    sys.exit(main())
