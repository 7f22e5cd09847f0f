"""A client of the agentfleet HTTP API (standard library only).

    from agentfleet import Client
    fleet = Client("http://127.0.0.1:8080", "af-dev-u1-key")
    task = fleet.wait(fleet.submit("u1", "明天下午三点开会")["task_id"])
    print(task["result"]["message"])
"""

from .client import TERMINAL_STATUSES, BatchProgress, Client
from .errors import (
    AgentfleetError,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TooManyRequests,
    TransportError,
    Unauthorized,
    Unprocessable,
    WaitTimeout,
)
from .sse import Event

__version__ = "0.1.0"

__all__ = [
    "AgentfleetError",
    "ApiError",
    "BadRequest",
    "BatchProgress",
    "Client",
    "Conflict",
    "Event",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "TERMINAL_STATUSES",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "Unprocessable",
    "WaitTimeout",
]
