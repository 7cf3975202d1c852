"""``onceq.Worker``: consume, run a handler, ack with its result.

Semantics (docs/CLIENTS.md, "The worker"):

- One poller (the thread that calls :meth:`Worker.run`) long-polls
  ``POST /v1/consume`` for as many messages as it has free handler slots
  (``concurrency``), carrying the acks of the handlers that finished since
  the last poll. A handler that finishes while the poller is inside a long
  poll acks at once with ``POST /v1/ack`` instead, so no ack waits.
- While a handler runs, its lease is extended every third of the lease,
  fenced on the delivery's token. An extend answered ``409`` means another
  consumer has the message now: ``job.lease_lost`` becomes True.
- The handler's return value is acked as the committed ``result`` (any
  JSON; ``None`` commits none). An exception nacks with its message as the
  ``reason`` and the topic's backoff; ``Retry(delay_ms)`` nacks with that
  delay; ``Fail(reason)`` gives up for good: the delivery is acked with
  ``{"failed": reason}`` as the result, so the key is committed and the
  work is not retried.
- Every ack, nack and extend carries the delivery's ``fencing_token``; an
  ack refused because another delivery took over is *reported* (a
  ``WARNING`` log line, ``stats.stale``, ``on_stale(job, error)``), never
  retried.
- Workflow steps: a handler returns ``Complete(result, produce=[...])``
  and/or stages messages with :meth:`Job.produce` while it runs; the ack
  of that job stores them with it, atomically, on its own ``POST /v1/ack``
  (acks carried on a consume cannot produce; jobs without messages keep
  the path above). A refused ack stores none of them, and they are never
  sent again on their own: a ``409`` is reported as stale (above); a
  refusal of the messages themselves (``400``/``403``/``404``/``413``,
  a ``429`` past the retries) nacks the job with it as the reason. A nack,
  ``Retry`` or ``Fail`` sends none of them.
- :meth:`Worker.stop`, ``SIGTERM`` or ``SIGINT`` stop taking work: the
  poll in flight ends (at most ``wait_ms``) and what it brought is
  released at once; running handlers get ``drain_timeout`` seconds to
  finish and ack; those still running then are released (nacked without
  delay) and their late results dropped. Then :meth:`run` returns.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

from .client import Client
from .errors import (
    Fenced,
    Forbidden,
    InvalidArgument,
    NotFound,
    OnceqError,
    PayloadTooLarge,
    ResourceExhausted,
    Unauthorized,
)
from .types import UNSET, AckItem, Delivery, Message, StepMessage, step_message_json

log = logging.getLogger("onceq.worker")


class Retry(Exception):
    """Raise (or return) from a handler to nack with an explicit delay."""

    def __init__(self, delay_ms: Optional[int] = None, reason: str = "retry") -> None:
        super().__init__(reason)
        self.delay_ms = delay_ms
        self.reason = reason


class Fail(Exception):
    """Raise (or return) from a handler to give up for good: the delivery
    is acked with ``{"failed": reason}`` as its result (the key is committed
    with it) and never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LeaseLost(Exception):
    """Raised by :meth:`Job.check` once another consumer holds the message."""


class Complete:
    """Return from a handler to ack with ``result`` and store ``produce``
    (the workflow's next messages: :class:`~onceq.Message` with ``topic=``,
    or produce-shaped dicts) in the same atomic step::

        return onceq.Complete({"charge_id": cid},
                              produce=[onceq.Message(topic="receipts", value={"charge_id": cid},
                                                     idempotency_key=f"receipt:{order_id}")])

    They are stored with the ack or not at all (a refused ack: none); they
    come after those the handler staged with :meth:`Job.produce`.
    ``result=None`` acks without a result."""

    __slots__ = ("result", "produce")

    def __init__(self, result: Any = None, *, produce: Iterable[StepMessage] = ()) -> None:
        self.result = result
        self.produce = list(produce)

    def __repr__(self) -> str:
        return f"Complete({self.result!r}, produce=<{len(self.produce)} messages>)"


class Job:
    """One delivery handed to a handler.

    ``step_id`` is stable across redeliveries of the same message (the
    envelope's ``step_id``, else ``<topic>/<group>/<partition>/<offset>``):
    use it, or ``idempotency_key``, as the idempotency key of the side
    effects you cause (a payment API's ``Idempotency-Key``). Pass
    ``fencing_token`` to your own database writes (docs/CLIENTS.md).
    """

    def __init__(self, delivery: Delivery, group: str, lease_ms: int) -> None:
        self.delivery = delivery
        self.group = group
        self.lease_ms = lease_ms
        self.lease_expires_at_ms = delivery.lease_expires_at_ms
        self._lease_lost = threading.Event()
        self._stopping = threading.Event()
        self._done = False
        self._released = False
        self._staged: list[StepMessage] = []
        self._staged_lock = threading.Lock()

    # The delivery's fields.
    topic = property(lambda self: self.delivery.topic)
    partition = property(lambda self: self.delivery.partition)
    offset = property(lambda self: self.delivery.offset)
    attempts = property(lambda self: self.delivery.attempts)
    key = property(lambda self: self.delivery.key)
    value = property(lambda self: self.delivery.value)
    envelope = property(lambda self: self.delivery.envelope)
    last_error = property(lambda self: self.delivery.last_error)
    fencing_token = property(lambda self: self.delivery.fencing_token)

    @property
    def idempotency_key(self) -> Optional[str]:
        return self.delivery.envelope.get("idempotency_key")

    @property
    def step_id(self) -> str:
        d = self.delivery
        return d.envelope.get("step_id") or f"{d.topic}/{self.group}/{d.partition}/{d.offset}"

    @property
    def lease_lost(self) -> bool:
        """True once an extend was refused: another consumer holds the
        message (or it was acked). Stop; your ack would be refused."""
        return self._lease_lost.is_set()

    @property
    def stopping(self) -> bool:
        """True once the worker is shutting down (finish soon)."""
        return self._stopping.is_set()

    def check(self) -> None:
        """Raises :class:`LeaseLost` if ``lease_lost``; call it between steps."""
        if self._lease_lost.is_set():
            raise LeaseLost(f"{self.topic}/{self.partition}/{self.offset}: lease lost")

    def wait_lease_lost(self, timeout: Optional[float] = None) -> bool:
        """Sleeps up to ``timeout`` seconds, waking early if the lease is lost."""
        return self._lease_lost.wait(timeout)

    def json(self) -> Any:
        """The value parsed as JSON."""
        return json.loads(self.delivery.value)

    def produce(
        self,
        topic: Union[str, Message, dict],
        value: Any = UNSET,
        *,
        key: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        msg_id: Optional[str] = None,
        envelope: Optional[dict[str, Any]] = None,
    ) -> None:
        """Stages a message to store with this job's ack, in the same atomic
        step: ``job.produce("emails", {"to": ...}, idempotency_key=...)``, or
        ``job.produce(onceq.Message(topic=..., value=...))``. Nothing is
        sent now; the ack sends all the staged messages (then those of a
        returned :class:`Complete`). If the job is nacked, fails, or its ack
        is refused, none of them is stored. Thread-safe."""
        if isinstance(topic, (Message, dict)):
            if value is not UNSET or key or idempotency_key or msg_id or envelope:
                raise TypeError("Job.produce(message) takes no other arguments")
            m: StepMessage = topic
        else:
            if value is UNSET:
                raise TypeError("Job.produce(topic, value): value missing")
            m = Message(value, key=key, idempotency_key=idempotency_key, msg_id=msg_id, envelope=envelope,
                        topic=topic)
        step_message_json(m)  # a bad message fails here, in the handler
        with self._staged_lock:
            self._staged.append(m)

    @property
    def staged(self) -> list[StepMessage]:
        """The messages staged with :meth:`produce` so far (a copy)."""
        with self._staged_lock:
            return list(self._staged)

    def __repr__(self) -> str:
        return (
            f"Job({self.topic}/{self.partition}/{self.offset}, attempts={self.attempts}, "
            f"token={self.fencing_token}, key={self.idempotency_key!r})"
        )


@dataclass
class WorkerStats:
    received: int = 0
    acked: int = 0
    nacked: int = 0
    failed: int = 0
    extended: int = 0
    lease_lost: int = 0
    stale: int = 0
    released: int = 0
    produced: int = 0  # messages stored with acks (Complete / Job.produce)


def default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Runs ``handler(job)`` for each message of ``topic`` in ``group``.

    ``lease_ms``: the lease to ask for (default: the topic's, read with
    ``GET /v1/topics/{topic}`` when the token may, else from the first
    delivery). ``wait_ms``: the long poll (also bounds how long a stop
    waits for the poll in flight). ``drain_timeout``: seconds a stop lets
    running handlers finish. ``auto_extend=False`` lets leases run out
    (the lease is then the handler's time limit).
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        group: str,
        *,
        owner: Optional[str] = None,
        concurrency: int = 1,
        lease_ms: Optional[int] = None,
        wait_ms: int = 5000,
        drain_timeout: float = 30.0,
        auto_extend: bool = True,
        handle_signals: bool = True,
        on_stale: Optional[Callable[[Job, OnceqError], None]] = None,
        handler: Optional[Callable[[Job], Any]] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.client = client
        self.topic = topic
        self.group = group
        self.owner = owner or default_owner()
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.drain_timeout = drain_timeout
        self.auto_extend = auto_extend
        self.handle_signals = handle_signals
        self.on_stale = on_stale
        self.stats = WorkerStats()
        self._fn = handler
        self._cv = threading.Condition()
        self._free = concurrency
        self._inflight: set[Job] = set()
        self._pending: list[tuple[Job, AckItem]] = []
        self._polling = False
        self._poller_done = False
        self._stop = threading.Event()
        self._signalled: Optional[str] = None
        self._signal_count = 0
        self._draining = False
        self._stats_lock = threading.Lock()
        self._started = False
        self._jobs: "queue.Queue[Optional[Job]]" = queue.Queue()
        self._keeper = _LeaseKeeper(self)

    # -- public --------------------------------------------------------------

    def handler(self, fn: Callable[[Job], Any]) -> Callable[[Job], Any]:
        """Decorator: ``@worker.handler`` registers the function to run."""
        self._fn = fn
        return fn

    def stop(self) -> None:
        """Stops taking new work; :meth:`run` drains and returns. Thread-
        and signal-safe; idempotent."""
        self._stop.set()
        # No lock here: stop() may run in a signal handler that interrupted
        # a thread holding it; the poller and drain loop poll the event.

    @property
    def stopping(self) -> bool:
        return self._stopping_now()

    def _stopping_now(self) -> bool:
        if self._signalled and not self._stop.is_set():
            log.info(
                "onceq worker %s: %s: stopping (the poll in flight ends within %d ms, running jobs get %.0f s; "
                "a second signal stops at once)", self.owner, self._signalled, self.wait_ms, self.drain_timeout)
            self._stop.set()
        return self._stop.is_set()

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping_now() and time.monotonic() < deadline:
            self._stop.wait(min(0.2, deadline - time.monotonic()))

    def _count(self, name: str, n: int = 1) -> None:
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def run(self) -> None:
        """Processes messages until :meth:`stop` (or SIGTERM/SIGINT when
        called from the main thread with ``handle_signals``), then drains
        and returns. Raises the error if the server refuses the worker for
        good (unknown topic, bad token)."""
        if self._fn is None:
            raise RuntimeError("no handler: decorate a function with @worker.handler")
        if self._started:
            raise RuntimeError("Worker.run() may be called once")
        self._started = True
        restore = self._install_signals()
        threads = [
            threading.Thread(target=self._handler_loop, name=f"onceq-handler-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        self._keeper.start()
        fatal: Optional[BaseException] = None
        try:
            self._resolve_lease()
            self._poll_loop()
        except BaseException as e:  # noqa: BLE001 - re-raised after the drain
            fatal = e
            self._stop.set()
        finally:
            self._drain()
            self._keeper.stop()
            for _ in threads:
                self._jobs.put(None)
            for sig, old in restore:
                signal.signal(sig, old)
        if fatal is not None:
            raise fatal

    # -- set-up --------------------------------------------------------------

    def _install_signals(self) -> list[tuple[int, Any]]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        restore = []

        def on_signal(signum: int, _frame: Any) -> None:
            # Only plain stores: the interrupted main thread may hold any
            # lock (the Event's included); it notices within 0.2 s, or when
            # the poll in flight returns (at most wait_ms).
            self._signalled = signal.Signals(signum).name
            self._signal_count += 1
            if self._signal_count >= 2 and not self._draining:
                # A second one means "now": break out of the poll in flight
                # (what it leased comes back when the lease ends); the drain
                # then releases the running jobs without waiting.
                raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGINT):
            restore.append((sig, signal.getsignal(sig)))
            signal.signal(sig, on_signal)
        return restore

    def _resolve_lease(self) -> None:
        if self.lease_ms is not None:
            return
        try:
            self.lease_ms = int(self.client.get_topic(self.topic).settings["lease_ms"])
        except (OnceqError, KeyError, ValueError) as e:
            # Without the admin scope the first delivery tells (see _lease_for).
            log.debug("lease_ms from GET /v1/topics failed (%s); estimating it", e)

    def _lease_for(self, d: Delivery, recv_ms: int) -> int:
        if self.lease_ms is not None:
            return self.lease_ms
        # Without the topic's settings: what is left of the lease on arrival
        # (an underestimate, so extends come early rather than late).
        return max(100, d.lease_expires_at_ms - recv_ms)

    # -- the poller ------------------------------------------------------------

    def _poll_loop(self) -> None:
        errors = 0
        while not self._stopping_now():
            with self._cv:
                while self._free == 0 and not self._stopping_now():
                    self._cv.wait(0.2)
                if self._stopping_now():
                    break
                carried, self._pending = self._pending, []
                n = self._free
                self._polling = True
            try:
                batch = self.client.consume(
                    self.topic,
                    self.group,
                    self.owner,
                    max_messages=n,
                    wait_ms=self.wait_ms,
                    lease_ms=self.lease_ms,
                    acks=[item for _, item in carried] or None,
                )
            except (InvalidArgument, Unauthorized, Forbidden, NotFound, KeyboardInterrupt):
                # (The drain sends the carried acks again: an ack repeated
                # by its owner is accepted.)
                with self._cv:
                    self._polling = False
                    self._pending = carried + self._pending
                raise
            except OnceqError as e:
                with self._cv:
                    self._polling = False
                    self._pending = carried + self._pending
                errors += 1
                delay = min(0.1 * 2**errors, 5.0)
                log.warning("onceq worker %s: consume failed (%s); retrying in %.1fs", self.owner, e, delay)
                self._sleep(delay)
                continue
            errors = 0
            # The leases started just before the answer: timing extends from
            # its arrival errs on the early side.
            recv_ms = int(time.time() * 1000)
            recv_at = time.monotonic()
            for (job, _), res in zip(carried, batch.acks):
                self._ack_outcome(job, res.ok, res.error)
            jobs = []
            with self._cv:
                self._polling = False
                for d in batch.messages:
                    job = Job(d, self.group, self._lease_for(d, recv_ms))
                    self._free -= 1
                    self._inflight.add(job)
                    jobs.append(job)
            self._count("received", len(jobs))
            if self._stopping_now():
                for job in jobs:
                    self._release(job, "worker stopping")
                continue
            for job in jobs:
                if self.auto_extend:
                    self._keeper.add(job, recv_at + job.lease_ms / 3000.0)
                self._jobs.put(job)

    # -- handlers ----------------------------------------------------------------

    def _handler_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._run_one(job)

    def _run_one(self, job: Job) -> None:
        try:
            out = self._fn(job)  # type: ignore[misc]
            if isinstance(out, (Retry, Fail)):
                raise out
            produce = job.staged
            if isinstance(out, Complete):
                produce += out.produce
                out = out.result
            result = UNSET if out is None else out
            if result is not UNSET:
                json.dumps(result)  # not JSON: nack now, not fail the ack later
            # Encoded now, for the same reason (a message without a topic, a
            # value that is not JSON).
            messages = [step_message_json(m) for m in produce]
        except Retry as r:
            self._finish_nack(job, r.reason, r.delay_ms)
            return
        except Fail as f:
            self._count("failed")
            log.warning("onceq worker %s: %r failed for good: %s", self.owner, job, f.reason)
            self._finish_ack(job, {"failed": f.reason})
            return
        except Exception as e:  # noqa: BLE001 - the handler's failure is a nack
            reason = str(e) or type(e).__name__
            log.warning("onceq worker %s: %r raised %s: %s (nacked)", self.owner, job, type(e).__name__, reason,
                        exc_info=True)
            self._finish_nack(job, reason[:1000], None)
            return
        self._finish_ack(job, result, messages)

    def _finish_ack(self, job: Job, result: Any, produce: Optional[list[dict]] = None) -> None:
        self._keeper.remove(job)
        item = AckItem(job.partition, job.offset, job.attempts, job.fencing_token, result, produce or None)
        with self._cv:
            if job._released:
                return
            job._done = True
            self._free += 1
            # An ack with messages goes on its own POST /v1/ack: the acks
            # carried on a consume cannot produce.
            if item.produce is None and not self._polling and not self._poller_done:
                self._inflight.discard(job)
                self._pending.append((job, item))  # carried on the next consume
                self._cv.notify_all()
                return
            self._cv.notify_all()
        if item.produce is not None:
            self._ack_step(job, item)
            return
        try:
            res = self.client.ack_batch(self.topic, self.group, self.owner, [item])[0]
            self._ack_outcome(job, res.ok, res.error)
        except OnceqError as e:
            self._ack_outcome(job, False, e.code, e)
        finally:
            with self._cv:  # only now: a drain waits for this ack too
                self._inflight.discard(job)
                self._cv.notify_all()

    def _ack_step(self, job: Job, item: AckItem) -> None:
        """Acks ``job`` with its messages (``POST /v1/ack`` with produce):
        both are stored, or neither. The messages are never sent again on
        their own: a refused ack is reported (409) or nacked (a refusal of
        the messages), and the redelivered job produces them again."""
        assert item.produce is not None
        try:
            self.client.ack(
                self.topic,
                self.group,
                self.owner,
                partition=item.partition,
                offset=item.offset,
                attempts=item.attempts,
                fencing_token=item.fencing_token,
                result=item.result,
                produce=item.produce,
            )
            self._count("acked")
            self._count("produced", len(item.produce))
        except Fenced as e:
            self._ack_outcome(job, False, e.code, e)
        except (InvalidArgument, Forbidden, NotFound, PayloadTooLarge, ResourceExhausted) as e:
            # Nothing was stored. Waiting for the lease to end would only
            # delay the same refusal: nack, so the topic's backoff and
            # max_attempts (then the DLQ) apply, with the reason to read.
            log.warning("onceq worker %s: ack of %r with %d messages refused (%s); nacking it", self.owner, job,
                        len(item.produce), e)
            try:
                self._nack(job, f"ack refused: {e}"[:1000], None)
                self._count("nacked")
            except Fenced as fe:
                self._report_stale(job, "nack", fe)
            except OnceqError as ne:
                log.error("onceq worker %s: nack of %r failed: %s (redelivered when its lease ends)", self.owner,
                          job, ne)
        except OnceqError as e:
            self._ack_outcome(job, False, e.code, e)
        finally:
            with self._cv:  # only now: a drain waits for this ack too
                self._inflight.discard(job)
                self._cv.notify_all()

    def _finish_nack(self, job: Job, reason: str, delay_ms: Optional[int]) -> None:
        self._keeper.remove(job)
        with self._cv:
            if job._released:
                return
            job._done = True
        try:
            self._nack(job, reason, delay_ms)
            self._count("nacked")
        except Fenced as e:
            self._report_stale(job, "nack", e)
        except OnceqError as e:
            log.error("onceq worker %s: nack of %r failed: %s (redelivered when its lease ends)", self.owner, job, e)
        finally:
            self._free_slot(job)

    def _nack(self, job: Job, reason: str, delay_ms: Optional[int]) -> None:
        """Nacks job's delivery, fenced by its attempts and token."""
        self.client.nack(
            self.topic,
            self.group,
            self.owner,
            partition=job.partition,
            offset=job.offset,
            attempts=job.attempts,
            fencing_token=job.fencing_token,
            reason=reason,
            delay_ms=delay_ms,
        )

    def _free_slot(self, job: Job) -> None:
        """job is no longer in flight: its concurrency slot is free."""
        with self._cv:
            self._inflight.discard(job)
            self._free += 1
            self._cv.notify_all()

    def _ack_outcome(self, job: Job, ok: bool, code: str, err: Optional[OnceqError] = None) -> None:
        if ok:
            self._count("acked")
        elif code == "FAILED_PRECONDITION":
            self._report_stale(job, "ack", err or Fenced("ack refused: the delivery is held by another consumer now", code=code, status=409))
        else:
            log.error("onceq worker %s: ack of %r failed: %s (redelivered when its lease ends)", self.owner, job, err or code)

    def _report_stale(self, job: Job, what: str, err: OnceqError) -> None:
        self._count("stale")
        job._lease_lost.set()
        log.warning(
            "onceq worker %s: %s of %r refused (%s): another delivery holds the message now; "
            "the work may have run twice, the first commit's result stands",
            self.owner,
            what,
            job,
            err,
        )
        if self.on_stale is not None:
            try:
                self.on_stale(job, err)
            except Exception:  # noqa: BLE001 - a broken hook must not kill the worker
                log.exception("onceq worker: on_stale hook raised")

    def _release(self, job: Job, reason: str) -> None:
        self._keeper.remove(job)
        with self._cv:
            if job._done or job._released:
                return
            job._released = True
            job._stopping.set()
        try:
            self._nack(job, reason, 0)
            self._count("released")
        except OnceqError as e:
            log.warning("onceq worker %s: release of %r failed: %s", self.owner, job, e)
        self._free_slot(job)

    # -- stopping ------------------------------------------------------------

    def _drain(self) -> None:
        self._draining = True
        with self._cv:
            self._poller_done = True
            carried, self._pending = self._pending, []
            running = list(self._inflight)
        for job in running:
            job._stopping.set()
        if carried:
            try:
                results = self.client.ack_batch(self.topic, self.group, self.owner, [i for _, i in carried])
                for (job, _), res in zip(carried, results):
                    self._ack_outcome(job, res.ok, res.error)
            except OnceqError as e:
                for job, _ in carried:
                    self._ack_outcome(job, False, e.code, e)
        deadline = time.monotonic() + self.drain_timeout
        with self._cv:
            while self._inflight and time.monotonic() < deadline and self._signal_count < 2:
                self._cv.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            late = list(self._inflight)
        for job in late:
            log.warning("onceq worker %s: %r still running after %.1fs: releasing it", self.owner, job, self.drain_timeout)
            self._release(job, "worker stopped before the handler finished")


class _LeaseKeeper:
    """One thread that extends the leases of running jobs, each every third
    of its lease, fenced on its token."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self._heap: list[tuple[float, int, Job]] = []
        self._live: set[Job] = set()
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="onceq-lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=5)

    def add(self, job: Job, due: float) -> None:
        with self._cv:
            self._live.add(job)
            heapq.heappush(self._heap, (due, next(self._seq), job))
            self._cv.notify_all()

    def remove(self, job: Job) -> None:
        with self._cv:
            self._live.discard(job)

    def _loop(self) -> None:
        w = self._w
        while True:
            with self._cv:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cv.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, job = heapq.heappop(self._heap)
                if job not in self._live:
                    continue
            started = time.monotonic()
            next_due = started + job.lease_ms / 3000.0
            try:
                job.lease_expires_at_ms = w.client.extend(
                    w.topic,
                    w.group,
                    w.owner,
                    partition=job.partition,
                    offset=job.offset,
                    lease_ms=job.lease_ms,
                    attempts=job.attempts,
                    fencing_token=job.fencing_token,
                )
                w._count("extended")
            except (Fenced, NotFound) as e:
                with self._cv:
                    live = job in self._live
                    self._live.discard(job)
                if live:
                    w._count("lease_lost")
                    job._lease_lost.set()
                    log.warning("onceq worker %s: extend of %r refused (%s): lease lost", w.owner, job, e)
                continue
            except OnceqError as e:
                # Transient: try again sooner, before the lease can run out.
                next_due = started + job.lease_ms / 6000.0
                log.warning("onceq worker %s: extend of %r failed (%s); retrying", w.owner, job, e)
            with self._cv:
                if job in self._live:
                    heapq.heappush(self._heap, (next_due, next(self._seq), job))
