#!/usr/bin/env python3
"""A drain, alone, with the shard's disk-read counters.

Starts ONCEQD on a fresh data dir (--fsync always), produces N messages
of 256 bytes in batches of 100 to a topic of 4 partitions, then consumes
100 at a time and acks each batch, on one connection. Prints the server's
user and system CPU and page faults per drained message, its threads'
context switches per 100, the CPU of each thread by name, and what the
drain added to the counters onceq_shard_disk_reads_total /
onceq_shard_loop_disk_reads_total (docs/DESIGN.md, "Reader threads") and
the WAL syncs and their waiters. With PERF=FILE set, `perf record -g`
samples the server during the drain only, and with STRACE=FILE
`strace -f -c` counts its system calls then (not both); CONSUMERS=N
drains on N connections from N processes at once, and IDLE=N keeps N
more connections open and idle through the drain; ONCEQD_ARGS adds
onceqd flags (e.g. "--wal-sync loop").

    bench/drain_probe.py ONCEQD [N]     (default N: 100000)

Talks only to 127.0.0.1; stops only the server it started.
"""
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def drain(port):
    """Consumes 100 at a time and acks each batch until nothing is left."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    drained = 0
    while True:
        conn.request("POST", "/v1/consume",
                     body=json.dumps({"topic": "t", "group": "g", "owner": f"w{os.getpid()}",
                                      "max_messages": 100, "lease_ms": 60000}),
                     headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        body = res.read()
        assert res.status == 200, body
        msgs = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not msgs:
            return drained
        drained += len(msgs)
        acks = [{"partition": m["partition"], "offset": m["offset"]} for m in msgs]
        conn.request("POST", "/v1/ack",
                     body=json.dumps({"topic": "t", "group": "g", "owner": f"w{os.getpid()}",
                                      "acks": acks}),
                     headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        body = res.read()
        assert res.status == 200, body


def drain_with(port, consumers):
    """The drain on one connection, or on CONSUMERS processes at once."""
    if consumers <= 1:
        return drain(port)
    with multiprocessing.get_context("fork").Pool(consumers) as pool:
        return sum(pool.map(drain, [port] * consumers))


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    data = tempfile.mkdtemp(prefix="onceq-drain-probe-")
    server = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--data-dir", data, "--fsync", "always"]
        + os.environ.get("ONCEQD_ARGS", "").split(),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(server.stdout.readline().strip().rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port)

        def call(method, path, body=None):
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            return res.status, res.read()

        def counters():
            _, text = call("GET", "/metrics")
            out = {}
            for line in text.decode().splitlines():
                if line.startswith(("onceq_shard_disk_reads_total",
                                    "onceq_shard_loop_disk_reads_total",
                                    "onceq_wal_sync_duration_seconds_count",
                                    "onceq_wal_sync_waiters_total")):
                    name, value = line.rsplit(" ", 1)
                    out[name] = int(float(value))
            return out

        def stat_fields():
            return open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()

        def cpu_ticks():
            fields = stat_fields()
            return int(fields[11]), int(fields[12])

        def minor_faults():
            return int(stat_fields()[7])

        def thread_ticks():  # user + system ticks by thread name
            out = {}
            for t in os.listdir(f"/proc/{server.pid}/task"):
                try:
                    text = open(f"/proc/{server.pid}/task/{t}/stat").read()
                except FileNotFoundError:
                    continue
                name = text[text.index("(") + 1:text.rindex(")")]
                fields = text.rsplit(")", 1)[1].split()
                out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
            return out

        def switches():  # voluntary and not, every thread
            total = 0
            for t in os.listdir(f"/proc/{server.pid}/task"):
                with open(f"/proc/{server.pid}/task/{t}/status") as f:
                    total += sum(int(line.split()[1]) for line in f
                                 if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))
            return total

        status, body = call("POST", "/v1/topics", {"name": "t", "partitions": 4})
        assert status == 201, body
        value = "v" * 256
        for i in range(0, n, 100):
            batch = [{"value": value, "envelope": {"idempotency_key": f"k{i + j}"}}
                     for j in range(100)]
            status, body = call("POST", "/v1/produce", {"topic": "t", "messages": batch})
            assert status == 200, body

        perf = None
        if os.environ.get("PERF"):
            perf = subprocess.Popen(["perf", "record", "-F", "2999", "-g", "-p", str(server.pid),
                                     "-o", os.environ["PERF"]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        elif os.environ.get("STRACE"):
            perf = subprocess.Popen(["strace", "-f", "-c", "-p", str(server.pid),
                                     "-o", os.environ["STRACE"]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        before, faults, start = cpu_ticks(), minor_faults(), time.time()
        switched, threads = switches(), thread_ticks()
        # The drain's connections are the loop's only ones: an idle one
        # would keep the loop from syncing itself while every client waits
        # (shard/local_path.cpp).
        # IDLE=N keeps N more connections open through the drain, idle after
        # three produces each (three more messages to drain), as a producer pool's.
        counted = counters()
        conn.close()
        idle = [http.client.HTTPConnection("127.0.0.1", port)
                for _ in range(int(os.environ.get("IDLE", "0")))]
        for c in idle:  # produces move the connection to the topic's loop
            for _ in range(3):
                c.request("POST", "/v1/produce", body=json.dumps({"topic": "t", "value": value}),
                          headers={"Content-Type": "application/json"})
                assert c.getresponse().read()
        drained = drain_with(port, int(os.environ.get("CONSUMERS", "1")))
        for c in idle:
            c.close()
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        after, tck = cpu_ticks(), os.sysconf("SC_CLK_TCK")
        per_msg = [round((a - b) / tck / max(drained, 1) * 1e6, 1) for a, b in zip(after, before)]
        print(f"drained {drained} in {time.time() - start:.2f} s; server CPU per message: "
              f"user {per_msg[0]} us, system {per_msg[1]} us; "
              f"{(minor_faults() - faults) / max(drained, 1):.3f} page faults per message, "
              f"{(switches() - switched) / max(drained, 1) * 100:.1f} context switches per 100")
        by_thread = thread_ticks()
        print("by thread, us per message: " + ", ".join(
            f"{name} {(ticks - threads.get(name, 0)) / tck / max(drained, 1) * 1e6:.2f}"
            for name, ticks in sorted(by_thread.items(), key=lambda kv: -kv[1])
            if ticks > threads.get(name, 0)))
        for name, value in sorted(counters().items()):
            print(f"{name} {value - counted.get(name, 0)} in the drain, "
                  f"{(value - counted.get(name, 0)) / max(drained, 1) * 100:.2f} per 100 messages")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
