#!/usr/bin/env python3
"""Writes the seed corpora of request_fuzz and codec_fuzz (corpus/<target>/)
from the requests of docs/API.md's examples. Run from anywhere; rewrites the
files it owns (seed-*). schema_fuzz's seeds are real encoded records; see
corpus/schema_fuzz/README."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# (method, target, body, extra headers) as docs/API.md shows them.
REQUESTS = [
    ("GET", "/v1/healthz", "", []),
    ("GET", "/v1/version", "", []),
    ("POST", "/v1/topics",
     '{"name":"orders","partitions":4,"max_attempts":5,"backoff_ms":1000}', []),
    ("POST", "/v1/topics", '{"name":"orders","partitions":8}', []),
    ("GET", "/v1/topics", "", []),
    ("GET", "/v1/topics/orders", "", []),
    ("DELETE", "/v1/topics/orders", "", []),
    ("POST", "/v1/produce",
     '{"topic":"orders","key":"customer-42","value":"{\\"order\\":7}",'
     '"envelope":{"idempotency_key":"charge:order-7","tenant_id":"acme",'
     '"headers":{"trace-id":"4bf92f35"}}}', []),
    ("POST", "/v1/produce",
     '{"topic":"orders","messages":[{"value":"a"},{"key":"k","value":"b"}]}', []),
    ("POST", "/v1/produce", '{"topic":"orders","value":"x"}',
     [("Idempotency-Key", "req-81c2")]),
    ("GET", "/v1/consume?topic=orders&group=billing&owner=worker-1", "", []),
    ("POST", "/v1/consume",
     '{"topic":"orders","group":"billing","owner":"worker-1","max_messages":10,'
     '"wait_ms":5000,"lease_ms":60000}', []),
    ("POST", "/v1/ack",
     '{"topic":"orders","group":"billing","owner":"worker-1","partition":1,"offset":17,'
     '"result":{"charge_id":"ch_123"}}', []),
    ("POST", "/v1/ack",
     '{"topic":"orders","group":"billing","owner":"worker-2","partition":1,"offset":17}', []),
    ("POST", "/v1/ack",
     '{"topic":"orders","group":"billing","owner":"worker-1",'
     '"acks":[{"partition":0,"offset":18},{"partition":3,"offset":5,"result":{"ok":true}},'
     '{"partition":0,"offset":999}]}', []),
    ("POST", "/v1/nack",
     '{"topic":"orders","group":"billing","owner":"worker-1","partition":1,"offset":17,'
     '"reason":"payment gateway timeout","delay_ms":5000}', []),
    ("GET", "/v1/consume?topic=dlq.orders&group=ops&owner=me&max_messages=10", "", []),
    ("POST", "/v1/extend",
     '{"topic":"orders","group":"billing","owner":"worker-1","partition":1,"offset":17,'
     '"lease_ms":60000}', []),
    ("GET", "/v1/keys?topic=orders&group=billing&key=charge:order-7&tenant_id=acme", "", []),
    ("POST", "/v1/dlq/redrive", '{"topic":"orders","max_messages":100}', []),
    ("GET", "/metrics", "", []),
    ("POST", "/v1/topics", '{"name":"charges","ordering":"key"}', []),
    ("POST", "/v1/ack",
     '{"topic":"orders","group":"billing","owner":"worker-1","partition":0,"offset":0,'
     '"result":{"charge_id":"ch_123"},"produce":[{"topic":"charges","key":"customer-42",'
     '"value":"{\\"order\\":7}","envelope":{"idempotency_key":"charge:order-7"}},'
     '{"topic":"receipts","value":"r","envelope":{"delay_ms":60000}}]}', []),
    ("POST", "/v1/ack",
     '{"topic":"orders","group":"billing","owner":"worker-1","acks":[{"partition":0,"offset":2,'
     '"produce":[{"topic":"charges","value":"c-b"}]},{"partition":0,"offset":3}]}', []),
    ("POST", "/v1/internal/outbox_append",
     '{"source":1,"entries":[{"seq":1,"created_at_ms":0,"topic":"orders","value":"h1"}]}',
     [("X-Onceq-Forwarded", "n1")]),
]


def http(method, target, body, headers, keep_alive=True):
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost:8080"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


def producer_consumer_session():
    """One connection doing the whole lifecycle, as a user would."""
    steps = [
        ("POST", "/v1/topics", '{"name":"orders","partitions":1,"max_attempts":2}', []),
        ("POST", "/v1/produce",
         '{"topic":"orders","value":"v","envelope":{"idempotency_key":"k1"}}', []),
        ("POST", "/v1/consume",
         '{"topic":"orders","group":"g","owner":"w","max_messages":5}', []),
        ("POST", "/v1/ack",
         '{"topic":"orders","group":"g","owner":"w","partition":0,"offset":0,'
         '"result":{"ok":1}}', []),
        ("GET", "/v1/keys?topic=orders&group=g&key=k1", "", []),
        ("GET", "/v1/topics/orders", "", []),
    ]
    return b"".join(http(*s) for s in steps)


def nack_to_dlq_session():
    steps = [
        ("POST", "/v1/topics", '{"name":"t","max_attempts":1}', []),
        ("POST", "/v1/produce", '{"topic":"t","value":"a"}', []),
        ("POST", "/v1/consume", '{"topic":"t","group":"g","owner":"w","max_messages":1}', []),
        ("POST", "/v1/nack",
         '{"topic":"t","group":"g","owner":"w","partition":0,"offset":0,"reason":"no"}', []),
        ("POST", "/v1/dlq/redrive", '{"topic":"t","max_messages":10}', []),
        ("GET", "/v1/consume?topic=t&group=g&owner=w", "", []),
    ]
    return b"".join(http(*s) for s in steps)


def steps_session():
    """A workflow step: an ordered topic, an ack that produces into it."""
    steps = [
        ("POST", "/v1/topics", '{"name":"orders","partitions":1}', []),
        ("POST", "/v1/topics", '{"name":"charges","ordering":"key"}', []),
        ("POST", "/v1/produce",
         '{"topic":"orders","value":"v","envelope":{"idempotency_key":"k1"}}', []),
        ("POST", "/v1/consume",
         '{"topic":"orders","group":"g","owner":"w","max_messages":5}', []),
        ("POST", "/v1/ack",
         '{"topic":"orders","group":"g","owner":"w","partition":0,"offset":0,'
         '"produce":[{"topic":"charges","key":"c","value":"x"},{"topic":"charges","key":"c",'
         '"value":"y"}]}', []),
        ("POST", "/v1/consume",
         '{"topic":"charges","group":"g","owner":"w","max_messages":5}', []),
        ("GET", "/v1/keys/history?topic=orders&group=g&key=k1", "", []),
    ]
    return b"".join(http(*s) for s in steps)


def chunked_produce():
    body = b'{"topic":"orders","value":"x"}'
    return (b"POST /v1/produce HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % 10 + body[:10] + b"\r\n"
            + b"%x\r\n" % (len(body) - 10) + body[10:] + b"\r\n0\r\n\r\n")


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"seed-{name}"), "wb") as f:
        f.write(data)


def main():
    for i, (m, t, b, h) in enumerate(REQUESTS):
        write("request_fuzz", f"api-{i:02d}", http(m, t, b, h))
        # codec_fuzz: the body, or (NUL-separated) an empty body and the query.
        if b:
            write("codec_fuzz", f"api-{i:02d}", b.encode())
        elif "?" in t:
            write("codec_fuzz", f"api-{i:02d}", b"\0" + t.split("?", 1)[1].encode())
    write("request_fuzz", "session-lifecycle", producer_consumer_session())
    write("request_fuzz", "session-dlq", nack_to_dlq_session())
    write("request_fuzz", "session-steps", steps_session())
    write("request_fuzz", "chunked-produce", chunked_produce())
    write("request_fuzz", "http10-close",
          b"GET /v1/healthz HTTP/1.0\r\n\r\nGET /v1/version HTTP/1.1\r\n\r\n")
    write("request_fuzz", "request-id",
          http("GET", "/v1/topics", "", [("X-Request-Id", "abc-123")], keep_alive=False))
    write("request_fuzz", "expect-continue",
          http("POST", "/v1/produce", '{"topic":"t","value":"v"}', [("Expect", "100-continue")]))
    write("request_fuzz", "method-not-allowed", http("PUT", "/v1/topics/orders", "", []))
    write("request_fuzz", "query-produce",
          http("POST", "/v1/produce?topic=orders&value=a%20b+c", "", []))
    write("codec_fuzz", "json-escapes",
          b'{"topic":"t","value":"\\u00e9\\ud83d\\ude00\\n\\"","key":"\\/"}')
    write("codec_fuzz", "json-numbers",
          b'{"topic":"t","partitions":-0,"lease_ms":1e3,"max_attempts":9223372036854775808}')
    write("codec_fuzz", "json-nested", b'{"a":[[[[{"b":[true,false,null,1.5e-3]}]]]]}')
    write("codec_fuzz", "json-bom-ws", b'\xef\xbb\xbf \t\n{"topic" : "t" , "value":""}\r\n')
    write("codec_fuzz", "query-escapes", b"\0topic=a%2Fb&group=%E2%82%AC&owner=x+y&wait_ms=10")
    write("codec_fuzz", "produce-batch-envelope",
          b'{"topic":"t","messages":[{"value":"a","envelope":{"msg_id":"m1","delay_ms":5,'
          b'"retry_policy":{"max_attempts":3,"backoff_ms":10,"max_backoff_ms":100},'
          b'"key_ttl_ms":1000,"headers":{"h":"v"}}}]}')


if __name__ == "__main__":
    main()
