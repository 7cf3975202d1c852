"""onceq: the Python client of the onceq message broker.

    import onceq

    client = onceq.Client("http://127.0.0.1:8080")
    worker = onceq.Worker(client, "orders", "billing")

    @worker.handler
    def charge(job):
        return {"charge_id": pay(job.json(), idempotency_key=job.step_id)}

    worker.run()

Standard library only. See README.md and docs/CLIENTS.md.
"""

__version__ = "0.1.0"

from .client import Client  # noqa: E402
from .errors import (  # noqa: E402
    Conflict,
    Fenced,
    Forbidden,
    InternalError,
    InvalidArgument,
    MethodNotAllowed,
    NotFound,
    OnceqError,
    PayloadTooLarge,
    ResourceExhausted,
    TransportError,
    Unauthorized,
    Unavailable,
)
from .types import (  # noqa: E402
    UNSET,
    AckItem,
    AckResult,
    Commit,
    ConsumeResult,
    Delivery,
    GroupCounters,
    Health,
    KeyEvent,
    KeyState,
    Message,
    ProduceResult,
    TopicCreated,
    TopicInfo,
    Version,
)
from .worker import Fail, Job, LeaseLost, Retry, Worker, WorkerStats  # noqa: E402

__all__ = [
    "AckItem", "AckResult", "Client", "Commit", "Conflict", "ConsumeResult", "Delivery",
    "Fail", "Fenced", "Forbidden", "GroupCounters", "Health", "InternalError",
    "InvalidArgument", "Job", "KeyEvent", "KeyState", "LeaseLost", "Message",
    "MethodNotAllowed", "NotFound", "OnceqError", "PayloadTooLarge", "ProduceResult",
    "ResourceExhausted", "Retry", "TopicCreated", "TopicInfo", "TransportError", "UNSET",
    "Unauthorized", "Unavailable", "Version", "Worker", "WorkerStats",
]
