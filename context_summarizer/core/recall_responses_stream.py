"""A streamed Responses API round of the recall loop, read event by event (``ResponsesStream``).

The round's events are relayed as they come until the first ``response.output_item.added`` of
a ``function_call``; from there on they are held, since the client must not see a recall call.
Released, the held events lose the recall calls' events (found by ``output_index`` and
``item_id``), later output items move down to close the gap, ``sequence_number`` runs on from
the last relayed event, and the terminal event's ``response.output`` loses the calls too.

A round that continues earlier ones (whose held events were dropped and the model asked again)
continues the client's one stream: its ``response.created`` / ``in_progress`` / ``queued`` are
dropped, its output indexes start after the items the earlier rounds relayed, its sequence
numbers run on from theirs, and its terminal event carries the first round's ``id`` and
``created_at`` with the earlier rounds' relayed items before its own output (the openai SDK
checks that every lifecycle event names one response, and builds its final response from the
terminal event). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from .sse_events import build_event, event_json, event_name

_START = frozenset({"response.created", "response.in_progress", "response.queued"})
"""The events that open a response (a continuing round's are dropped)."""
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""The events that end a response, carrying it whole."""
_ADDED = "response.output_item.added"
_DONE = "response.output_item.done"


def is_call_of(item: Any, name: str) -> bool:
    """Whether an output item is a ``function_call`` of function ``name`` (one outside any
    namespace: a namespaced function of the agent's may share the name)."""
    return (
        isinstance(item, Mapping)
        and item.get("type") == "function_call"
        and item.get("name") == name
        and not item.get("namespace")
    )


class ResponsesStream:
    """One streamed Responses API round of the recall loop (``RecallStream``)."""

    def __init__(self, after: ResponsesStream | None = None) -> None:
        self._continues = after is not None
        self._earlier: list[Mapping[str, Any]] = (
            [*after._earlier, *after._relayed_items()] if after is not None else []
        )
        """The output items the earlier rounds relayed, in the client's order."""
        self._first: tuple[Any, Any] | None = after._first if after is not None else None
        """The first round's response ``id`` and ``created_at``."""
        self._next_number: int | None = after._next_number if after is not None else None
        """The ``sequence_number`` the next event sent to the client takes."""
        self._holding = False
        self._held: list[tuple[bytes, dict[str, Any] | None]] = []
        self._relayed: dict[int, Mapping[str, Any]] = {}
        """The items this round relayed, by upstream output index (as added, then as done)."""
        self._added: dict[int, Mapping[str, Any]] = {}
        self._done: dict[int, Mapping[str, Any]] = {}
        self._start: Mapping[str, Any] | None = None
        self._end: Mapping[str, Any] | None = None

    def feed(self, event: bytes) -> list[bytes]:
        """The events to send the client now for this upstream event (see ``RecallStream``)."""
        payload = event_json(event)
        if payload is not None:
            self._observe(payload)
            if not self._holding and _opens_function_call(payload):
                self._holding = True
        if self._holding:
            self._held.append((event, payload))
            return []
        if payload is None:
            return [event]
        if payload.get("type") in (_ADDED, _DONE):
            index, item = payload.get("output_index"), payload.get("item")
            if _is_index(index) and isinstance(item, Mapping):
                self._relayed[index] = item
        sent = self._sent(event, payload, renumber=self._continues)
        return [] if sent is None else [sent]

    def answer(self) -> dict[str, Any]:
        """The round's response as upstream ended it (completed, incomplete or failed); for a
        stream cut short, the response it started with holding the items it finished."""
        if self._end is not None:
            return dict(self._end)
        built: dict[str, Any] = {"object": "response"}
        if self._start is not None:
            built = dict(self._start)
        built["output"] = [self._done[index] for index in sorted(self._done)]
        return built

    def release(self, name: str | None) -> list[bytes]:
        """The held events, the calls of function ``name`` taken out (None: none), the rest
        renumbered to follow what was relayed."""
        removed = (
            {i for i, item in self._added.items() if is_call_of(item, name)}
            if name is not None
            else set()
        )
        removed_ids = {
            self._added[i]["id"] for i in removed if isinstance(self._added[i].get("id"), str)
        }
        released = []
        for event, payload in self._held:
            if payload is None:
                released.append(event)
                continue
            sent = self._sent(
                event, payload, renumber=True, removed=removed, ids=removed_ids, name=name
            )
            if sent is not None:
                released.append(sent)
        self._held = []
        return released

    def _observe(self, payload: Mapping[str, Any]) -> None:
        """Note what the answer is made of: the response started and ended, the items."""
        kind, response = payload.get("type"), payload.get("response")
        if kind in _START and isinstance(response, Mapping):
            self._start = response
            if self._first is None:
                self._first = (response.get("id"), response.get("created_at"))
        elif kind in _TERMINAL and isinstance(response, Mapping):
            self._end = response
        index, item = payload.get("output_index"), payload.get("item")
        if _is_index(index) and isinstance(item, Mapping):
            if kind == _ADDED:
                self._added[index] = item
            elif kind == _DONE:
                self._done[index] = item

    def _relayed_items(self) -> list[Mapping[str, Any]]:
        return [self._relayed[index] for index in sorted(self._relayed)]

    def _sent(
        self,
        event: bytes,
        payload: dict[str, Any],
        *,
        renumber: bool,
        removed: set[int] | None = None,
        ids: set[str] | None = None,
        name: str | None = None,
    ) -> bytes | None:
        """``event`` as the client gets it: the same bytes when nothing in it changes, rebuilt
        when something does, None when it is dropped."""
        removed, ids = removed or set(), ids or set()
        kind = payload.get("type")
        if self._continues and kind in _START:
            return None
        index, item = payload.get("output_index"), payload.get("item")
        item_id = item.get("id") if isinstance(item, Mapping) else payload.get("item_id")
        if (_is_index(index) and index in removed) or (isinstance(item_id, str) and item_id in ids):
            return None
        rewritten = dict(payload)
        if _is_index(index):
            below = sum(1 for gone in removed if gone < index)
            rewritten["output_index"] = len(self._earlier) + index - below
        number = payload.get("sequence_number")
        if _is_index(number):
            if renumber and self._next_number is not None:
                number = rewritten["sequence_number"] = self._next_number
            self._next_number = number + 1
        response = payload.get("response")
        if kind in _TERMINAL and isinstance(response, Mapping):
            rewritten["response"] = self._ended(response, name)
        if rewritten == payload:
            return event
        return build_event(rewritten, event_name(event))

    def _ended(self, response: Mapping[str, Any], name: str | None) -> dict[str, Any]:
        """The terminal event's response as the client gets it: without the calls of ``name``
        and, continuing earlier rounds, as the first round's response holding their items."""
        ended = dict(response)
        output = response.get("output")
        if isinstance(output, list):
            kept = [item for item in output if name is None or not is_call_of(item, name)]
            ended["output"] = [*self._earlier, *kept]
        if self._continues and self._first is not None:
            for key, value in zip(("id", "created_at"), self._first, strict=True):
                if value is not None:
                    ended[key] = value
        return ended


def _opens_function_call(payload: Mapping[str, Any]) -> bool:
    """Whether an event adds a ``function_call`` output item (where holding starts)."""
    item = payload.get("item")
    return (
        payload.get("type") == _ADDED
        and isinstance(item, Mapping)
        and item.get("type") == "function_call"
    )


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
