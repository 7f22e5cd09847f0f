"""Server-sent events, as the dispatcher writes them (``id:``, ``event:``, ``data:`` lines,
an empty line ending each event, ``:`` comments as heartbeats)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional


@dataclass(frozen=True)
class Event:
    """One event: its ``event`` name (``step``, ``delta``, ``action``, ``execution``,
    ``error``, ``done``; ``result`` and ``gap`` on the results stream), its ``data``
    parsed from JSON, and its ``id`` (None when the event had none)."""

    event: str
    data: Any
    id: Optional[str] = None


def parse(lines: Iterable[bytes], max_event_bytes: int = 16 << 20) -> Iterator[Event]:
    """The events in ``lines`` (raw lines, with or without their line ends). An event's
    data over ``max_event_bytes`` raises ValueError rather than growing without bound."""
    name, data, event_id, size = "message", [], None, 0
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield Event(name, json.loads("\n".join(data)), event_id)
            name, data, event_id, size = "message", [], None, 0
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            name = value
        elif field == "data":
            size += len(value)
            if size > max_event_bytes:
                raise ValueError(f"an event's data is over {max_event_bytes} bytes")
            data.append(value)
        elif field == "id":
            event_id = value
    if data:  # a stream cut in the middle of an event: that event is incomplete
        return
