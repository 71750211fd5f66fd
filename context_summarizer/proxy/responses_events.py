"""A streamed Responses answer with summarizer's compaction item announced before the model's
output, as OpenAI's server-side compaction does.

The item is sent as its own ``response.output_item.added`` and ``response.output_item.done``
events at ``output_index`` 0, before the first event about the model's output; every later event's
``output_index`` moves up by one and its ``sequence_number`` by two, and the final response
(``response.completed`` and its failed twins) lists the item first in ``output``. Events are
otherwise relayed as they arrive.
"""

from __future__ import annotations

import json
from typing import Any

from . import sse

_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class CompactionAnnouncer:
    """Rewrites one stream's events (call it on each whole event, in order)."""

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.announced = False

    def __call__(self, event: bytes) -> bytes:
        """``event``, preceded by the announcement when it is due, renumbered after it."""
        data = sse.event_object(event)
        if data is None or not isinstance(data.get("type"), str):
            return event
        kind = data["type"]
        out = b""
        if not self.announced and ("output_index" in data or kind in _FINAL):
            out = self._announcement(data.get("sequence_number"))
            self.announced = True
        if not self.announced:
            return event
        if type(data.get("output_index")) is int:
            data["output_index"] += 1
        if type(data.get("sequence_number")) is int:
            data["sequence_number"] += 2
        response = data.get("response")
        if (
            kind in _FINAL
            and isinstance(response, dict)
            and isinstance(response.get("output"), list)
        ):
            response["output"] = [self.item, *response["output"]]
        return out + _event(kind, data)

    def _announcement(self, sequence: Any) -> bytes:
        number = sequence if type(sequence) is int else 0
        added: dict[str, Any] = {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": self.item,
            "sequence_number": number,
        }
        done = {**added, "type": "response.output_item.done", "sequence_number": number + 1}
        return _event("response.output_item.added", added) + _event(
            "response.output_item.done", done
        )


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"
