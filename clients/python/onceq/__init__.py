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

from . import errors as _errors  # noqa: E402
from . import types as _types  # noqa: E402
from .client import Client  # noqa: E402
from .errors import *  # noqa: E402,F401,F403  (errors.__all__: the exceptions)
from .types import *  # noqa: E402,F401,F403  (types.__all__: the results, UNSET)
from .worker import Complete, Fail, Job, LeaseLost, Retry, Worker, WorkerStats  # noqa: E402

__all__ = sorted(
    ["Client", "Complete", "Fail", "Job", "LeaseLost", "Retry", "Worker", "WorkerStats", *_errors.__all__, *_types.__all__]
)
