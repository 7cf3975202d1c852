"""Typed results of the onceq client (one dataclass per answer shape of
docs/API.md). Fields the server may add later are ignored, so a newer
server does not break an older client."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union


__all__ = [
    "UNSET", "AckItem", "AckResult", "Commit", "ConsumeResult", "Delivery", "GroupCounters", "Health",
    "KeyEvent", "KeyState", "Message", "ProduceResult", "Produced", "TopicCreated", "TopicInfo", "Version",
]


class _Unset:
    """Marks an argument that was not given (``None`` is a valid ack result)."""

    _instance: "Optional[_Unset]" = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


def value_text(value: Any) -> str:
    """A message value as the API takes it: a ``str`` as is, ``bytes`` decoded,
    anything else as its JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Health:
    """``GET /v1/healthz``: ``ok`` is True on 200; on 503 ``reason`` says why."""

    ok: bool
    status: str
    reason: str = ""


@dataclass(frozen=True)
class Version:
    version: str
    commit: str
    wal_enabled: bool


@dataclass(frozen=True)
class TopicCreated:
    name: str
    partitions: int
    status: str


@dataclass(frozen=True)
class GroupCounters:
    backlog: int = 0
    inflight: int = 0
    acked: int = 0
    auto_acked: int = 0
    redelivered: int = 0
    dead_lettered: int = 0
    superseded: int = 0

    @classmethod
    def from_json(cls, d: dict) -> "GroupCounters":
        return cls(**{k: int(d.get(k, 0)) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TopicInfo:
    """``GET /v1/topics/{name}``: ``settings`` as the server reports them
    (``lease_ms``, ``max_attempts``, ...), counters per group."""

    name: str
    partitions: int
    settings: dict[str, Any]
    groups: dict[str, GroupCounters]

    @classmethod
    def from_json(cls, d: dict) -> "TopicInfo":
        return cls(
            name=d["name"],
            partitions=int(d["partitions"]),
            settings=dict(d.get("settings", {})),
            groups={g: GroupCounters.from_json(c) for g, c in d.get("groups", {}).items()},
        )


@dataclass(frozen=True)
class Commit:
    """One group's commit of an idempotency key (``skip_if_committed``)."""

    committed_at_ms: int
    owner: str
    result: Any = None


@dataclass(frozen=True)
class ProduceResult:
    """The answer to one produced message.

    ``status`` is ``"produced"`` (``partition``/``offset`` set,
    ``duplicate`` True when the dedup window answered an earlier copy) or
    ``"already_committed"`` (nothing stored; ``committed`` holds each
    ``skip_if_committed`` group's commit, with its ``result``).
    ``msg_id`` is the dedup id the client sent, reused on every retry.
    """

    status: str
    topic: str
    partition: Optional[int] = None
    offset: Optional[int] = None
    duplicate: bool = False
    committed: dict[str, Commit] = field(default_factory=dict)
    msg_id: Optional[str] = None

    @property
    def already_committed(self) -> bool:
        return self.status == "already_committed"

    @classmethod
    def from_json(cls, d: dict, topic: str, msg_id: Optional[str]) -> "ProduceResult":
        committed = {
            g: Commit(int(c.get("committed_at_ms", 0)), c.get("owner", ""), c.get("result"))
            for g, c in d.get("committed", {}).items()
        }
        return cls(
            status=d.get("status", "produced"),
            topic=d.get("topic", topic),
            partition=d.get("partition"),
            offset=d.get("offset"),
            duplicate=bool(d.get("duplicate", False)),
            committed=committed,
            msg_id=msg_id,
        )


@dataclass(frozen=True)
class Message:
    """A message for :meth:`Client.produce_batch`, or one that an ack
    produces (a workflow step's next message: ``AckItem.produce``,
    :meth:`Client.ack`'s ``produce=``, :class:`onceq.Complete`,
    :meth:`onceq.Job.produce`), which needs its ``topic``:

        onceq.Message(topic="charges", value={"order_id": 7}, idempotency_key="charge:7")

    ``value`` that is not a ``str`` is sent as its JSON text; ``envelope`` is
    any other envelope fields (``tenant_id``, ``delay_ms``, ``headers``, ...).
    ``produce_batch`` ignores ``topic`` (its messages go to its own topic)."""

    value: Any
    key: Optional[str] = None
    idempotency_key: Optional[str] = None
    msg_id: Optional[str] = None
    envelope: Optional[dict[str, Any]] = None
    topic: Optional[str] = None


StepMessage = Union[Message, dict]
"""A message an ack produces: a :class:`Message` with its ``topic``, or a
dict shaped like a single ``POST /v1/produce`` body (``topic``, ``key``,
``value``, ``envelope``), sent as given (a ``value`` that is not a ``str``
becomes its JSON text)."""


def step_message_json(m: StepMessage) -> dict[str, Any]:
    """The wire form of one message of an ack's ``produce`` list."""
    if isinstance(m, Message):
        if not m.topic:
            raise ValueError("onceq: a message an ack produces needs its topic: Message(topic=..., value=...)")
        env = dict(m.envelope or {})
        if m.idempotency_key is not None:
            env["idempotency_key"] = m.idempotency_key
        if m.msg_id is not None:
            env["msg_id"] = m.msg_id
        out: dict[str, Any] = {"topic": m.topic, "value": value_text(m.value)}
        if m.key is not None:
            out["key"] = m.key
        if env:
            out["envelope"] = env
        return out
    if isinstance(m, dict):
        if not m.get("topic") or "value" not in m:
            raise ValueError(f"onceq: a message an ack produces needs 'topic' and 'value': {m!r:.200}")
        return {**m, "value": value_text(m["value"])}
    raise TypeError(f"onceq: a message an ack produces is a Message or a dict, not {type(m).__name__}")


@dataclass(frozen=True)
class Delivery:
    """One consumed message, every field of docs/API.md's consume answer."""

    topic: str
    partition: int
    offset: int
    attempts: int
    key: str
    value: str
    last_error: str
    envelope: dict[str, Any]
    lease_expires_at_ms: int
    fencing_token: int

    @property
    def idempotency_key(self) -> Optional[str]:
        return self.envelope.get("idempotency_key")

    def json(self) -> Any:
        """The value parsed as JSON."""
        return json.loads(self.value)

    @classmethod
    def from_json(cls, d: dict) -> "Delivery":
        return cls(
            topic=d["topic"],
            partition=int(d["partition"]),
            offset=int(d["offset"]),
            attempts=int(d["attempts"]),
            key=d.get("key", ""),
            value=d.get("value", ""),
            last_error=d.get("last_error", ""),
            envelope=d.get("envelope") or {},
            lease_expires_at_ms=int(d.get("lease_expires_at_ms", 0)),
            fencing_token=int(d.get("fencing_token", 0)),
        )


@dataclass(frozen=True)
class AckItem:
    """One item of a batch ack or of the acks carried on a consume.
    ``result`` is left out of the request when UNSET.

    ``produce``: the messages this ack stores in the same atomic step (a
    workflow step's next messages; docs/CLIENTS.md, "Workflow steps"); left
    out when None. Only :meth:`Client.ack` and :meth:`Client.ack_batch`
    take it: the acks carried on a consume do not."""

    partition: int
    offset: int
    attempts: Optional[int] = None
    fencing_token: Optional[int] = None
    result: Any = UNSET
    produce: Optional[Sequence[StepMessage]] = None

    @classmethod
    def of(cls, d: Delivery, result: Any = UNSET, produce: Optional[Sequence[StepMessage]] = None) -> "AckItem":
        """Acks delivery ``d``, fenced on its attempt and token."""
        return cls(d.partition, d.offset, d.attempts, d.fencing_token, result, produce)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"partition": self.partition, "offset": self.offset}
        if self.attempts is not None:
            out["attempts"] = self.attempts
        if self.fencing_token is not None:
            out["fencing_token"] = self.fencing_token
        if self.result is not UNSET:
            out["result"] = self.result
        if self.produce is not None:
            out["produce"] = [step_message_json(m) for m in self.produce]
        return out


@dataclass(frozen=True)
class Produced:
    """Where one message an ack produced went, in the ack's ``produce``
    order. ``status`` is ``"produced"`` (``partition``/``offset`` set;
    ``duplicate`` when the target topic's dedup window answered an earlier
    copy) or ``"pending"``: its target shard could not take it yet and the
    broker's outbox delivers it later (no position yet). Either way it is
    stored: the ack and its messages are one step."""

    topic: str
    status: str = "produced"
    partition: Optional[int] = None
    offset: Optional[int] = None
    duplicate: bool = False

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @classmethod
    def from_json(cls, d: dict) -> "Produced":
        return cls(
            topic=d.get("topic", ""),
            # A stored message's answer has no status of its own (or another
            # word for it, such as "stored"): "produced".
            status="pending" if d.get("status") == "pending" else "produced",
            partition=d.get("partition"),
            offset=d.get("offset"),
            duplicate=bool(d.get("duplicate", False)),
        )


@dataclass(frozen=True)
class AckResult:
    """One item's outcome: ``status`` ``"acked"`` or ``"error"`` with the
    error code in ``error`` (``"FAILED_PRECONDITION"``: refused, stale).
    ``produced``: where the item's ``produce`` messages went (``[]`` if it
    carried none, or repeats an ack whose message had no idempotency key)."""

    partition: int
    offset: int
    status: str
    error: str = ""
    produced: list[Produced] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "acked"

    @classmethod
    def from_json(cls, d: dict) -> "AckResult":
        produced = [Produced.from_json(p) for p in d.get("produced") or []]
        return cls(int(d["partition"]), int(d["offset"]), d["status"], d.get("error", ""), produced)


@dataclass(frozen=True)
class ConsumeResult:
    """A long-poll batch: ``messages`` in order, and the results of the acks
    carried on the request (``[]`` when none were)."""

    messages: list[Delivery]
    acks: list[AckResult] = field(default_factory=list)

    def __iter__(self):
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


@dataclass(frozen=True)
class KeyState:
    """``GET /v1/keys``: ``state`` is ``none``, ``leased``, ``committed`` or
    ``failed``; the other fields are set as they apply to the state."""

    state: str
    owner: Optional[str] = None
    partition: Optional[int] = None
    offset: Optional[int] = None
    attempts: Optional[int] = None
    fencing_token: Optional[int] = None
    lease_expires_at_ms: Optional[int] = None
    committed_at_ms: Optional[int] = None
    expires_at_ms: Optional[int] = None
    result: Any = None

    @property
    def committed(self) -> bool:
        return self.state == "committed"

    @classmethod
    def from_json(cls, d: dict) -> "KeyState":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k != "state"}, state=d["state"])


@dataclass(frozen=True)
class KeyEvent:
    """One event of ``GET /v1/keys/history``."""

    event: str
    at_ms: int
    owner: Optional[str] = None
    partition: Optional[int] = None
    offset: Optional[int] = None
    attempts: Optional[int] = None
    fencing_token: Optional[int] = None
    reason: Optional[str] = None
    result_bytes: Optional[int] = None

    @classmethod
    def from_json(cls, d: dict) -> "KeyEvent":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})
