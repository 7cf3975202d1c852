"""``onceq.Client``: every endpoint of docs/API.md as a method."""

from __future__ import annotations

import json
import random
import ssl
import time
import uuid
from typing import Any, Iterable, Iterator, Optional, Sequence, Union
from urllib.parse import quote, urlencode

from . import __version__
from ._http import Response, Transport
from .errors import OnceqError, TransportError, Unavailable, make_error
from .types import (
    UNSET,
    AckItem,
    AckResult,
    ConsumeResult,
    Delivery,
    Health,
    KeyEvent,
    KeyState,
    Message,
    ProduceResult,
    Produced,
    StepMessage,
    TopicCreated,
    TopicInfo,
    Version,
    value_text as _value_text,
)

_JSON = {"Content-Type": "application/json"}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """A client of one onceqd server.

    ``Client("http://127.0.0.1:8080", token=None)``; ``https://`` URLs use
    TLS (``ca_file=`` for a private CA, or a full ``ssl_context=``).

    Thread safety: one Client may be shared by any number of threads; it
    keeps a pool of up to ``pool_size`` kept-alive connections.

    Retries: 429 and 503 answers are retried up to ``retries`` times after
    the server's ``Retry-After`` (at most ``max_retry_wait`` seconds each);
    so are network errors, except on a produce sent with ``dedup=False``
    (without a dedup id, a retried produce could be stored twice). Every
    other error is raised at once as its :mod:`onceq.errors` class.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        retries: int = 3,
        max_retry_wait: float = 5.0,
        pool_size: int = 8,
        ca_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        if ssl_context is None and ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=ca_file)
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self._transport = Transport(url, pool_size=pool_size, ssl_context=ssl_context)
        self._headers = {"User-Agent": f"onceq-python/{__version__}"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        """Closes the idle connections (the client stays usable)."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[dict[str, Any]] = None,
        body: Any = UNSET,
        headers: Optional[dict[str, str]] = None,
        wait_ms: int = 0,
        retry_network: bool = True,
        retry: bool = True,
    ) -> Response:
        if query:
            path = path + "?" + urlencode(_drop_none(query))
        data = None if body is UNSET else _dumps(body)
        hdrs = dict(self._headers)
        if data is not None:
            hdrs.update(_JSON)
        if headers:
            hdrs.update(headers)
        timeout = self.timeout + wait_ms / 1000.0
        attempt = 0
        while True:
            try:
                resp = self._transport.request(
                    method, path, body=data, headers=hdrs, timeout=timeout, retry_stale=retry and retry_network
                )
            except TransportError:
                if not (retry and retry_network) or attempt >= self.retries:
                    raise
                time.sleep(self._backoff(attempt))
                attempt += 1
                continue
            if resp.status < 300:
                return resp
            err = self._error(resp)
            if retry and isinstance(err, Unavailable) and attempt < self.retries:
                time.sleep(min(max(err.retry_after, self._backoff(attempt)), self.max_retry_wait))
                attempt += 1
                continue
            raise err

    @staticmethod
    def _backoff(attempt: int) -> float:
        return min(0.05 * (2**attempt), 2.0) * (0.5 + random.random() / 2)

    @staticmethod
    def _error(resp: Response) -> OnceqError:
        code, message, retry_after = "", "", None
        try:
            doc = json.loads(resp.body or b"{}")
            if isinstance(doc, dict):
                code = str(doc.get("error", ""))
                message = str(doc.get("message", ""))
                if isinstance(doc.get("retry_after_ms"), int):
                    retry_after = doc["retry_after_ms"] / 1000.0
        except ValueError:
            message = resp.body.decode(errors="replace")[:200]
        if retry_after is None and resp.headers.get("Retry-After", "").isdigit():
            retry_after = float(resp.headers["Retry-After"])
        return make_error(
            resp.status,
            code,
            message or f"HTTP {resp.status}",
            request_id=resp.headers.get("X-Request-Id"),
            retry_after=retry_after,
        )

    @staticmethod
    def _json(resp: Response) -> Any:
        return json.loads(resp.body) if resp.body else None

    # -- health ------------------------------------------------------------

    def healthz(self) -> Health:
        """``GET /v1/healthz``: never raises for a 503 (``ok`` is False)."""
        resp = self._transport.request(
            "GET", "/v1/healthz", body=None, headers=dict(self._headers), timeout=self.timeout
        )
        doc = self._json(resp) or {}
        return Health(resp.status == 200, doc.get("status", ""), doc.get("reason", ""))

    def version(self) -> Version:
        d = self._json(self._request("GET", "/v1/version"))
        return Version(d.get("version", ""), d.get("commit", ""), bool(d.get("wal_enabled", False)))

    def openapi(self) -> dict:
        """The server's OpenAPI 3.1 document."""
        return self._json(self._request("GET", "/v1/openapi.json"))

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text format."""
        return self._request("GET", "/metrics").body.decode()

    # -- topics ------------------------------------------------------------

    def create_topic(self, name: str, *, partitions: Optional[int] = None, **settings: Any) -> TopicCreated:
        """``POST /v1/topics``. ``settings`` are the topic fields of
        docs/API.md (``lease_ms=``, ``max_attempts=``, ``backoff_ms=``,
        ``key_ttl_ms=``, ``dedup_window_ms=``, ``key_history=``,
        ``ordering="key"``, ...); only those given are sent.
        ``ordering="key"``: within a group, at most one message per ``key``
        is leased at a time, in offset order (default ``"none"``). Creating it again with the same settings
        succeeds; with others raises :class:`~onceq.errors.Conflict`."""
        body = _drop_none({"name": name, "partitions": partitions, **settings})
        d = self._json(self._request("POST", "/v1/topics", body=body))
        return TopicCreated(d["name"], int(d["partitions"]), d.get("status", "created"))

    def list_topics(self) -> list[str]:
        return list(self._json(self._request("GET", "/v1/topics"))["topics"])

    def get_topic(self, name: str) -> TopicInfo:
        """Settings and per-group counters; NotFound for an unknown topic."""
        return TopicInfo.from_json(self._json(self._request("GET", "/v1/topics/" + quote(name, safe=""))))

    def delete_topic(self, name: str) -> None:
        self._request("DELETE", "/v1/topics/" + quote(name, safe=""))

    # -- produce -----------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Any,
        *,
        key: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        skip_if_committed: Optional[Sequence[str]] = None,
        msg_id: Optional[str] = None,
        dedup: bool = True,
        tenant_id: Optional[str] = None,
        partition: Optional[int] = None,
        delay_ms: Optional[int] = None,
        key_ttl_ms: Optional[int] = None,
        headers: Optional[dict[str, str]] = None,
        envelope: Optional[dict[str, Any]] = None,
    ) -> ProduceResult:
        """``POST /v1/produce`` of one message.

        ``value``: a ``str`` is sent as is, anything else as its JSON text.
        The call gets a dedup id (``msg_id``, a random UUID unless given)
        once and sends the same one on every retry after a network error or
        a 503, so a retried produce is stored once (within the topic's
        ``dedup_window_ms``). ``dedup=False`` sends none and does not retry
        network errors.

        ``skip_if_committed=["billing"]``: if ``idempotency_key`` is already
        committed in every listed group, nothing is stored and the result's
        ``already_committed`` is True, with each group's commit (and its
        ``result``) in ``committed``.

        ``envelope`` holds any other envelope field (``run_id``,
        ``step_id``, ``retry_policy``, ``deadline``, ...).
        """
        env = dict(envelope or {})
        env.update(
            _drop_none(
                {
                    "idempotency_key": idempotency_key,
                    "tenant_id": tenant_id,
                    "partition_override": partition,
                    "delay_ms": delay_ms,
                    "key_ttl_ms": key_ttl_ms,
                    "headers": headers,
                }
            )
        )
        if dedup:
            msg_id = msg_id or env.get("msg_id") or str(uuid.uuid4())
            env["msg_id"] = msg_id
        else:
            msg_id = env.get("msg_id")
        body: dict[str, Any] = {"topic": topic, "value": _value_text(value)}
        if key is not None:
            body["key"] = key
        if env:
            body["envelope"] = env
        if skip_if_committed:
            body["skip_if_committed"] = list(skip_if_committed)
        resp = self._request("POST", "/v1/produce", body=body, retry_network=msg_id is not None)
        return ProduceResult.from_json(self._json(resp), topic, msg_id)

    def produce_batch(
        self,
        topic: str,
        messages: Iterable[Union[Message, dict, str]],
        *,
        skip_if_committed: Optional[Sequence[str]] = None,
        dedup: bool = True,
    ) -> list[ProduceResult]:
        """``POST /v1/produce`` of 1..1000 messages, stored atomically (all
        or none). Each message gets its own ``msg_id`` (kept on retries)
        unless ``dedup=False``. A ``dict`` message is sent as given (its
        ``envelope.msg_id`` is added); a ``str`` is a value."""
        items: list[dict[str, Any]] = []
        ids: list[Optional[str]] = []
        for m in messages:
            if isinstance(m, str):
                m = Message(m)
            if isinstance(m, Message):
                env = dict(m.envelope or {})
                if m.idempotency_key is not None:
                    env["idempotency_key"] = m.idempotency_key
                if m.msg_id is not None:
                    env["msg_id"] = m.msg_id
                item: dict[str, Any] = {"value": _value_text(m.value)}
                if m.key is not None:
                    item["key"] = m.key
            else:
                item = dict(m)
                env = dict(item.pop("envelope", None) or {})
                item["value"] = _value_text(item["value"])
            if dedup and "msg_id" not in env:
                env["msg_id"] = str(uuid.uuid4())
            if env:
                item["envelope"] = env
            ids.append(env.get("msg_id"))
            items.append(item)
        body: dict[str, Any] = {"topic": topic, "messages": items}
        if skip_if_committed:
            body["skip_if_committed"] = list(skip_if_committed)
        d = self._json(self._request("POST", "/v1/produce", body=body, retry_network=all(ids)))
        return [ProduceResult.from_json(r, d.get("topic", topic), i) for r, i in zip(d["results"], ids)]

    # -- consume -----------------------------------------------------------

    def consume(
        self,
        topic: str,
        group: str,
        owner: str,
        *,
        max_messages: int = 1,
        wait_ms: int = 0,
        lease_ms: Optional[int] = None,
        deadline_ms: Optional[int] = None,
        acks: Optional[Sequence[AckItem]] = None,
    ) -> ConsumeResult:
        """``POST /v1/consume`` as a long-poll batch: up to ``max_messages``
        deliveries, waiting up to ``wait_ms`` for the first one.

        ``acks`` (the previous batch's :class:`AckItem`\\ s) are applied
        first, as :meth:`ack_batch` would, in the same round trip; their
        results come back in ``ConsumeResult.acks``. They cannot carry
        ``produce`` (ValueError): ack those with :meth:`ack` or
        :meth:`ack_batch`."""
        if acks and any(a.produce is not None for a in acks):
            raise ValueError("onceq: acks carried on a consume cannot produce; send them with ack() or ack_batch()")
        body = _drop_none(
            {
                "topic": topic,
                "group": group,
                "owner": owner,
                "max_messages": max_messages,
                "wait_ms": wait_ms,
                "lease_ms": lease_ms,
                "deadline_ms": deadline_ms,
            }
        )
        if acks:
            body["acks"] = [a.to_json() for a in acks]
        resp = self._request("POST", "/v1/consume", body=body, wait_ms=wait_ms)
        messages: list[Delivery] = []
        ack_results: list[AckResult] = []
        for line in resp.body.splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            if "acks" in d and "offset" not in d:
                ack_results = [AckResult.from_json(a) for a in d["acks"]]
            else:
                messages.append(Delivery.from_json(d))
        return ConsumeResult(messages, ack_results)

    def stream(
        self, topic: str, group: str, owner: str, *, lease_ms: Optional[int] = None
    ) -> Iterator[Delivery]:
        """``GET /v1/consume`` in stream mode (DriftQ's): yields deliveries as
        they come, until the generator is closed (``break`` out of the loop,
        or ``.close()``). Each one must still be acked, nacked or extended.
        No retries: an error or a dropped connection ends the stream."""
        path = "/v1/consume?" + urlencode(_drop_none({"topic": topic, "group": group, "owner": owner, "lease_ms": lease_ms}))
        conn, resp = self._transport.open_stream("GET", path, headers=dict(self._headers), timeout=None)
        try:
            if resp.status >= 300:
                raise self._error(Response(resp.status, resp.headers, resp.read()))
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield Delivery.from_json(json.loads(line))
        finally:
            conn.close()

    # -- ack / nack / extend -------------------------------------------------

    def ack(
        self,
        topic: str,
        group: str,
        owner: str,
        *,
        partition: int,
        offset: int,
        attempts: Optional[int] = None,
        fencing_token: Optional[int] = None,
        result: Any = UNSET,
        produce: Optional[Sequence[StepMessage]] = None,
    ) -> list[Produced]:
        """``POST /v1/ack``: marks the delivery done and, if the message has
        an idempotency key, commits it with ``result`` (any JSON). Raises
        :class:`~onceq.errors.Fenced` if you no longer hold the delivery (or
        the ``attempts``/``fencing_token`` fence does not match).

        ``produce``: messages (:class:`Message` with ``topic=``, or dicts
        shaped like a produce body; at most 1000) stored in the same atomic
        step as the ack: both or neither. Returns where each went, in
        order (:class:`Produced`; ``pending`` ones are delivered later by the
        broker's outbox); ``[]`` without ``produce``, and for a repeated ack
        whose message had no idempotency key. A refused ack stores none of
        them: :class:`~onceq.errors.Fenced` (409), ``InvalidArgument`` (a bad
        message), ``NotFound`` (unknown target topic), ``Forbidden``,
        ``ResourceExhausted`` (a target's backlog)."""
        item = AckItem(partition, offset, attempts, fencing_token, result, produce)
        resp = self._request("POST", "/v1/ack", body={"topic": topic, "group": group, "owner": owner, **item.to_json()})
        doc = self._json(resp) if resp.status != 204 else None
        if not isinstance(doc, dict):
            return []
        return [Produced.from_json(p) for p in doc.get("produced") or []]

    def ack_batch(self, topic: str, group: str, owner: str, acks: Sequence[AckItem]) -> list[AckResult]:
        """``POST /v1/ack`` with ``acks``: each item acked on its own; a
        refused item has ``status == "error"`` and its code in ``error``.
        An item's ``produce`` is stored with its ack, atomically; its
        result's ``produced`` says where."""
        body = {"topic": topic, "group": group, "owner": owner, "acks": [a.to_json() for a in acks]}
        return [AckResult.from_json(r) for r in self._json(self._request("POST", "/v1/ack", body=body))["results"]]

    def nack(
        self,
        topic: str,
        group: str,
        owner: str,
        *,
        partition: int,
        offset: int,
        attempts: Optional[int] = None,
        fencing_token: Optional[int] = None,
        reason: Optional[str] = None,
        delay_ms: Optional[int] = None,
    ) -> None:
        """``POST /v1/nack``: gives the delivery back for a retry after
        ``delay_ms`` (default: the topic's backoff); ``reason`` becomes the
        message's ``last_error``."""
        body = _drop_none(
            {
                "topic": topic,
                "group": group,
                "owner": owner,
                "partition": partition,
                "offset": offset,
                "attempts": attempts,
                "fencing_token": fencing_token,
                "reason": reason,
                "delay_ms": delay_ms,
            }
        )
        self._request("POST", "/v1/nack", body=body)

    def extend(
        self,
        topic: str,
        group: str,
        owner: str,
        *,
        partition: int,
        offset: int,
        lease_ms: int,
        attempts: Optional[int] = None,
        fencing_token: Optional[int] = None,
    ) -> int:
        """``POST /v1/extend``: the lease now ends ``lease_ms`` from now;
        returns the new ``lease_expires_at_ms``. Raises
        :class:`~onceq.errors.Fenced` if you no longer hold it: stop."""
        body = _drop_none(
            {
                "topic": topic,
                "group": group,
                "owner": owner,
                "partition": partition,
                "offset": offset,
                "lease_ms": lease_ms,
                "attempts": attempts,
                "fencing_token": fencing_token,
            }
        )
        return int(self._json(self._request("POST", "/v1/extend", body=body))["lease_expires_at_ms"])

    # -- keys, DLQ -----------------------------------------------------------

    def get_key(
        self,
        topic: str,
        group: str,
        key: str,
        *,
        tenant_id: Optional[str] = None,
        wait_ms: Optional[int] = None,
    ) -> KeyState:
        """``GET /v1/keys``: the key's state in ``group``; with ``wait_ms``,
        waits up to that long for it to be committed."""
        q = {"topic": topic, "group": group, "key": key, "tenant_id": tenant_id, "wait_ms": wait_ms}
        resp = self._request("GET", "/v1/keys", query=q, wait_ms=wait_ms or 0)
        return KeyState.from_json(self._json(resp))

    def key_history(self, topic: str, group: str, key: str, *, tenant_id: Optional[str] = None) -> list[KeyEvent]:
        """``GET /v1/keys/history`` (topics with ``key_history=True``)."""
        q = {"topic": topic, "group": group, "key": key, "tenant_id": tenant_id}
        return [KeyEvent.from_json(e) for e in self._json(self._request("GET", "/v1/keys/history", query=q))["events"]]

    def redrive(self, topic: str, *, max_messages: Optional[int] = None) -> int:
        """``POST /v1/dlq/redrive``: moves dead-lettered messages of
        ``dlq.<topic>`` back; returns how many moved."""
        body = _drop_none({"topic": topic, "max_messages": max_messages})
        return int(self._json(self._request("POST", "/v1/dlq/redrive", body=body))["moved"])
