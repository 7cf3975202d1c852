#!/usr/bin/env python3
"""The drain of docs/BENCHMARKS.md's ninth round, against onceq or Redis
Streams: preload N messages (256-byte values, key = idempotency key, a
msg_id; Redis: XADD with the same fields), then drain them in batches of 100
(onceq: POST /v1/consume then POST /v1/ack; Redis: XREADGROUP then XACK),
and switch callgrind's instrumentation on only for a window of the drain, so
that setup and preload are not counted. bench/drain_callgrind.sh runs it.

  drain_callgrind.py onceq|redis PORT N MODE WARM MEASURE VGPID
    MODE: drain (ack as its own request), piggy (acks carried on the next
          consume / XACK pipelined with the next XREADGROUP), e2e (produce
          100, then consume them with the previous acks carried)
    WARM: messages drained before the window; MEASURE: drained inside it
    VGPID: the valgrind process to toggle (0: none, a plain run)
  Environment: NOKEY=1 drops the idempotency keys (onceq); ONSTART=CMD runs
  CMD when the window opens and SIGINTs it when it closes (strace -c -p, a
  CPU sampler).
"""
import json, os, socket, subprocess, sys, time

sysname, port, n, mode, warm, measure, vgpid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
B = 100

hook = None
def cg(*args):
    global hook
    if args[0] == "-z" and os.environ.get("ONSTART"):
        hook = subprocess.Popen(os.environ["ONSTART"], shell=True); time.sleep(1.0)
    if args[0] == "-d" and hook is not None:
        import signal; os.kill(hook.pid, signal.SIGINT); hook.wait()
    if vgpid > 0:
        subprocess.run(["callgrind_control", *args, str(vgpid)], check=True, stdout=subprocess.DEVNULL)

class Window:
    """callgrind's window: opens once `warm` messages are drained, closes
    (done() is then True) once `measure` more are."""
    def __init__(self):
        self.on = False; self.start = 0; self.t0 = None
    def done(self, drained):
        if not self.on and drained >= warm:
            cg("-i", "on"); cg("-z"); self.on = True; self.t0 = time.time(); self.start = drained
        if self.on and drained - self.start >= measure:
            cg("-d"); cg("-i", "off")
            return True
        return False
    def report(self, drained):
        print("drained", drained, "measured", drained - self.start, "seconds", round(time.time() - self.t0, 1))

def payload(seq):
    p = "%016x.%016x." % (seq, time.monotonic_ns())
    return p + "x" * (256 - len(p))

class Http:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port)); self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
    def post(self, path, body):
        b = body.encode()
        self.s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(b)) + b)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(1 << 20)
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n"); status = int(lines[0].split()[1])
        hdr = {l.split(b":", 1)[0].strip().lower(): l.split(b":", 1)[1].strip() for l in lines[1:]}
        if b"content-length" in hdr:
            cl = int(hdr[b"content-length"])
            while len(rest) < cl: rest += self.s.recv(1 << 20)
            body, self.buf = rest[:cl], rest[cl:]
        else:  # chunked
            body = b""
            while True:
                while b"\r\n" not in rest: rest += self.s.recv(1 << 20)
                sz, rest = rest.split(b"\r\n", 1); sz = int(sz.split(b";")[0], 16)
                while len(rest) < sz + 2: rest += self.s.recv(1 << 20)
                body += rest[:sz]; rest = rest[sz + 2:]
                if sz == 0: break
            self.buf = rest
        return status, body

class Resp:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port)); self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")
    @staticmethod
    def enc(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)
    def send(self, data): self.s.sendall(data)
    def read(self):
        l = self.f.readline()
        t, v = l[:1], l[1:-2]
        if t == b"+": return v
        if t == b"-": raise RuntimeError(v)
        if t == b":": return int(v)
        if t == b"$":
            k = int(v)
            if k < 0: return None
            d = self.f.read(k + 2); return d[:-2]
        if t == b"*":
            k = int(v)
            if k < 0: return None
            return [self.read() for _ in range(k)]
        raise RuntimeError(l)

def onceq():
    c = Http(port)
    st, b = c.post("/v1/topics", json.dumps({"name": "t", "partitions": 4, "lease_ms": 60000}))
    assert st in (200, 201), b
    def produce(lo, hi):
        msgs = []
        for s in range(lo, hi):
            k = "k%010x" % s
            if os.environ.get("NOKEY"):
                msgs.append('{"key":"%s","value":"%s","envelope":{"msg_id":"m%010x"}}' % (k, payload(s), s))
            else:
                msgs.append('{"key":"%s","value":"%s","envelope":{"idempotency_key":"%s","msg_id":"m%010x"}}' % (k, payload(s), k, s))
        st, b = c.post("/v1/produce", '{"topic":"t","messages":[' + ",".join(msgs) + "]}")
        assert st == 200, b
    if mode != "e2e":
        for i in range(0, n, B): produce(i, min(n, i + B))
    held = []
    drained = 0; seq = n if mode != "e2e" else 0
    window = Window()
    while not window.done(drained):
        if mode == "e2e":
            produce(seq, seq + B); seq += B
        req = '{"topic":"t","group":"g","owner":"w","max_messages":100,"wait_ms":100,"lease_ms":60000'
        if mode in ("piggy", "e2e") and held:
            req += ',"acks":[' + ",".join('{"partition":%d,"offset":%d,"attempts":%d}' % h for h in held) + "]"
            held = []
        req += "}"
        st, b = c.post("/v1/consume", req)
        assert st == 200, b
        lines = [json.loads(l) for l in b.decode().splitlines() if l.strip()]
        msgs = [m for m in lines if "offset" in m and "value" in m]
        if not msgs and mode != "e2e": break
        drained += len(msgs)
        ids = [(m["partition"], m["offset"], m["attempts"]) for m in msgs]
        if mode in ("piggy", "e2e"):
            held = ids
        else:
            st, b = c.post("/v1/ack", '{"topic":"t","group":"g","owner":"w","acks":[' + ",".join('{"partition":%d,"offset":%d,"attempts":%d}' % h for h in ids) + "]}")
            assert st == 200, b
            assert b.count(b'"acked"') == len(ids), b[:300]
    window.report(drained)

def redis():
    c = Resp(port)
    c.send(Resp.enc("XGROUP", "CREATE", "t", "g", "0", "MKSTREAM")); c.read()
    def produce(lo, hi):
        c.send(b"".join(Resp.enc("XADD", "t", "*", "k", "k%010x" % s, "m", "m%010x" % s, "p", payload(s)) for s in range(lo, hi)))
        for _ in range(lo, hi): c.read()
    if mode != "e2e":
        for i in range(0, n, B): produce(i, min(n, i + B))
    held = []
    drained = 0
    window = Window()
    while not window.done(drained):
        if mode == "e2e":
            produce(n + drained, n + drained + B)  # unique seq
        data = b""
        if held: data += Resp.enc("XACK", "t", "g", *held)
        data += Resp.enc("XREADGROUP", "GROUP", "g", "c0", "COUNT", 100, "BLOCK", 100, "STREAMS", "t", ">")
        c.send(data)
        if held:
            assert c.read() == len(held); held = []
        r = c.read()
        ids = [e[0] for e in r[0][1]] if r else []
        if not ids and mode != "e2e": break
        drained += len(ids)
        if mode in ("piggy", "e2e"):
            held = ids
        else:
            c.send(Resp.enc("XACK", "t", "g", *ids)); assert c.read() == len(ids)
    window.report(drained)

onceq() if sysname == "onceq" else redis()
