#!/usr/bin/env python3
"""Shard moves, drains and scale-out of an onceqd cluster, timed on this machine.

Each scenario starts a fresh cluster of onceqd processes on 127.0.0.1 under a
temporary directory, loads it over the HTTP API, does the operation, measures
it, stops the nodes and removes the directory (unless --keep):

  move-keys         4 nodes, replicas 3, 1 shard: --keys messages, each with
                    its own idempotency key; move a non-leader replica of
                    shard 0 to the spare node; time until the move is done,
                    bytes of snapshot the target restored.
  move-bytes        the same with --mb megabytes of --value-bytes values.
  drain             5 nodes, replicas 3, --drain-shards shards (some node then
                    holds exactly 2): --drain-keys messages spread over the
                    shards; drain a node that holds 2; time until "drained".
  load-during-move  4 nodes, replicas 3, 1 shard with --during-mb megabytes:
                    a steady produce load (--threads threads, one message per
                    request, through every node) for --window seconds without
                    a move, then for --window seconds with a move started at
                    the window's start; --rounds pairs.
  scale             produce throughput of 3 nodes x 3 shards against 6 nodes
                    x 6 shards (replicas 3), --scale-topics topics, one client
                    thread per topic, one message per request, --window s.

Python 3.11 standard library only. Only the processes this script started are
signalled, by PID; nodes also die with it (PR_SET_PDEATHSIG).

  python3 bench/move_bench.py --onceqd build/cmd/onceqd --keys 2000 --mb 20 \\
      --during-mb 20 --drain-keys 2000 --window 3 --rounds 1 --out-md /tmp/move.md
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import datetime
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

SCENARIOS = ["move-keys", "move-bytes", "drain", "load-during-move", "scale"]
RAFT_STRIDE = 16  # raft ports per node: group g on raft + g, the meta group on raft + shards
HTTP_TIMEOUT_S = 30.0


class BenchError(Exception):
    """A failure that ends the scenario; its message is what the user sees."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- HTTP client


class Http:
    """One kept-alive HTTP/1.1 connection to one node; reconnects after an error.

    Not thread-safe: one per thread.
    """

    def __init__(self, addr: str, timeout: float = HTTP_TIMEOUT_S):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        """(status, body). Raises OSError / http.client errors on a broken connection."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
            payload = resp.read()
            if resp.will_close:
                self.close()
            return resp.status, payload
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def json(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        status, payload = self.request(method, path, body)
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload.decode(errors="replace")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def retry_delay_s(status: int, payload: bytes) -> float:
    """How long to wait before retrying a 429/503: the server's retry_after_ms, bounded."""
    try:
        ms = json.loads(payload).get("retry_after_ms")
        if isinstance(ms, (int, float)):
            return min(max(ms, 10), 2000) / 1000.0
    except (ValueError, AttributeError):
        pass
    return 0.05 if status == 503 else 0.1


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of one Prometheus series in /metrics text (0 when absent)."""
    want = labels or {}
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in want.items()):
            return float(m.group(3))
    return 0.0


# ---------------------------------------------------------------- the cluster


def _pdeathsig() -> None:
    """In the child before exec: die with SIGKILL when this script dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_ports(nodes: int) -> tuple[list[int], list[int]]:
    """HTTP ports and Raft base ports for `nodes` nodes, all currently free.

    Taken below the ephemeral range so that the client's own connections
    cannot grab one between this check and the nodes' start.
    """
    need = nodes + nodes * RAFT_STRIDE
    for _ in range(200):
        base = random.randrange(20000, 32000 - need - 8)
        http_ports = [base + i for i in range(nodes)]
        raft_base = base + ((nodes + RAFT_STRIDE - 1) // RAFT_STRIDE) * RAFT_STRIDE
        raft_ports = [raft_base + RAFT_STRIDE * i for i in range(nodes)]
        if all(_port_free(p) for p in range(base, raft_base + RAFT_STRIDE * nodes)):
            return http_ports, raft_ports
    raise BenchError("found no block of free ports in 20000..32000")


@dataclass
class Node:
    id: str
    http: str
    raft: str
    data_dir: str
    log_path: str
    proc: subprocess.Popen | None = None
    log_file: object = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                tail = f.read().decode(errors="replace").splitlines()[-lines:]
            return "\n".join("    " + l for l in tail)
        except OSError as e:
            return f"    (cannot read {self.log_path}: {e})"


class Cluster:
    """N onceqd nodes on 127.0.0.1 in `root`, started and stopped by PID."""

    def __init__(self, onceqd: str, root: str, nodes: int, shards: int, replicas: int,
                 extra_args: list[str] | None = None):
        if shards + 1 > RAFT_STRIDE:
            raise BenchError(f"--shards {shards}: at most {RAFT_STRIDE - 1} with the port layout used")
        self.onceqd, self.root, self.shards, self.replicas = onceqd, root, shards, replicas
        self.extra_args = extra_args or []
        http_ports, raft_ports = pick_ports(nodes)
        self.nodes = [
            Node(id=f"n{i + 1}", http=f"127.0.0.1:{http_ports[i]}", raft=f"127.0.0.1:{raft_ports[i]}",
                 data_dir=os.path.join(root, f"n{i + 1}"), log_path=os.path.join(root, f"n{i + 1}.log"))
            for i in range(nodes)
        ]
        self.by_id = {n.id: n for n in self.nodes}
        self.config = os.path.join(root, "cluster.toml")
        self.metrics_failures: list[str] = []

    # -- processes

    def start(self, timeout_s: float) -> None:
        os.makedirs(self.root, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(f"replicas = {self.replicas}\ndead_after_ms = 0\n\n")
            for n in self.nodes:
                f.write(f'[[node]]\nid = "{n.id}"\nhttp = "{n.http}"\nraft = "{n.raft}"\n\n')
        for n in self.nodes:
            os.makedirs(n.data_dir, exist_ok=True)
            n.log_file = open(n.log_path, "ab")
            cmd = [self.onceqd, "--cluster", self.config, "--node-id", n.id, "--data-dir", n.data_dir,
                   "--shards", str(self.shards), "--fsync", "always", *self.extra_args]
            # A session of its own: a Ctrl-C in the terminal reaches only this
            # script, which then stops the nodes itself.
            n.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=n.log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_pdeathsig)
        log(f"started {len(self.nodes)} nodes ({self.shards} shards, replicas {self.replicas}) in {self.root}: "
            + ", ".join(f"{n.id} pid {n.proc.pid} http {n.http}" for n in self.nodes))
        self.wait_ready(timeout_s)

    def check_alive(self) -> None:
        """Raise with the log tail of every node that exited."""
        dead = [n for n in self.nodes if n.proc is not None and n.proc.poll() is not None]
        if dead:
            msg = []
            for n in dead:
                msg.append(f"node {n.id} (pid {n.proc.pid}) exited with status {n.proc.returncode}; "
                           f"tail of {n.log_path}:\n{n.log_tail()}")
            raise BenchError("\n".join(msg))

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the nodes started here, SIGKILL those still up after grace_s."""
        live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for n in live:
            try:
                n.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        for n in live:
            try:
                n.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{n.id} (pid {n.proc.pid}) still up {grace_s:.0f}s after SIGTERM: SIGKILL")
                n.proc.kill()
                n.proc.wait()
        for n in self.nodes:
            if n.log_file is not None:
                n.log_file.close()
                n.log_file = None

    # -- API

    def get_cluster(self, node_id: str) -> dict:
        status, body = Http(self.by_id[node_id].http, timeout=5).json("GET", "/v1/cluster")
        if status != 200:
            raise BenchError(f"GET /v1/cluster on {node_id}: {status} {body}")
        return body

    def try_cluster(self, node_id: str) -> dict | None:
        try:
            return self.get_cluster(node_id)
        except (OSError, http.client.HTTPException, BenchError):
            return None

    def metrics(self, node_id: str) -> str | None:
        """GET /metrics of one node, or None when it does not answer 200.

        The failure is noted in self.metrics_failures for the report (seen: an
        earlier build answered 503 on nodes holding some shards but not all).
        """
        try:
            status, body = Http(self.by_id[node_id].http, timeout=5).request("GET", "/metrics")
        except (OSError, http.client.HTTPException) as e:
            status, body = 0, str(e).encode()
        if status != 200:
            self.metrics_failures.append(f"{node_id}: {status} {body.decode(errors='replace')[:200]}")
            return None
        return body.decode()

    def cluster_metric(self, name: str, moves_finished: int) -> float | None:
        """A meta-group metric, from the meta leader first, else any node whose /metrics answers,
        once that node has applied `moves_finished` finished moves (waits up to 5 s)."""
        leader = self.meta_leader()
        order = [leader] + [n.id for n in self.nodes if n.id != leader]
        deadline = time.monotonic() + 5
        while True:
            for node_id in order:
                text = self.metrics(node_id)
                if text is not None and metric(text, "onceq_cluster_moves_finished_total") >= moves_finished:
                    return metric(text, name)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)

    def restored(self, node_id: str) -> tuple[float, float] | None:
        """(snapshots, bytes) restored on a node, over all shards; None if /metrics fails."""
        text = self.metrics(node_id)
        if text is None:
            return None
        return (sum(metric(text, "onceq_raft_snapshots_restored_total", {"shard": str(s)})
                    for s in range(self.shards)),
                sum(metric(text, "onceq_raft_snapshot_bytes_restored_total", {"shard": str(s)})
                    for s in range(self.shards)))

    def post(self, path: str, body: object, via: str | None = None, ok: tuple = (200, 201, 202, 204),
             timeout_s: float = 30.0) -> object:
        """POST through node `via` (default the first), retrying 429/503 until timeout_s."""
        node = self.by_id[via] if via else self.nodes[0]
        client = Http(node.http)
        deadline = time.monotonic() + timeout_s
        while True:
            status, payload = client.request("POST", path, body)
            if status in ok:
                return json.loads(payload) if payload else None
            if status in (429, 503) and time.monotonic() < deadline:
                time.sleep(retry_delay_s(status, payload))
                continue
            raise BenchError(f"POST {path} via {node.id}: {status} {payload.decode(errors='replace')[:500]}")

    def wait_ready(self, timeout_s: float) -> None:
        """Until every node answers /v1/cluster with placed = true and a leader per shard."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            views = {n.id: self.try_cluster(n.id) for n in self.nodes}
            if all(v is not None and v.get("meta", {}).get("placed")
                   and len(v.get("shards", [])) == self.shards
                   and all(s.get("leader") for s in v["shards"]) for v in views.values()):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"cluster not ready after {timeout_s:.0f}s (placed, a leader per shard); "
                                 f"last views: {json.dumps(views)[:2000]}")
            time.sleep(0.2)
        self.wait_preferred_leaders()

    def wait_preferred_leaders(self, timeout_s: float = 15.0) -> None:
        """Each shard's leader hands the shard to its preferred node (the first replica) within
        a few seconds of a placement or a move; wait for that, so that no handover falls into a
        measurement. Not required: after timeout_s go on as it is."""
        deadline = time.monotonic() + timeout_s
        while True:
            shards = self.view()["shards"]
            off = [(s["shard"], s["leader"], s["replicas"][0]) for s in shards
                   if s.get("replicas") and s["leader"] != s["replicas"][0]]
            if not off:
                return
            if time.monotonic() > deadline:
                log(f"not every shard is led by its preferred node after {timeout_s:.0f}s "
                    f"(shard, leader, preferred): {off}")
                return
            self.check_alive()
            time.sleep(0.2)

    def view(self) -> dict:
        """/v1/cluster from the meta leader if known, else the first node that answers."""
        for n in self.nodes:
            v = self.try_cluster(n.id)
            if v is None:
                continue
            leader = v.get("meta", {}).get("leader")
            if leader == n.id:
                return v
            if leader in self.by_id:
                lv = self.try_cluster(leader)
                if lv is not None:
                    return lv
            return v
        self.check_alive()
        raise BenchError("no node answers GET /v1/cluster")

    def meta_leader(self) -> str:
        return self.view()["meta"]["leader"] or self.nodes[0].id

    def create_topic(self, name: str) -> None:
        self.post("/v1/topics", {"name": name, "partitions": 1})

    def topic_shard(self, name: str, timeout_s: float = 30.0) -> int:
        """The shard of a topic: read /v1/cluster from every node until one lists it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for n in self.nodes:
                v = self.try_cluster(n.id)
                for s in (v or {}).get("shards", []):
                    if name in s.get("topics", []):
                        return int(s["shard"])
            self.check_alive()
            time.sleep(0.1)
        raise BenchError(f"no node lists topic {name} in GET /v1/cluster after {timeout_s:.0f}s")

    def shard_topics(self, per_shard: int, prefix: str) -> dict[int, list[str]]:
        """Create topics until every shard has `per_shard` of them (the shard is a hash of the name)."""
        got: dict[int, list[str]] = {s: [] for s in range(self.shards)}
        i = 0
        while any(len(t) < per_shard for t in got.values()):
            if i > 50 * self.shards * per_shard + 100:
                raise BenchError(f"could not place {per_shard} topics on each of {self.shards} shards "
                                 f"after {i} names: {got}")
            name = f"{prefix}{i}"
            i += 1
            self.create_topic(name)
            shard = self.topic_shard(name)
            if len(got[shard]) < per_shard:
                got[shard].append(name)
        return got

    def wait_move_done(self, shard: int, target: str, timeout_s: float, t0: float) -> float:
        """Seconds from t0 until shard has no move running and `target` among its replicas."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            v = self.view()
            s = v["shards"][shard]
            if "moving" not in s and target in s.get("replicas", []):
                return now - t0
            if now > deadline:
                raise BenchError(f"move of shard {shard} to {target} not done after {timeout_s:.0f}s: "
                                 f"{json.dumps(s)}")
            self.check_alive()
            time.sleep(0.05)


class Workdir:
    """A temporary directory for one scenario, removed at the end unless --keep."""

    def __init__(self, parent: str | None, name: str, keep: bool):
        if parent:
            os.makedirs(parent, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix=f"move-bench-{name}-", dir=parent)
        self.keep = keep

    def remove(self) -> None:
        if self.keep:
            log(f"kept {self.path}")
        else:
            shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------- load


def make_value(nbytes: int, rnd: random.Random) -> str:
    """An incompressible ASCII value of exactly nbytes (base64 of random bytes)."""
    raw = rnd.randbytes((nbytes * 3) // 4 + 3)
    return base64.b64encode(raw).decode()[:nbytes]


def bulk_load(cluster: Cluster, topics: list[str], total: int, value_bytes: int, batch: int,
              threads: int, label: str) -> tuple[int, float]:
    """Produce `total` messages spread over `topics`, in batches, each message with its own
    idempotency key and msg id; retries 429/503 with the same msg ids. (messages, seconds)."""
    batch = max(1, min(batch, 1000))
    jobs: list[tuple[str, int, int]] = []  # (topic, first index, count)
    per_topic = [total // len(topics) + (1 if i < total % len(topics) else 0) for i in range(len(topics))]
    for topic, n in zip(topics, per_topic):
        for first in range(0, n, batch):
            jobs.append((topic, first, min(batch, n - first)))
    lock = threading.Lock()
    done = [0]
    errors: list[str] = []
    next_job = [0]
    run_id = f"{os.getpid()}-{time.time_ns()}"

    def worker(wid: int) -> None:
        rnd = random.Random(f"{run_id}-{wid}")
        clients = [Http(n.http) for n in cluster.nodes]
        k = wid
        try:
            while not errors:
                with lock:
                    if next_job[0] >= len(jobs):
                        return
                    topic, first, count = jobs[next_job[0]]
                    next_job[0] += 1
                msgs = [{"value": make_value(value_bytes, rnd),
                         "envelope": {"idempotency_key": f"{label}:{topic}:{first + j}",
                                      "msg_id": f"{run_id}:{topic}:{first + j}"}}
                        for j in range(count)]
                body = json.dumps({"topic": topic, "messages": msgs}).encode()
                deadline = time.monotonic() + 120
                while True:
                    client = clients[k % len(clients)]
                    k += 1  # spread over the nodes; a retry goes to the next one
                    try:
                        status, payload = client.request("POST", "/v1/produce", body)
                    except (OSError, http.client.HTTPException) as e:
                        status, payload = 0, str(e).encode()
                    if status == 200:
                        break
                    if status in (0, 429, 503) and time.monotonic() < deadline:
                        time.sleep(retry_delay_s(status, payload) if status else 0.2)
                        continue
                    raise BenchError(f"produce to {topic} via {client.addr}: {status} "
                                     f"{payload.decode(errors='replace')[:300]}")
                with lock:
                    done[0] += count
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            with lock:
                errors.append(f"{type(e).__name__}: {e}")

    t0 = time.monotonic()
    ws = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for w in ws:
        w.start()
    last = t0
    while any(w.is_alive() for w in ws):
        for w in ws:
            w.join(timeout=0.5)
        if errors:
            break
        cluster.check_alive()
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            log(f"  loaded {done[0]}/{total} messages ({time.monotonic() - t0:.0f}s)")
    if errors:
        cluster.check_alive()
        raise BenchError("loading failed: " + errors[0])
    return done[0], time.monotonic() - t0


@dataclass
class WindowResult:
    ok: int = 0
    retries: dict[str, int] = field(default_factory=dict)  # retried answers: status ("conn": no answer) -> count
    retry_samples: dict[str, str] = field(default_factory=dict)  # status -> the first such answer's body
    latencies: list[float] = field(default_factory=list)  # seconds, first attempt to 2xx
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def retries_text(self) -> str:
        if not self.retries:
            return "0"
        total = sum(self.retries.values())
        return f"{total} (" + ", ".join(f"{k}: {v}" for k, v in sorted(self.retries.items())) + ")"

    def pct(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] * 1000.0


def steady_load(cluster: Cluster, targets: list[tuple[str, str]], window_s: float, value_bytes: int,
                label: str, on_start=None) -> WindowResult:
    """One thread per (topic, node address): one message per request, back to back, for
    window_s. Latency counts from a message's first attempt to its 2xx (retries included).
    on_start(), if given, runs in the main thread once every thread is connected and waiting."""
    res = WindowResult()
    lock = threading.Lock()
    errors: list[str] = []
    ready = threading.Barrier(len(targets) + 1)
    stop_at = [0.0]
    run_id = f"{label}-{os.getpid()}-{time.time_ns()}"

    def worker(i: int, topic: str, addr: str) -> None:
        client = Http(addr)
        via = next((n.id for n in cluster.nodes if n.http == addr), addr)
        value = make_value(value_bytes, random.Random(i))
        lat: list[float] = []
        ok = 0
        retries: dict[str, int] = {}
        samples: dict[str, str] = {}
        try:
            client.request("GET", "/v1/healthz")  # connect before the window opens
            ready.wait()
            seq = 0
            while time.monotonic() < stop_at[0]:
                seq += 1
                body = json.dumps({"topic": topic, "value": value,
                                   "envelope": {"idempotency_key": f"{run_id}:{i}:{seq}",
                                                "msg_id": f"{run_id}:{i}:{seq}"}}).encode()
                t0 = time.monotonic()
                while True:
                    try:
                        status, payload = client.request("POST", "/v1/produce", body)
                    except (OSError, http.client.HTTPException) as e:
                        status, payload = 0, str(e).encode()
                    if status == 200:
                        t1 = time.monotonic()
                        if t1 <= stop_at[0]:
                            ok += 1
                            lat.append(t1 - t0)
                        break
                    if status in (0, 429, 503) and time.monotonic() < stop_at[0] + 30:
                        key = str(status) if status else "conn"
                        retries[key] = retries.get(key, 0) + 1
                        if key not in samples:
                            samples[key] = f"via {via}: " + payload.decode(errors="replace")[:200]
                        time.sleep(retry_delay_s(status, payload) if status else 0.1)
                        continue
                    raise BenchError(f"produce to {topic} via {addr}: {status} "
                                     f"{payload.decode(errors='replace')[:300]}")
        except threading.BrokenBarrierError:
            return
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
            try:
                ready.abort()
            except threading.BrokenBarrierError:
                pass
        finally:
            client.close()
            with lock:
                res.ok += ok
                for k, v in retries.items():
                    res.retries[k] = res.retries.get(k, 0) + v
                for k, v in samples.items():
                    res.retry_samples.setdefault(k, v)
                res.latencies.extend(lat)

    ws = [threading.Thread(target=worker, args=(i, t, a), daemon=True) for i, (t, a) in enumerate(targets)]
    for w in ws:
        w.start()
    stop_at[0] = time.monotonic() + 3600  # until the barrier below sets the real end
    try:
        ready.wait(timeout=30)
    except threading.BrokenBarrierError:
        raise BenchError("load threads failed to start: " + "; ".join(errors[:3]))
    start = time.monotonic()
    stop_at[0] = start + window_s
    try:
        if on_start is not None:
            on_start()
        while any(w.is_alive() for w in ws):
            for w in ws:
                w.join(timeout=0.25)
            cluster.check_alive()
    except BaseException:
        stop_at[0] = 0.0  # the threads end at their next request
        raise
    if errors:
        raise BenchError("load failed: " + errors[0])
    res.seconds = window_s
    return res


# ---------------------------------------------------------------- report


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
               "|" + "|".join("---" for _ in self.columns) + "|"]
        out += ["| " + " | ".join(str(c) for c in r) + " |" for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def mib(nbytes: float) -> str:
    return f"{nbytes / (1024 * 1024):.1f}"


# ---------------------------------------------------------------- scenarios


def pick_move(view: dict, shard: int) -> tuple[str, str, str]:
    """(leader, source: a replica that is not the leader, target: a node without the shard)."""
    s = view["shards"][shard]
    leader, replicas = s["leader"], s["replicas"]
    sources = [r for r in replicas if r != leader]
    targets = [n["id"] for n in view["nodes"] if n["id"] not in replicas and n.get("state") == "active"]
    if not sources or not targets:
        raise BenchError(f"no move possible for shard {shard}: {json.dumps(s)}, nodes {view['nodes']}")
    return leader, sources[0], targets[0]


def timed_move(cluster: Cluster, shard: int, src: str, dst: str, via: str, timeout_s: float) -> float:
    t0 = time.monotonic()
    cluster.post(f"/v1/cluster/shards/{shard}/move", {"from": src, "to": dst}, via=via)
    return cluster.wait_move_done(shard, dst, timeout_s, t0)


def run_move(args, wd: Workdir, name: str) -> Table:
    by_bytes = name == "move-bytes"
    cluster = Cluster(args.onceqd_copy, wd.path, nodes=4, shards=1, replicas=3,
                      extra_args=args.extra_args)
    try:
        cluster.start(args.start_timeout)
        cluster.create_topic("moved")
        if by_bytes:
            count = max(1, args.mb * 1024 * 1024 // args.value_bytes)
            batch = max(1, min(1000, (args.max_body_bytes * 3 // 4) // (args.value_bytes + 200)))
            vbytes = args.value_bytes
        else:
            count, batch, vbytes = args.keys, args.batch, args.key_value_bytes
        log(f"{name}: producing {count} messages of {vbytes} B (batches of {batch}, {args.load_threads} threads)")
        n, load_s = bulk_load(cluster, ["moved"], count, vbytes, batch, args.load_threads, name)
        view = cluster.view()
        leader, src, dst = pick_move(view, 0)
        via = cluster.meta_leader()
        log(f"{name}: loaded {n} in {load_s:.1f}s; moving shard 0 {src} -> {dst} (leader {leader})")
        secs = timed_move(cluster, 0, src, dst, via, args.move_timeout)
        got = cluster.restored(dst)
        server_s = cluster.cluster_metric("onceq_cluster_last_move_seconds", 1)
        after = cluster.get_cluster(dst)["shards"][0]
        restored_txt = "n/a" if got is None else f"{got[0]:.0f} / {mib(got[1])}"
        log(f"{name}: move done in {secs:.2f}s, target restored (snapshots / MiB) {restored_txt}")
        t = Table(f"{name}: move one replica of a loaded shard (4 nodes, replicas 3, 1 shard)",
                  ["data", "messages", "load s", "move", "move s (client)", "move s (server)",
                   "snapshots / MiB restored", "target applied / commit"])
        data = f"{args.mb} MB of {vbytes} B values" if by_bytes else f"{count} keys, {vbytes} B values"
        t.rows.append([data, n, f"{load_s:.1f}", f"{src} -> {dst}", f"{secs:.2f}",
                       "n/a" if server_s is None else f"{server_s:.2f}", restored_txt, f"{after.get('applied_index')} / {after.get('commit_index')}"])
        t.notes.append("move s (client): from POST .../move to the first GET /v1/cluster (meta leader, "
                       "polled every 50 ms) without `moving` and with the target among the replicas; "
                       "(server): onceq_cluster_last_move_seconds.")
        t.notes.append("snapshots / MiB restored: the target's onceq_raft_snapshots_restored_total and "
                       "..._snapshot_bytes_restored_total; 0 means it caught up from the leader's log alone "
                       "(the log is trimmed only every --raft-snapshot-every entries, 65536 by default, "
                       "and a batch of messages is one entry).")
        add_metrics_note(t, cluster)
        return t
    finally:
        cluster.stop()


def run_drain(args, wd: Workdir) -> Table:
    shards = args.drain_shards
    cluster = Cluster(args.onceqd_copy, wd.path, nodes=5, shards=shards, replicas=3,
                      extra_args=args.extra_args)
    try:
        cluster.start(args.start_timeout)
        placed = cluster.shard_topics(1, "drain-t")
        topics = [placed[s][0] for s in range(shards)]
        log(f"drain: topics per shard {placed}; producing {args.drain_keys} messages")
        n, load_s = bulk_load(cluster, topics, args.drain_keys, args.key_value_bytes, args.batch,
                              args.load_threads, "drain")
        view = cluster.view()
        twos = [nd for nd in view["nodes"] if nd.get("replicas") == 2 and nd.get("state") == "active"]
        if not twos:
            raise BenchError(f"no node holds exactly 2 shards with --drain-shards {shards}: {view['nodes']}")
        # Prefer a node that leads one of its shards: the drain then hands leadership over too.
        twos.sort(key=lambda nd: -nd.get("leads", 0))
        node = twos[0]["id"]
        held = [s["shard"] for s in view["shards"] if node in s["replicas"]]
        started0 = view["meta"].get("moves_started", 0)
        finished0 = view["meta"].get("moves_finished", 0)
        restored0 = {nd.id: cluster.restored(nd.id) for nd in cluster.nodes}
        log(f"drain: loaded {n} in {load_s:.1f}s; draining {node} (holds shards {held}, "
            f"leads {twos[0].get('leads', 0)})")
        t0 = time.monotonic()
        cluster.post(f"/v1/cluster/nodes/{node}/drain", None, via=cluster.meta_leader())
        deadline = t0 + args.move_timeout
        while True:
            v = cluster.view()
            nd = next(x for x in v["nodes"] if x["id"] == node)
            if nd.get("state") == "drained" and nd.get("replicas") == 0:
                secs = time.monotonic() - t0
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{node} not drained after {args.move_timeout:.0f}s: {nd}; "
                                 f"shards {[(s['shard'], s['replicas'], s.get('moving')) for s in v['shards']]}")
            cluster.check_alive()
            time.sleep(0.05)
        snaps = nbytes = 0.0
        unknown = []
        for nd in cluster.nodes:
            if nd.id == node:
                continue
            before, after = restored0[nd.id], cluster.restored(nd.id)
            if before is None or after is None:
                unknown.append(nd.id)
                continue
            snaps += after[0] - before[0]
            nbytes += after[1] - before[1]
        if len(unknown) == len(cluster.nodes) - 1:
            restored_txt = "n/a (/metrics failed)"
        else:
            restored_txt = f"{snaps:.0f} / {mib(nbytes)}" + (f" (without {','.join(unknown)}: /metrics failed)"
                                                              if unknown else "")
        m = v["meta"]
        moves = m.get("moves_finished", 0) - finished0
        started = m.get("moves_started", 0) - started0
        log(f"drain: {node} drained in {secs:.2f}s ({moves} moves)")
        t = Table(f"drain: drain a node holding 2 shards (5 nodes, replicas 3, {shards} shards)",
                  ["messages", "load s", "node", "shards held", "drain s", "moves started / finished",
                   "snapshots / MiB restored (other nodes)", "placement after"])
        t.rows.append([n, f"{load_s:.1f}", node, ",".join(map(str, held)), f"{secs:.2f}",
                       f"{started} / {moves}", restored_txt,
                       "; ".join(f"{s['shard']}:{','.join(s['replicas'])}" for s in v["shards"])])
        t.notes.append(f"{args.drain_keys} messages spread evenly over one topic per shard; drain s: from "
                       "POST .../drain to the first GET /v1/cluster showing the node `drained` with 0 replicas.")
        add_metrics_note(t, cluster)
        return t
    finally:
        cluster.stop()


def add_metrics_note(t: Table, cluster: Cluster) -> None:
    if cluster.metrics_failures:
        uniq = sorted(set(cluster.metrics_failures))
        t.notes.append(f"GET /metrics failed {len(cluster.metrics_failures)} time(s), e.g. "
                       + "; ".join(f"`{u}`" for u in uniq[:3]))


def add_retry_notes(t: Table, label: str, res: WindowResult) -> None:
    for status, body in sorted(res.retry_samples.items()):
        t.notes.append(f"{label}: first {status} answer (retried) {body}".replace("|", "\\|"))


def fmt_window(res: WindowResult) -> list[str]:
    return [f"{res.rate:.0f}", f"{res.pct(50):.1f}", f"{res.pct(99):.1f}", res.retries_text()]


def run_load_during_move(args, wd: Workdir) -> Table:
    cluster = Cluster(args.onceqd_copy, wd.path, nodes=4, shards=1, replicas=3,
                      extra_args=args.extra_args)
    try:
        cluster.start(args.start_timeout)
        cluster.create_topic("preload")
        cluster.create_topic("steady")
        count = max(1, args.during_mb * 1024 * 1024 // args.value_bytes)
        batch = max(1, min(1000, (args.max_body_bytes * 3 // 4) // (args.value_bytes + 200)))
        log(f"load-during-move: preloading {args.during_mb} MB ({count} x {args.value_bytes} B)")
        n, load_s = bulk_load(cluster, ["preload"], count, args.value_bytes, batch, args.load_threads, "pre")
        targets = [("steady", cluster.nodes[i % len(cluster.nodes)].http) for i in range(args.threads)]
        t = Table(f"load-during-move: produce load with and without a move "
                  f"(4 nodes, replicas 3, 1 shard, {args.during_mb} MB preloaded)",
                  ["round", "window", "msg/s", "p50 ms", "p99 ms", "retries", "move"])
        retry_notes: list[tuple[str, WindowResult]] = []
        for rnd in range(1, args.rounds + 1):
            cluster.wait_preferred_leaders()
            log(f"load-during-move: round {rnd}: {args.window:.0f}s without a move")
            base = steady_load(cluster, targets, args.window, args.steady_value_bytes, f"r{rnd}a")
            t.rows.append([rnd, "no move", *fmt_window(base), ""])
            retry_notes.append((f"round {rnd}, no move", base))

            cluster.wait_preferred_leaders()
            view = cluster.view()
            leader, src, dst = pick_move(view, 0)
            via = cluster.meta_leader()
            move: dict = {}

            def start_move() -> None:
                move["t0"] = time.monotonic()
                cluster.post("/v1/cluster/shards/0/move", {"from": src, "to": dst}, via=via)

                def watch() -> None:
                    try:
                        move["secs"] = cluster.wait_move_done(0, dst, args.move_timeout, move["t0"])
                    except Exception as e:  # noqa: BLE001 - reported below
                        move["error"] = str(e)
                move["thread"] = threading.Thread(target=watch, daemon=True)
                move["thread"].start()

            log(f"load-during-move: round {rnd}: {args.window:.0f}s with a move {src} -> {dst}")
            during = steady_load(cluster, targets, args.window, args.steady_value_bytes, f"r{rnd}b",
                                 on_start=start_move)
            move["thread"].join(timeout=args.move_timeout)
            if "error" in move:
                raise BenchError(f"round {rnd}: move {src} -> {dst}: {move['error']}")
            secs = move["secs"]
            note = f"{src} -> {dst}, {secs:.2f}s" + (" (done before the window ended)" if secs < args.window
                                                    else " (ran past the window)")
            t.rows.append([rnd, "move", *fmt_window(during), note])
            retry_notes.append((f"round {rnd}, move", during))
        t.notes += [
            f"{args.threads} threads, one message ({args.steady_value_bytes} B) per request, back to back; "
            f"thread i sends through node i mod 4 (non-leaders forward to the leader); window "
            f"{args.window:.0f}s. Latency: first attempt to 2xx, retries (429/503/connection) included.",
            f"preload: {n} messages in {load_s:.1f}s. The move starts at the window's start; each round "
            "moves a non-leader replica to the node without one.",
            "Client and nodes share this machine's cores: the Python client itself limits msg/s.",
        ]
        for label, res in retry_notes:
            add_retry_notes(t, label, res)
        return t
    finally:
        cluster.stop()


def run_scale(args, wd: Workdir) -> Table:
    t = Table("scale: produce throughput, 3 nodes x 3 shards against 6 nodes x 6 shards (replicas 3)",
              ["nodes", "shards", "topics per shard", "client threads", "msg/s", "p50 ms", "p99 ms", "retries"])
    retry_notes: list[tuple[str, WindowResult]] = []
    for nodes in (3, 6):
        shards = nodes
        sub = os.path.join(wd.path, f"{nodes}n")
        cluster = Cluster(args.onceqd_copy, sub, nodes=nodes, shards=shards, replicas=3,
                          extra_args=args.extra_args)
        try:
            cluster.start(args.start_timeout)
            per_shard = max(1, args.scale_topics // shards)
            placed = cluster.shard_topics(per_shard, "scale-t")
            topics = [tp for s in range(shards) for tp in placed[s]]
            targets = [(tp, cluster.nodes[i % nodes].http) for i, tp in enumerate(topics)]
            log(f"scale: {nodes} nodes: {len(topics)} topics ({per_shard} per shard), {args.window:.0f}s")
            res = steady_load(cluster, targets, args.window, args.steady_value_bytes, f"s{nodes}")
            t.rows.append([nodes, shards, per_shard, len(targets), *fmt_window(res)])
            retry_notes.append((f"{nodes} nodes", res))
        finally:
            cluster.stop()
    t.notes += [
        f"one thread per topic, one message ({args.steady_value_bytes} B) per request (no batches), "
        f"thread i through node i mod N, window {args.window:.0f}s; topics chosen so that each shard "
        "has the same number.",
        f"This machine has {os.cpu_count()} cores: each cluster's nodes and the Python client share "
        "them, so the 6-node run measures the same cores as the 3-node run, not added capacity.",
    ]
    for label, res in retry_notes:
        add_retry_notes(t, label, res)
    return t


# ---------------------------------------------------------------- main


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring as written; defaults shown where there is one."""

    def _get_help_string(self, action):
        if action.default in (None, False, "") or action.required:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--onceqd", required=True, help="the onceqd binary (copied into the work dir first)")
    p.add_argument("--workdir", help="parent of the temporary directories (default: the system's tmp)")
    p.add_argument("--keep", action="store_true", help="keep the data directories and logs")
    p.add_argument("--scenario", default=",".join(SCENARIOS),
                   help="comma-separated, of: " + ", ".join(SCENARIOS))
    p.add_argument("--out-md", help="also write the tables here")
    p.add_argument("--keys", type=int, default=100000, help="move-keys: messages, one key each")
    p.add_argument("--key-value-bytes", type=int, default=100, help="value size of move-keys and drain")
    p.add_argument("--mb", type=int, default=1024, help="move-bytes: megabytes of values")
    p.add_argument("--value-bytes", type=int, default=8192, help="value size of move-bytes and the preload")
    p.add_argument("--batch", type=int, default=1000, help="messages per produce when loading keys (<= 1000)")
    p.add_argument("--max-body-bytes", type=int, default=1048576,
                   help="onceqd's --max-body-bytes: big-value batches are sized to 3/4 of it")
    p.add_argument("--load-threads", type=int, default=4, help="threads loading data")
    p.add_argument("--drain-keys", type=int, default=20000, help="drain: messages over all shards")
    p.add_argument("--drain-shards", type=int, default=3, help="drain: shards (5 nodes, replicas 3)")
    p.add_argument("--during-mb", type=int, default=200, help="load-during-move: megabytes preloaded")
    p.add_argument("--threads", type=int, default=8, help="load-during-move: producer threads")
    p.add_argument("--steady-value-bytes", type=int, default=256, help="value size of the steady loads")
    p.add_argument("--window", type=float, default=20.0, help="seconds of each measured window")
    p.add_argument("--rounds", type=int, default=3, help="load-during-move: pairs of windows")
    p.add_argument("--scale-topics", type=int, default=12, help="scale: topics (one client thread each)")
    p.add_argument("--onceqd-args", default="",
                   help="more onceqd flags for every node, e.g. \"--raft-snapshot-every 64\" "
                        "(a move then catches up by snapshot rather than by the log)")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds for a cluster to be ready")
    p.add_argument("--move-timeout", type=float, default=1800.0, help="seconds for a move or drain")
    args = p.parse_args(argv)
    args.extra_args = shlex.split(args.onceqd_args)
    args.scenarios = [s.strip() for s in args.scenario.split(",") if s.strip()]
    bad = [s for s in args.scenarios if s not in SCENARIOS]
    if bad:
        p.error(f"unknown scenario(s) {bad}; choose from {SCENARIOS}")
    if not (os.path.isfile(args.onceqd) and os.access(args.onceqd, os.X_OK)):
        p.error(f"--onceqd {args.onceqd}: not an executable file")
    if args.drain_shards < 3:
        p.error("--drain-shards must be at least 3 (with 5 nodes and replicas 3 a node then holds 2)")
    return args


def machine_header(args, argv: list[str]) -> str:
    try:
        version = subprocess.run([args.onceqd, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        version = f"? ({e})"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "\n".join([
        "## onceq move bench",
        "",
        f"- command: `{shlex.join([sys.executable, *argv])}`",
        f"- machine: {os.uname().nodename}, nproc {os.cpu_count()}, {now}",
        f"- onceqd: `{args.onceqd}` ({version}); every node `--fsync always`"
        + (f" `{args.onceqd_args}`" if args.onceqd_args else "") + ", all on 127.0.0.1",
        "",
    ])


def main(argv: list[str]) -> int:
    args = parse_args(argv[1:])

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    header = machine_header(args, argv)
    print(header, flush=True)
    parts = [header]
    failed = 0
    # A private copy of the binary: a rebuild during the run cannot mix versions.
    bindir = tempfile.mkdtemp(prefix="move-bench-bin-", dir=args.workdir)
    try:
        args.onceqd_copy = os.path.join(bindir, "onceqd")
        shutil.copy2(args.onceqd, args.onceqd_copy)
        for name in args.scenarios:
            wd = Workdir(args.workdir, name, args.keep)
            log(f"=== {name} (in {wd.path})")
            try:
                if name in ("move-keys", "move-bytes"):
                    table = run_move(args, wd, name)
                elif name == "drain":
                    table = run_drain(args, wd)
                elif name == "load-during-move":
                    table = run_load_during_move(args, wd)
                else:
                    table = run_scale(args, wd)
                text = table.markdown()
            except BenchError as e:
                failed += 1
                text = f"### {name}: FAILED\n\n```\n{e}\n```\n"
                log(f"{name} failed: {e}")
                wd.keep = True  # keep the logs of a failure
            finally:
                wd.remove()
            print(text, flush=True)
            parts.append(text)
            if args.out_md:
                with open(args.out_md, "w") as f:
                    f.write("\n".join(parts))
    except KeyboardInterrupt:
        log("interrupted: nodes stopped")
        return 130
    finally:
        shutil.rmtree(bindir, ignore_errors=True)
    if args.out_md:
        log(f"wrote {args.out_md}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
