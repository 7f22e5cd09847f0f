"""The errors the client raises: one class per kind of answer, each carrying the API's
``code``, ``message`` and ``path`` (the JSON path of the problem, or None)."""

from __future__ import annotations

from typing import Any, Dict, Optional


class AgentfleetError(Exception):
    """Every error this client raises."""


class TransportError(AgentfleetError):
    """The request did not get an answer: the connection failed, was cut, or the call's
    deadline passed first. Safe to send again only for calls that are idempotent (every
    call of this client is, but a batch upload without ``batch_id``)."""


class WaitTimeout(AgentfleetError, TimeoutError):
    """A wait ended before the task or batch did; ``last`` is what was last seen."""

    def __init__(self, message: str, last: Optional[Dict[str, Any]]):
        super().__init__(message)
        self.last = last


class ApiError(AgentfleetError):
    """An answer of 4xx or 5xx: ``status``, and the API's ``code``, ``message``, ``path``
    (``{"error":{"code","message","path"}}``); ``retry_after`` in seconds when the answer
    said when to come back."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        path: Optional[str] = None,
        retry_after: Optional[float] = None,
    ):
        where = f" at {path}" if path else ""
        super().__init__(f"{status} {code}{where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.path = path
        self.retry_after = retry_after


class BadRequest(ApiError):
    """400: the request was refused as written (``path`` names the field)."""


class Unauthorized(ApiError):
    """401: no key, or a key the API does not know."""


class Forbidden(ApiError):
    """403: the key may not act for that user, or not do that (``code`` says which)."""


class NotFound(ApiError):
    """404: no such task, batch or route, or one the key may not see."""


class Conflict(ApiError):
    """409: the state does not allow it (``task_not_ended``, ``already_ended``,
    ``idempotency_conflict``, ``batch_exists``, ``parent_not_ended``), or a short task id
    stands for several tasks (``ambiguous_id``)."""


class PayloadTooLarge(ApiError):
    """413: the body is over the route's limit."""


class Unprocessable(ApiError):
    """422: understood, but cannot be done (``cannot_retry``)."""


class TooManyRequests(ApiError):
    """429: a limit of the caller's (``queue_full``, connections, streams); see
    ``retry_after``."""


class ServerError(ApiError):
    """5xx: the fleet could not answer (``unavailable`` and others)."""


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: TooManyRequests,
}


def error_for(
    status: int, body: bytes, retry_after: Optional[float] = None
) -> ApiError:
    """The error an answer of ``status`` with ``body`` stands for. A body that is not the
    API's error object (a proxy's page, say) still gives an error, coded ``http_<status>``."""
    import json

    code, message, path = f"http_{status}", body.decode("utf-8", "replace")[:500], None
    try:
        parsed = json.loads(body)
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            code = error["code"]
            message = str(error.get("message", ""))
            path = error.get("path") if isinstance(error.get("path"), str) else None
    except ValueError:
        pass
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, code, message, path, retry_after)
