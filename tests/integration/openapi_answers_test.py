#!/usr/bin/env python3
"""Real onceqd answers against docs/openapi.json.

Starts the onceqd binary on an ephemeral port of 127.0.0.1 with a fresh data
dir, makes a representative set of requests (every route, the success
statuses and the common errors) and checks each answer against what
docs/openapi.json declares for that path, method and status:

  - the status is declared for the operation (405 and unknown paths, which
    no operation can declare, use components/responses/MethodNotAllowed and
    NotFound);
  - the Content-Type's media type is one the response declares (none: the
    body must be empty);
  - a JSON body validates against the declared schema (JSON Schema 2020-12,
    $refs resolved inside the document); an NDJSON body line by line;
  - X-Request-Id (and Allow on 405) is present when the response declares it.

The JSON bodies this test sends on requests that must succeed are also
validated against the operation's requestBody schema, so the spec's request
schemas cannot reject what docs/API.md documents. Fields in an answer that
the schema does not declare are printed as NOTEs (the response schemas are
open on purpose, so this is not a failure).

usage: openapi_answers_test.py [ONCEQD [OPENAPI_JSON]]
       (or env ONCEQD, ONCEQ_OPENAPI; the spec defaults to docs/openapi.json)
Exit 0: all passed; 1: a mismatch or error (each named by method, path and
status); 77: python3 has no usable jsonschema (ctest SKIP_RETURN_CODE).
Needs the Debian package python3-jsonschema (scripts/deps.sh).
"""

import copy
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError as e:  # no jsonschema, or one older than 4.0 (no 2020-12)
    print(f"SKIP: python3 has no usable jsonschema ({e}); "
          "install python3-jsonschema (scripts/deps.sh)")
    sys.exit(77)

TOTAL_SECONDS = 25      # the whole test, server start and stop included
REQUEST_SECONDS = 5     # one request
MAX_BODY = 4096         # --max-body-bytes, so that 413 is cheap to provoke

HERE = os.path.dirname(os.path.abspath(__file__))
ONCEQD = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ONCEQD", ""))
SPEC_PATH = (sys.argv[2] if len(sys.argv) > 2 else
             os.environ.get("ONCEQ_OPENAPI",
                            os.path.join(HERE, "..", "..", "docs", "openapi.json")))

# Properties whose value is free-form by contract (docs/API.md): their inner
# fields are not reported as undeclared.
FREE_FORM = {"envelope", "result", "headers"}


class Failure(Exception):
    pass


# ---------------------------------------------------------------- the spec

class Spec:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = json.load(f)

    def pointer(self, ref):
        if not ref.startswith("#/"):
            raise Failure(f"spec: only local $refs are supported, got {ref!r}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError):
                raise Failure(f"spec: dangling $ref {ref!r}") from None
        return node

    def deref(self, node):
        """An OpenAPI object (response, header) that may be a $ref."""
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            node = self.pointer(node["$ref"])
            seen += 1
            if seen > 20:
                raise Failure("spec: $ref loop")
        return node

    def inline(self, schema, depth=0):
        """A copy of schema with every $ref replaced by its target (the
        spec has no recursive schemas; a loop is reported). Works the same
        with every jsonschema version, old RefResolver or new referencing."""
        if depth > 64:
            raise Failure("spec: schema $refs nest too deep (recursive schema?)")
        if isinstance(schema, list):
            return [self.inline(s, depth + 1) for s in schema]
        if not isinstance(schema, dict):
            return schema
        if "$ref" in schema:
            target = self.inline(self.pointer(schema["$ref"]), depth + 1)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            if not rest:
                return target
            return {"allOf": [target, self.inline(rest, depth + 1)]}
        return {k: self.inline(v, depth + 1) for k, v in schema.items()}

    def operation(self, path, method):
        item = self.doc.get("paths", {}).get(path)
        if item is None:
            return None
        return item.get(method.lower())

    def response(self, path, method, status, fallback=None):
        """(where, response object) declared for path/method/status; for a
        status no operation can declare, fallback names a components
        response."""
        op = self.operation(path, method)
        if op is not None:
            res = op.get("responses", {})
            if str(status) in res:
                return (f"paths.{path}.{method.lower()}.responses.{status}",
                        self.deref(res[str(status)]))
        if fallback is not None:
            return fallback, self.deref(self.pointer(fallback))
        if op is None:
            raise Failure(f"{method} {path}: the spec has no such operation")
        raise Failure(f"{method} {path} answered {status}, which the spec does "
                      f"not declare (declared: {', '.join(sorted(op.get('responses', {})))})")

    def request_schema(self, path, method):
        op = self.operation(path, method)
        body = (op or {}).get("requestBody")
        if body is None:
            return None
        media = self.deref(body).get("content", {}).get("application/json")
        return None if media is None else self.inline(media.get("schema", {}))


def validator(schema):
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(schema, instance):
    errors = sorted(validator(schema).iter_errors(instance),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    out = []
    for e in errors[:5]:
        msg = f"at {_where(e)}: {e.message}"
        if e.context:  # oneOf/anyOf: why each branch failed
            first = {}
            for sub in e.context:
                first.setdefault(sub.relative_schema_path[0], sub)
            msg += "".join(f"; branch {i}: at {_where(sub)}: {sub.message}"
                           for i, sub in sorted(first.items()))
        out.append(msg)
    return out


def _where(error):
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                         for p in error.absolute_path)


def undeclared(schema, instance, where, out):
    """Appends the locations of object fields that schema does not declare."""
    if not isinstance(schema, dict):
        return
    for key in ("oneOf", "anyOf"):
        for branch in schema.get(key, []):
            if validator(branch).is_valid(instance):
                undeclared(branch, instance, where, out)
    if "allOf" in schema:
        for part in schema["allOf"]:
            undeclared(part, instance, where, out)
        return  # properties may be split across the parts
    if isinstance(instance, dict) and ("properties" in schema or "additionalProperties" in schema):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for k, v in instance.items():
            if k in props:
                if k not in FREE_FORM:
                    undeclared(props[k], v, f"{where}.{k}", out)
            elif isinstance(extra, dict):
                undeclared(extra, v, f"{where}.{k}", out)
            elif extra is None:
                out.append(f"{where}.{k}")
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(instance):
            undeclared(schema["items"], v, f"{where}[{i}]", out)


# ---------------------------------------------------------------- the server

def start_server(tmp):
    log_path = os.path.join(tmp, "onceqd.log")
    log = open(log_path, "wb")

    def die_with_parent():  # the server must not outlive a killed test
        try:
            import ctypes
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass

    proc = subprocess.Popen(
        [ONCEQD, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"),
         "--fsync", "none", "--max-body-bytes", str(MAX_BODY)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent)
    log.close()
    deadline = time.monotonic() + 10
    prefix = b"onceqd listening on 127.0.0.1:"
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            for line in f:
                if line.startswith(prefix):
                    return proc, int(line[len(prefix):].strip()), log_path
        if proc.poll() is not None:
            raise Failure(f"onceqd exited with {proc.returncode} before listening")
        time.sleep(0.02)
    raise Failure("onceqd did not print 'onceqd listening on 127.0.0.1:<port>' within 10 s")


def stop_server(proc):
    """SIGTERM by its pid; SIGKILL if it has not exited within 5 s."""
    if proc.poll() is not None:
        return proc.returncode
    os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return "killed after 5 s"


class Answer:
    def __init__(self, method, path, status, headers, body):
        self.method, self.path, self.status = method, path, status
        self.headers, self.body = headers, body

    def json(self):
        return json.loads(self.body)


class Checker:
    def __init__(self, spec, port):
        self.spec, self.port = spec, port
        self.passed, self.failures, self.notes = 0, [], []

    def send(self, method, url, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_SECONDS)
        try:
            conn.request(method, url, body=body, headers=headers or {})
            r = conn.getresponse()
            return Answer(method, urllib.parse.urlsplit(url).path, r.status,
                          {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def call(self, method, url, body=None, *, expect, template=None, headers=None,
             fallback=None, error=None, check_request=None):
        """Sends the request, checks the answer against the spec (template:
        the spec's path when it has parameters) and returns it. expect: the
        status docs/API.md promises; error: the error code it promises."""
        a = self.send(method, url, body, headers)
        path = template or a.path
        name = f"{method} {url} -> {a.status}"
        if check_request is None:
            check_request = 200 <= expect < 300
        problems = []
        if check_request and isinstance(body, (dict, list)):
            schema = self.spec.request_schema(path, method)
            if schema is not None:
                problems += [f"request body {e}" for e in schema_errors(schema, body)]
        if a.status != expect:
            problems.append(f"expected status {expect} (docs/API.md), got {a.status}: "
                            f"{a.body[:300]!r}")
        try:
            problems += self.check_answer(a, path, fallback, error)
        except Failure as e:
            problems.append(str(e))
        if problems:
            self.failures.append(f"{name}:\n    " + "\n    ".join(problems))
        else:
            self.passed += 1
        return a

    def check_answer(self, a, path, fallback, error):
        where, res = self.spec.response(path, a.method, a.status, fallback)
        problems = []
        for h in ("X-Request-Id", "Allow"):
            if h in res.get("headers", {}) and h.lower() not in a.headers:
                problems.append(f"header {h} is declared ({where}) but missing")
        content = res.get("content")
        ctype = a.headers.get("content-type")
        if not content:
            if a.body:
                problems.append(f"{where} declares no body, got {a.body[:200]!r}")
            return problems
        if ctype is None:
            return problems + [f"no Content-Type; {where} declares {sorted(content)}"]
        media = ctype.split(";")[0].strip().lower()
        if media not in content:
            return problems + [f"Content-Type {ctype!r} is not declared by {where} "
                               f"(declared: {sorted(content)})"]
        schema = self.spec.inline(content[media].get("schema", {}))
        if media == "application/json":
            docs = [("body", a.body)]
        elif media == "application/x-ndjson":
            lines = a.body.decode("utf-8", "replace").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            docs = [(f"line {i + 1}", l.encode()) for i, l in enumerate(lines)]
        else:  # text/plain, text/html: a string schema
            try:
                text = a.body.decode("utf-8")
            except UnicodeDecodeError as e:
                return problems + [f"{media} body is not UTF-8: {e}"]
            return problems + [f"{where} schema: {m}" for m in schema_errors(schema, text)]
        for label, raw in docs:
            try:
                inst = json.loads(raw)
            except ValueError as e:
                problems.append(f"{label} is not JSON ({e}): {raw[:200]!r}")
                continue
            for m in schema_errors(schema, inst):
                problems.append(f"{label} does not match {where} schema {m}")
            if error is not None and isinstance(inst, dict) and inst.get("error") != error:
                problems.append(f"{label}: expected error {error}, got {inst.get('error')!r}")
            extra = []
            undeclared(schema, inst, "$", extra)
            for e in extra:
                note = f"{a.method} {path} {a.status}: {label} field {e} is not declared in {where}"
                if note not in self.notes:
                    self.notes.append(note)
        return problems

    def deliveries(self, a):
        if a.status != 200:
            raise Failure(f"{a.method} {a.path} answered {a.status}; "
                          "the steps after it need its deliveries")
        return [json.loads(l) for l in a.body.decode().splitlines() if l.strip()]


# ---------------------------------------------------------------- the requests

def scenario(c):
    T = "oas"
    G = "billing"
    q = urllib.parse.urlencode

    # health, version, the spec itself, the console
    c.call("GET", "/v1/healthz", expect=200)
    c.call("GET", "/v1/version", expect=200)
    c.call("GET", "/v1/openapi.json", expect=200)
    c.call("GET", "/ui", expect=200)

    # topics: created, created again with the same settings (201 again, per
    # docs/API.md), a different configuration (409), list, get, unknown
    topic = {"name": T, "partitions": 2, "max_attempts": 1, "lease_ms": 30000,
             "max_inflight": 100, "max_backlog_messages": 1000, "max_backlog_bytes": 1 << 20}
    c.call("POST", "/v1/topics", topic, expect=201)
    c.call("POST", "/v1/topics", topic, expect=201)
    c.call("POST", "/v1/topics", {"name": T, "partitions": 3}, expect=409,
           error="ALREADY_EXISTS")
    c.call("POST", "/v1/topics", {"name": "tiny", "max_backlog_messages": 1}, expect=201)
    c.call("GET", "/v1/topics", expect=200)
    c.call("GET", f"/v1/topics/{T}", template="/v1/topics/{name}", expect=200)
    c.call("GET", "/v1/topics/no-such-topic", template="/v1/topics/{name}", expect=404,
           error="NOT_FOUND")

    # produce: one message with a key and an envelope, a dedup pair (the
    # Idempotency-Key header; the repeat answers duplicate: true), a batch
    c.call("POST", "/v1/produce",
           {"topic": T, "key": "customer-42", "value": "{\"order\":7}",
            "envelope": {"idempotency_key": "charge:order-7", "tenant_id": "acme",
                         "headers": {"trace-id": "4bf92f35"}}}, expect=200)
    c.call("POST", "/v1/produce", {"topic": T, "value": "x"}, expect=200,
           headers={"Idempotency-Key": "req-81c2"})
    dup = c.call("POST", "/v1/produce", {"topic": T, "value": "x"}, expect=200,
                 headers={"Idempotency-Key": "req-81c2"})
    if dup.status == 200 and dup.json().get("duplicate") is not True:
        c.failures.append(f"POST /v1/produce (repeated Idempotency-Key): expected "
                          f"duplicate: true, got {dup.body!r}")
    c.call("POST", "/v1/produce",
           {"topic": T, "messages": [
               {"value": "a"},
               {"key": "k", "value": "b", "envelope": {"msg_id": "m-1"}},
               {"value": "c", "envelope": {"idempotency_key": "job-9",
                                           "retry_policy": {"max_attempts": 1}}}]},
           expect=200)

    # consume: a long-poll batch (POST) with every message, then an empty one (GET)
    a = c.call("POST", "/v1/consume",
               {"topic": T, "group": G, "owner": "worker-1", "max_messages": 10,
                "wait_ms": 1000, "lease_ms": 60000}, expect=200)
    got = c.deliveries(a)
    if len(got) != 5:
        c.failures.append(f"POST /v1/consume: expected the 5 stored messages, got {len(got)}")
    c.call("GET", "/v1/consume?" + q({"topic": T, "group": G, "owner": "worker-1",
                                      "max_messages": 10}), expect=200)
    by_value = {d["value"]: d for d in got}
    for v in ("{\"order\":7}", "x", "a", "b", "c"):
        if v not in by_value:
            raise Failure(f"POST /v1/consume: no delivery of value {v!r} in {got}")
    ident = {"topic": T, "group": G, "owner": "worker-1"}

    def pos(v):
        return {"partition": by_value[v]["partition"], "offset": by_value[v]["offset"]}

    # a leased key, then ack with a result (204, and 204 again), committed key
    keyq = {"topic": T, "group": G, "key": "charge:order-7", "tenant_id": "acme"}
    c.call("GET", "/v1/keys?" + q(keyq), expect=200)
    c.call("POST", "/v1/ack", {**ident, **pos("{\"order\":7}"),
                               "result": {"charge_id": "ch_123"}}, expect=204)
    c.call("POST", "/v1/ack", {**ident, **pos("{\"order\":7}"),
                               "result": {"charge_id": "ch_123"}}, expect=204)
    c.call("GET", "/v1/keys?" + q({**keyq, "wait_ms": 100}), expect=200)
    c.call("GET", "/v1/keys?" + q({"topic": T, "group": G, "key": "never-seen"}), expect=200)

    # extend, then a batch ack (two acked, one never delivered: error item)
    c.call("POST", "/v1/extend", {**ident, **pos("a"), "lease_ms": 60000}, expect=200)
    c.call("POST", "/v1/ack", {**ident, "acks": [
        {**pos("a")}, {**pos("b"), "result": {"ok": True}},
        {"partition": 0, "offset": 999}]}, expect=200)

    # nack: max_attempts 1, so "c" goes to dlq.oas and its key is failed
    c.call("POST", "/v1/nack", {**ident, **pos("c"), "reason": "gateway timeout",
                                "delay_ms": 0}, expect=204)
    c.call("GET", "/v1/keys?" + q({"topic": T, "group": G, "key": "job-9"}), expect=200)
    dlq = c.call("GET", "/v1/consume?" + q({"topic": f"dlq.{T}", "group": "ops",
                                            "owner": "me", "max_messages": 10,
                                            "wait_ms": 2000}), expect=200)
    if not any("dlq" in d.get("envelope", {}) for d in c.deliveries(dlq)):
        c.failures.append(f"GET /v1/consume on dlq.{T}: no delivery with envelope.dlq: "
                          f"{dlq.body!r}")
    c.call("POST", "/v1/dlq/redrive", {"topic": T, "max_messages": 100}, expect=200)

    # errors: 409 fenced ack, 404 ack on an unknown topic, 400s, 405s,
    # unknown path, 413, 429
    c.call("POST", "/v1/ack", {**ident, "owner": "worker-2", **pos("x")}, expect=409,
           error="FAILED_PRECONDITION")
    c.call("POST", "/v1/extend", {**ident, "owner": "worker-2", **pos("x"), "lease_ms": 1000},
           expect=409, error="FAILED_PRECONDITION")
    c.call("POST", "/v1/ack", {**ident, "topic": "no-such-topic", "partition": 0, "offset": 0},
           expect=404, error="NOT_FOUND")
    c.call("POST", "/v1/produce", {"topic": T}, expect=400, error="INVALID_ARGUMENT")
    c.call("POST", "/v1/produce", {"topic": "no-such-topic", "value": "v"}, expect=400,
           error="INVALID_ARGUMENT")
    c.call("POST", "/v1/produce", "{not json", expect=400, error="INVALID_ARGUMENT")
    c.call("POST", "/v1/topics", {"name": "t", "partitons": 2}, expect=400,
           error="INVALID_ARGUMENT")
    c.call("POST", "/v1/consume", {"topic": T, "group": G}, expect=400,
           error="INVALID_ARGUMENT")
    c.call("GET", "/v1/keys?" + q({"topic": T, "group": G}), expect=400,
           error="INVALID_ARGUMENT")
    c.call("PUT", "/v1/produce", {"topic": T, "value": "v"}, expect=405,
           fallback="#/components/responses/MethodNotAllowed", error="METHOD_NOT_ALLOWED")
    c.call("DELETE", "/v1/topics", expect=405,
           fallback="#/components/responses/MethodNotAllowed", error="METHOD_NOT_ALLOWED")
    c.call("GET", "/v1/no-such-route", expect=404,
           fallback="#/components/responses/NotFound", error="NOT_FOUND")
    c.call("POST", "/v1/produce", {"topic": T, "value": "v" * (MAX_BODY + 100)}, expect=413,
           error="PAYLOAD_TOO_LARGE")
    c.call("POST", "/v1/produce", {"topic": "tiny", "value": "1"}, expect=200)
    full = c.call("POST", "/v1/produce", {"topic": "tiny", "value": "2"}, expect=429,
                  error="RESOURCE_EXHAUSTED")
    if full.status == 429 and "retry-after" not in full.headers:
        c.failures.append("POST /v1/produce -> 429: no Retry-After header (docs/API.md)")

    # metrics (text), delete (204), then the topic is gone (404)
    m = c.call("GET", "/metrics", expect=200)
    if b"onceq_produced_total" not in m.body:
        c.failures.append("GET /metrics: no onceq_produced_total in the text")
    c.call("DELETE", f"/v1/topics/{T}", template="/v1/topics/{name}", expect=204)
    c.call("GET", f"/v1/topics/{T}", template="/v1/topics/{name}", expect=404,
           error="NOT_FOUND")


def main():
    if not ONCEQD or not os.access(ONCEQD, os.X_OK):
        print(f"FAIL: onceqd binary not given or not executable: {ONCEQD!r} "
              "(argv[1] or env ONCEQD)")
        return 1
    spec = Spec(SPEC_PATH)
    version = _jsonschema_version()
    print(f"onceqd: {ONCEQD}\nspec: {os.path.normpath(SPEC_PATH)}\njsonschema: {version}")

    def timeout(signum, frame):
        raise Failure(f"the test took longer than {TOTAL_SECONDS} s")

    signal.signal(signal.SIGALRM, timeout)
    signal.alarm(TOTAL_SECONDS)
    tmp = tempfile.mkdtemp(prefix="onceq-oas-")
    proc, log_path, c, fatal = None, None, None, None
    try:
        proc, port, log_path = start_server(tmp)
        c = Checker(spec, port)
        scenario(c)
        if proc.poll() is not None:
            raise Failure(f"onceqd exited with {proc.returncode} during the test")
    except Failure as e:
        fatal = str(e)
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        fatal = f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
        if proc is not None:
            rc = stop_server(proc)
            if rc != 0 and fatal is None:
                fatal = f"onceqd did not exit 0 on SIGTERM: {rc}"
    passed = c.passed if c else 0
    failures = (c.failures if c else []) + ([fatal] if fatal else [])
    for n in (c.notes if c else []):
        print(f"NOTE: {n}")
    for f in failures:
        print(f"FAIL: {f}")
    if failures and log_path and os.path.exists(log_path):
        with open(log_path, "rb") as f:
            tail = f.read()[-2000:].decode("utf-8", "replace")
        print("--- onceqd output (tail) ---\n" + tail)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"openapi answers: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


def _jsonschema_version():
    try:
        from importlib.metadata import version
        return version("jsonschema")
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
