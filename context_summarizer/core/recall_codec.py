"""What the recall tool loop needs of an API (``RecallCodec``): the tool offered in a request
body, its calls found in an answer, the request continued with their results, an answer with
them taken out, and a streamed round read event by event (``RecallStream``). One codec per API
(``recall_chat``, ``recall_responses``, ``recall_messages``, ``recall_gemini``); the loop
itself (asking again, bounding the rounds, holding results) is the proxy's and the library's.
Pure: bodies and events in, bodies and events out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .recall_tool import RecallTool


@dataclass(frozen=True)
class ToolCall:
    """One function call of an answer: its id, its function's name and its arguments (JSON
    text, as chat completions and Responses send them, or an object, as Messages and Gemini
    do)."""

    id: str
    name: str
    arguments: str | Mapping[str, Any] | None


@dataclass(frozen=True)
class Held:
    """Recall calls the model made beside the agent's own: the whole answer, the agent's
    call ids (``key``: how the turn is found when the client sends it back), and each recall
    call's result."""

    key: tuple[str, ...]
    answer: Mapping[str, Any]
    results: tuple[tuple[str, str], ...]

    @property
    def size(self) -> int:
        """Characters it holds (for the bound on what is held)."""
        return sum(len(text) for _, text in self.results) + len(json.dumps(self.answer))


class RecallStream(Protocol):
    """One streamed round of the loop, read event by event (each event a whole SSE event, as
    ``sse.EventSplitter`` gives them, its blank line included).

    Events are relayed as they come until the first event of a function call; from there on
    the round's events are held, since the client must not see a recall call. At the round's
    end the loop either asks the model again (the held events are dropped; the next round's
    stream continues this one's, ``after``) or releases them (``release``)."""

    def feed(self, event: bytes) -> list[bytes]:
        """The events to send the client now for this upstream event: none while held, and
        rewritten where the stream continues an earlier round's (so the client reads one
        answer: one start, indexes and sequence numbers that continue)."""
        ...

    def answer(self) -> dict[str, Any]:
        """The whole answer the round's events make, as the API's non-streamed answer (what
        ``RecallCodec.calls`` and ``continued`` read)."""
        ...

    def release(self, name: str | None) -> list[bytes]:
        """The held events, to end the client's stream with: the calls of function ``name``
        taken out, the other calls' indexes closed up (None: as held)."""
        ...


class RecallCodec(Protocol):
    """The recall tool in one API's request and answer shapes."""

    def may_offer(self, body: Mapping[str, Any]) -> bool:
        """Whether a request can take the tool (one candidate; no tool choice that names or
        forbids tools, so the agent's choice stands)."""
        ...

    def offered(self, body: Mapping[str, Any], tool: RecallTool) -> dict[str, Any]:
        """``body`` with the tool after the agent's own tools (a new dict)."""
        ...

    def calls(self, answer: Mapping[str, Any]) -> list[ToolCall]:
        """The function calls of a whole answer, in order."""
        ...

    def continued(
        self,
        body: Mapping[str, Any],
        answer: Mapping[str, Any],
        results: Sequence[tuple[str, str]],
    ) -> dict[str, Any]:
        """``body`` followed by the answer's output and one tool result per ``(call id,
        result text)``: the loop's next request."""
        ...

    def without(self, answer: Mapping[str, Any], name: str) -> dict[str, Any]:
        """The answer with the calls of function ``name`` taken out (the agent's own calls
        stay, in order; the stop reason says "stop" when none is left); the answer itself
        when it has none."""
        ...

    def spliced(
        self, body: Mapping[str, Any], find: Callable[[tuple[str, ...]], Held | None]
    ) -> dict[str, Any] | None:
        """``body`` with each held recall exchange put back where it belongs: in the model
        turn whose agent calls' ids are a ``Held.key`` (``find`` gives it), the recall calls
        beside the agent's in the answer's order and their results after the turn, as
        ``continued`` would have put them. None when nothing was put back (no turn is held,
        or its recall calls are there already)."""
        ...

    def stream(self, after: RecallStream | None) -> RecallStream:
        """A streamed round's reader; ``after``: the round before it, whose held events were
        dropped (this round's events continue what that one relayed)."""
        ...


@dataclass(frozen=True)
class FunctionCodec:
    """A ``RecallCodec`` made of one API's module functions (each codec module builds one)."""

    may_offer: Callable[[Mapping[str, Any]], bool]
    offered: Callable[[Mapping[str, Any], RecallTool], dict[str, Any]]
    calls: Callable[[Mapping[str, Any]], list[ToolCall]]
    continued: Callable[
        [Mapping[str, Any], Mapping[str, Any], Sequence[tuple[str, str]]], dict[str, Any]
    ]
    without: Callable[[Mapping[str, Any], str], dict[str, Any]]
    spliced: Callable[
        [Mapping[str, Any], Callable[[tuple[str, ...]], Held | None]], dict[str, Any] | None
    ]
    stream: Callable[[RecallStream | None], RecallStream]
