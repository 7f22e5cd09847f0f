"""The agentfleet HTTP API from Python, with the standard library only."""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import ssl
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Union,
)

from . import sse
from .errors import TransportError, WaitTimeout, error_for

__all__ = ["Client", "BatchProgress", "TERMINAL_STATUSES"]

#: A task in one of these has ended and never changes again.
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "timed_out", "cancelled"})

Json = Dict[str, Any]


@dataclass(frozen=True)
class BatchProgress:
    """How much of a batch upload has been sent: lines and bytes so far, and the number
    of lines in all when the caller gave a sized collection (else None)."""

    lines: int
    bytes: int
    total_lines: Optional[int]


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _batch_path(batch_id: str, user_id: Optional[str], suffix: str = "") -> str:
    """A batch's route; ``user_id`` names its user (batch ids are each user's), needed only
    by a key that acts for several users who each have a batch of that id."""
    path = f"/v1/batches/{_quote(batch_id)}{suffix}"
    if user_id:
        path += "?" + urllib.parse.urlencode({"user_id": user_id})
    return path


def _retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class Client:
    """A client of one fleet.

    ``url`` is the dispatcher's address (``http://127.0.0.1:8080``); ``api_key`` is sent as
    ``Authorization: Bearer``. ``timeout`` (seconds) bounds every call that is not a wait
    or a stream. A call that is safe to send again (every call but a batch upload) is sent
    again after a failed connection, a 503 or a 429 with ``Retry-After``, at most
    ``max_retries`` times, backing off from ``backoff`` seconds (doubling, with jitter,
    never less than ``Retry-After``); a pause longer than ``max_backoff`` or than the time
    left raises the answer's error at once. No call runs past its deadline.
    Submissions and retries carry an idempotency key (one is made up when none is
    given), so sending one again never makes a second task.
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = "agentfleet-python/0.1",
    ):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"url must be http(s)://host[:port], not {url!r}")
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        self._port = parsed.port
        self._base = parsed.path.rstrip("/")
        self._key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._ssl = ssl_context
        self._agent = user_agent

    # ---- tasks ------------------------------------------------------------------------

    def submit(
        self,
        user_id: str,
        text: str,
        *,
        idempotency_key: Optional[str] = None,
        **fields: Any,
    ) -> Json:
        """POST /v1/tasks: the task as stored (``status: queued`` when new). ``fields`` are
        the submission's other members (``model``, ``tools``, ``timeout_s``, ``max_steps``,
        ``max_tokens``, ``max_cost``, ``strategy``, ``parent_task_id``, ``session_id``,
        ``priority``, ``batch_id``, ``metadata``)."""
        body = dict(fields, user_id=user_id, text=text)
        body["idempotency_key"] = idempotency_key or str(uuid.uuid4())
        return self._call("POST", "/v1/tasks", body=body)

    def task(self, task_id: str, *, wait: Optional[float] = None) -> Json:
        """GET /v1/tasks/{id}: the task with its trace; with ``wait`` (0-30 s) the answer
        comes the moment the task ends, or after ``wait`` seconds with it as it is."""
        query = {"wait": _seconds(wait)} if wait is not None else None
        extra = wait or 0.0
        return self._call(
            "GET", f"/v1/tasks/{_quote(task_id)}", query=query, timeout=self.timeout + extra
        )

    def wait(self, task_id: str, *, timeout: float = 300.0) -> Json:
        """The task once it has ended, polling with the API's long wait; WaitTimeout (with
        the task as last seen) when it has not ended within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            task = self.task(task_id, wait=max(0.0, min(30.0, left)))
            if task["status"] in TERMINAL_STATUSES:
                return task
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"task {task_id} is still {task['status']} after {timeout:g} s", task
                )

    def list_tasks(
        self,
        user_id: str,
        *,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[str] = None,
        batch_id: Optional[str] = None,
    ) -> List[Json]:
        """GET /v1/tasks: one page of the user's tasks, newest first (summaries); of their
        batch ``batch_id`` when given."""
        query = {
            "user_id": user_id,
            "status": status,
            "limit": limit,
            "before": before,
            "batch_id": batch_id,
        }
        return self._call("GET", "/v1/tasks", query=query)["tasks"]

    def search_tasks(
        self,
        *,
        user_id: Optional[str] = None,
        status: Optional[str] = None,
        result_type: Optional[str] = None,
        error_code: Optional[str] = None,
        model: Optional[str] = None,
        batch_id: Optional[str] = None,
        session_id: Optional[str] = None,
        q: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[str] = None,
        count: bool = False,
    ) -> Json:
        """GET /v1/tasks: one page of the tasks the filters find, newest first, across every
        user the key acts for unless ``user_id`` names one: ``{"tasks", "next_before"}`` (the
        ``before`` of the next page; None on the last), and with ``count`` ``"total"`` (up to
        10,000) and ``"total_capped"``. ``q``: text the task's text holds, ignoring case;
        ``since``/``until``: a date or RFC 3339 time."""
        query = {
            "user_id": user_id,
            "status": status,
            "result_type": result_type,
            "error_code": error_code,
            "model": model,
            "batch_id": batch_id,
            "session_id": session_id,
            "q": q,
            "since": since,
            "until": until,
            "limit": limit,
            "before": before,
            "count": "true" if count else None,
        }
        return self._call("GET", "/v1/tasks", query=query)

    def iter_tasks(
        self, user_id: str, *, status: Optional[str] = None, page_size: int = 100
    ) -> Iterator[Json]:
        """Every task of the user, newest first, a page at a time."""
        before = None
        while True:
            page = self.list_tasks(user_id, status=status, limit=page_size, before=before)
            yield from page
            if len(page) < page_size:
                return
            before = page[-1]["task_id"]

    def cancel(self, task_id: str) -> Json:
        """POST /v1/tasks/{id}/cancel: the task (``cancelled`` when it had not started; a
        running one is being stopped: wait for it). Conflict ``already_ended`` when it
        ended otherwise."""
        return self._call("POST", f"/v1/tasks/{_quote(task_id)}/cancel")

    def retry(self, task_id: str, *, idempotency_key: Optional[str] = None) -> Json:
        """POST /v1/tasks/{id}/retry: a new task asking what the ended task asked, its
        ``retry_of`` naming the first. Conflict ``task_not_ended`` while it runs."""
        body = {"idempotency_key": idempotency_key or str(uuid.uuid4())}
        return self._call("POST", f"/v1/tasks/{_quote(task_id)}/retry", body=body)

    def events(self, task_id: str, *, idle_timeout: float = 60.0) -> Iterator[sse.Event]:
        """GET /v1/tasks/{id}/events: the task's events as they happen (those so far first,
        rebuilt from its trace), ending after ``done``. ``idle_timeout`` bounds the silence
        between two reads."""
        return self._stream(f"/v1/tasks/{_quote(task_id)}/events", None, idle_timeout)

    def results(self, user_id: str, *, idle_timeout: float = 60.0) -> Iterator[sse.Event]:
        """GET /v1/results: a ``result`` event for each of the user's tasks as it ends (and
        ``gap`` when some may have been missed: list the tasks to catch up). The server
        closes it after an hour; the caller's loop decides when to stop."""
        return self._stream("/v1/results", {"user_id": user_id}, idle_timeout)

    # ---- batches ----------------------------------------------------------------------

    def submit_batch(
        self,
        lines: Iterable[Union[Mapping[str, Any], str]],
        *,
        user_id: Optional[str] = None,
        batch_id: Optional[str] = None,
        priority: Optional[str] = None,
        on_progress: Optional[Callable[[BatchProgress], None]] = None,
        chunk_bytes: int = 256 << 10,
        timeout: float = 3600.0,
    ) -> Json:
        """POST /v1/batches: the submissions in ``lines`` (dicts, or JSON texts) streamed as
        JSON Lines; with ``user_id`` a line may leave its user out. ``on_progress`` is
        called after each piece sent. Answers ``{"batch_id","accepted","duplicates",
        "lines"}``; a bad line is BadRequest naming ``/line/N/...`` and nothing is stored.
        Not sent again on failure (a cut upload stores nothing): lines with their own
        ``idempotency_key`` can be sent again safely, those already stored counting as
        ``duplicates``; a ``batch_id`` the user used before is Conflict ``batch_exists``
        (another user's batch of that id is theirs)."""
        total = len(lines) if hasattr(lines, "__len__") else None  # type: ignore[arg-type]
        query = {"user_id": user_id, "batch_id": batch_id, "priority": priority}
        gen = _PieceBuffer(lines, chunk_bytes, on_progress, total)
        return self._call(
            "POST",
            "/v1/batches",
            query=query,
            raw=gen,
            content_type="application/x-ndjson",
            timeout=timeout,
            retries=0,
        )

    def list_batches(
        self,
        user_id: Optional[str] = None,
        *,
        limit: Optional[int] = None,
        before: Optional[str] = None,
        prefix: Optional[str] = None,
    ) -> List[Json]:
        """GET /v1/batches: one page of batches, newest first, each with its counts per
        status and result type and ``ended`` of ``total``: of ``user_id``, else of every
        user the key acts for. ``before``: the ``created_at`` of the last of the previous
        page. ``prefix``: only those whose id begins with it (a batch found by the start of
        its id)."""
        query = {"user_id": user_id, "limit": limit, "before": before, "prefix": prefix}
        return self._call("GET", "/v1/batches", query=query)["batches"]

    def batch(self, batch_id: str, user_id: Optional[str] = None) -> Json:
        """GET /v1/batches/{id}: counts per status and result type, ``ended`` of
        ``total``, usage per model, ``waiting_reason``. Batch ids are each user's:
        ``user_id`` tells whose when the key acts for several (else Conflict
        ``ambiguous_id``)."""
        return self._call("GET", _batch_path(batch_id, user_id))

    def wait_batch(
        self,
        batch_id: str,
        *,
        timeout: float = 3600.0,
        interval: float = 1.0,
        on_progress: Optional[Callable[[Json], None]] = None,
        user_id: Optional[str] = None,
    ) -> Json:
        """The batch once every task of it has ended (polled every ``interval`` s,
        ``on_progress`` called with each answer); WaitTimeout past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            batch = self.batch(batch_id, user_id)
            if on_progress:
                on_progress(batch)
            if batch["ended"] >= batch["total"]:
                return batch
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"batch {batch_id}: {batch['ended']} of {batch['total']} ended "
                    f"after {timeout:g} s",
                    batch,
                )
            time.sleep(min(interval, left))

    def batch_results(
        self, batch_id: str, *, idle_timeout: float = 60.0, user_id: Optional[str] = None
    ) -> Iterator[Json]:
        """GET /v1/batches/{id}/results: one object per task, read as they stream in."""
        response, conn = self._open(
            "GET", _batch_path(batch_id, user_id, "/results"), None, idle_timeout
        )
        try:
            for line in _lines(response):
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def cancel_batch(self, batch_id: str, user_id: Optional[str] = None) -> Json:
        """POST /v1/batches/{id}/cancel: the batch's tasks not yet running end cancelled,
        running ones are stopped, none starts afterwards."""
        return self._call("POST", _batch_path(batch_id, user_id, "/cancel"))

    def retry_batch(self, batch_id: str, user_id: Optional[str] = None, *, slice_size: int = 200) -> Json:
        """POST /v1/batches/{id}/retry, slice after slice: retries each task of the batch that
        failed (failed, timed_out, or succeeded with an error result), each at most once
        however often it is asked (the server's keys). The totals: ``{"retried",
        "already_retried", "not_retried": {code: n}, "stopped"}`` (``stopped``: why it stopped
        early, as the queue_full of a full queue; None when every failed task was seen)."""
        totals: Json = {"retried": 0, "already_retried": 0, "not_retried": {}, "stopped": None}
        after: Optional[str] = None
        while True:
            query = {"user_id": user_id, "after": after, "limit": slice_size}
            done = self._call("POST", f"/v1/batches/{_quote(batch_id)}/retry", query=query)
            totals["retried"] += done["retried"]
            totals["already_retried"] += done["already_retried"]
            for code, n in done["not_retried"].items():
                totals["not_retried"][code] = totals["not_retried"].get(code, 0) + n
            if done["stopped"] is not None or done["next_after"] is None:
                totals["stopped"] = done["stopped"]
                return totals
            after = done["next_after"]

    # ---- usage, limits, tools, stats, plans ------------------------------------------

    def usage(
        self,
        user_id: Optional[str] = None,
        *,
        from_: Optional[str] = None,
        to: Optional[str] = None,
    ) -> Json:
        """The bill from the ledger: GET /v1/users/{id}/usage, or every user's together
        (GET /v1/usage, an admin key) without ``user_id``. ``from_``/``to``: a date or an
        RFC 3339 time."""
        query = {"from": from_, "to": to}
        if user_id is None:
            return self._call("GET", "/v1/usage", query=query)
        return self._call("GET", f"/v1/users/{_quote(user_id)}/usage", query=query)

    def limits(self, user_id: str) -> Json:
        """GET /v1/users/{id}/limits: the effective limits and the overrides."""
        return self._call("GET", f"/v1/users/{_quote(user_id)}/limits")

    def set_limits(self, user_id: str, overrides: Mapping[str, Any]) -> Json:
        """PUT /v1/users/{id}/limits (an admin key): replaces the user's overrides (an
        empty mapping clears them)."""
        return self._call("PUT", f"/v1/users/{_quote(user_id)}/limits", body=dict(overrides))

    def tools(self, user_id: Optional[str] = None) -> List[Json]:
        """GET /v1/tools: the tool registry (with ``permitted`` for ``user_id``)."""
        return self._call("GET", "/v1/tools", query={"user_id": user_id})["tools"]

    def stats(
        self,
        user_id: Optional[str] = None,
        *,
        from_: Optional[str] = None,
        to: Optional[str] = None,
    ) -> Json:
        """GET /v1/stats: success statistics of the tasks created in the window."""
        return self._call(
            "GET", "/v1/stats", query={"user_id": user_id, "from": from_, "to": to}
        )

    def plan(
        self,
        user_id: str,
        text: str,
        *,
        wait_s: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        **fields: Any,
    ) -> Json:
        """POST /v1/plan: the planner alone; the plan once made (``status: succeeded``),
        or the task id to poll when it took longer than ``wait_s``."""
        body = dict(fields, user_id=user_id, text=text)
        body["idempotency_key"] = idempotency_key or str(uuid.uuid4())
        if wait_s is not None:
            body["wait_s"] = wait_s
        extra = 30.0 if wait_s is None else float(wait_s)
        return self._call("POST", "/v1/plan", body=body, timeout=self.timeout + extra)

    # ---- the wire ---------------------------------------------------------------------

    def _target(self, path: str, query: Optional[Mapping[str, Any]]) -> str:
        target = self._base + path
        if query:
            pairs = [(k, _text(v)) for k, v in query.items() if v is not None]
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs)
        return target

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, content_type: Optional[str]) -> Dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self._key}",
            "Accept": "application/json",
            "User-Agent": self._agent,
        }
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Optional[Json] = None,
        raw: Optional[Iterable[bytes]] = None,
        content_type: str = "application/json",
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
    ) -> Any:
        timeout = self.timeout if timeout is None else timeout
        retries = self.max_retries if retries is None else retries
        deadline = time.monotonic() + timeout
        target = self._target(path, query)
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"{method} {path}: no answer within {timeout:g} s")
            try:
                status, data, retry_after = self._exchange(
                    method, target, payload, raw, content_type, left
                )
            except (OSError, http.client.HTTPException) as e:
                if attempt >= retries or not self._pause(attempt, None, deadline):
                    raise TransportError(f"{method} {path}: {e}") from e
                attempt += 1
                continue
            if status < 400:
                return json.loads(data) if data else None
            error = error_for(status, data, retry_after)
            again = status == 503 or (status == 429 and retry_after is not None)
            if not again or attempt >= retries or not self._pause(attempt, retry_after, deadline):
                raise error
            attempt += 1

    def _exchange(
        self,
        method: str,
        target: str,
        payload: Optional[bytes],
        raw: Optional[Iterable[bytes]],
        content_type: str,
        timeout: float,
    ):
        deadline = time.monotonic() + timeout
        conn = self._connection(timeout)
        try:
            if raw is not None:
                try:
                    conn.request(
                        method,
                        target,
                        body=_until(raw, deadline),
                        headers=self._headers(content_type),
                        encode_chunked=True,
                    )
                except (BrokenPipeError, ConnectionResetError):
                    # Refused before the body was read (queue_full, a held key): the answer
                    # may be there to read.
                    pass
            else:
                conn.request(
                    method,
                    target,
                    body=payload,
                    headers=self._headers(content_type if payload is not None else None),
                )
            response = conn.getresponse()
            data = _read_until(conn, response, deadline)
            return response.status, data, _retry_after(response.getheader("Retry-After"))
        finally:
            conn.close()

    def _pause(self, attempt: int, retry_after: Optional[float], deadline: float) -> bool:
        """Sleeps before the next try and says True; False (no sleep) when the pause, or
        the server's Retry-After, is longer than max_backoff or than the time left."""
        wait = min(self.max_backoff, self.backoff * (2**attempt)) * (0.5 + random.random() / 2)
        if retry_after is not None:
            wait = max(wait, retry_after)
        if wait > self.max_backoff or wait >= deadline - time.monotonic():
            return False
        time.sleep(wait)
        return True

    def _open(
        self,
        method: str,
        path: str,
        query: Optional[Mapping[str, Any]],
        idle_timeout: float,
    ):
        conn = self._connection(idle_timeout)
        try:
            headers = self._headers(None)
            headers["Accept"] = "*/*"
            conn.request(method, self._target(path, query), headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{method} {path}: {e}") from e
        if response.status >= 400:
            data = response.read()
            conn.close()
            raise error_for(
                response.status, data, _retry_after(response.getheader("Retry-After"))
            )
        return response, conn

    def _stream(
        self, path: str, query: Optional[Mapping[str, Any]], idle_timeout: float
    ) -> Iterator[sse.Event]:
        response, conn = self._open("GET", path, query, idle_timeout)

        def events() -> Iterator[sse.Event]:
            try:
                yield from sse.parse(_lines(response))
            finally:
                conn.close()

        return events()


class _PieceBuffer:
    """The body of a batch upload: the lines encoded and joined into pieces of about
    ``chunk_bytes``, reporting progress after each piece is handed to the socket."""

    def __init__(self, lines, chunk_bytes, on_progress, total):
        self._lines = lines
        self._chunk = chunk_bytes
        self._progress = on_progress
        self._total = total

    def __iter__(self) -> Iterator[bytes]:
        piece: List[bytes] = []
        size = 0
        lines = 0
        sent_lines = 0
        sent_bytes = 0
        for number, line in enumerate(self._lines, 1):
            text = line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)
            if "\n" in text or "\r" in text:
                raise ValueError(f"line {number} holds a line break")
            data = text.encode("utf-8") + b"\n"
            piece.append(data)
            size += len(data)
            lines += 1
            if size >= self._chunk:
                yield b"".join(piece)
                sent_lines += lines
                sent_bytes += size
                piece, size, lines = [], 0, 0
                if self._progress:
                    self._progress(BatchProgress(sent_lines, sent_bytes, self._total))
        if piece:
            yield b"".join(piece)
            sent_lines += lines
            sent_bytes += size
        if self._progress:
            self._progress(BatchProgress(sent_lines, sent_bytes, self._total))


def _until(pieces: Iterable[bytes], deadline: float) -> Iterator[bytes]:
    for piece in pieces:
        if time.monotonic() >= deadline:
            raise TransportError("the upload did not end before the call's deadline")
        yield piece


def _read_until(
    conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float
) -> bytes:
    """The whole body, each read given only the time left: a server that trickles cannot
    hold the call past its deadline."""
    parts: List[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the answer did not end before the call's deadline")
        if conn.sock is not None:
            conn.sock.settimeout(left)
        part = response.read1(1 << 16)
        if not part:
            return b"".join(parts)
        parts.append(part)


_MAX_LINE = 16 << 20  # the longest line of a stream read (an event's data, a result line)


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    try:
        while True:
            line = response.readline(_MAX_LINE + 1)
            if not line:
                return
            if len(line) > _MAX_LINE:
                raise TransportError(f"a line of the answer is over {_MAX_LINE} bytes")
            yield line
    except socket.timeout as e:
        raise TransportError("the stream was silent past its idle timeout") from e
    except (OSError, http.client.HTTPException) as e:
        raise TransportError(f"the stream was cut: {e}") from e


def _seconds(value: float) -> str:
    # Rounded up: a wait of 0 with time left would poll without pause.
    return str(max(0, min(30, math.ceil(value))))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

