"""The recall tool loop's decisions, for the proxy and the library to drive. Pure.

``RecallLoop`` offers the tool in a request body and, for each answer the model gives, says
what happens next (``Step``):

- no recall call: the answer goes to the client as it is;
- recall calls alone: they are answered from the raw spans and the model is asked again (the
  continued body), at most ``MAX_ROUNDS`` times a turn; past that the answer goes out with
  the recall calls taken out;
- recall calls with the agent's own: the agent's calls go to the client, the recall calls
  taken out; their answers are kept (``Held``) and put back into the conversation on the next
  request (``RecallCodec.spliced``), so the model reads them there.

Every result is bounded: by recall's own bounds per call, by ``MAX_TURN_CHARS`` per turn, and
by the room the request has left in the window (``room_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .located import Located
from .prompt_set import PromptSet
from .recall_codec import Held, RecallCodec, ToolCall
from .recall_tool import PARAMETERS, RecallTool, answer_call, read_call
from .results import PrepareResult
from .spans import Span, spans_of

MAX_ROUNDS = 4
"""Times a turn's recall calls are answered and the model asked again."""
MAX_TURN_CHARS = 32_000
"""Characters of recalled text one turn may add to its request, over all its rounds."""
CALL_OVERHEAD_TOKENS = 24
"""Allowance per result for its tool message's framing."""
NO_ROOM = (
    "recall failed: no room is left in this request for more recalled text; answer with what "
    "you have, or recall something narrower"
)
LAST_ROUND = "\n\n(That was the last recall this turn allows: answer with what you have.)"


def loop_for(
    codec: RecallCodec | None,
    located: Located | None,
    result: PrepareResult | None,
    prompts: PromptSet,
) -> RecallLoop | None:
    """The loop of a settled request: None unless its API has a codec, its turn was given the
    tool's name (``Turn.recall``) and what is sent stands on a compaction (some raw run
    replaced). The loop may add what the usable window has left over the request's estimate."""
    if codec is None or located is None or result is None or located.recall is None:
        return None
    if not result.replaced:
        return None
    report = result.report
    room = report.context_window - report.reserve_output_tokens - report.estimated_tokens
    return RecallLoop(
        codec,
        RecallTool(located.recall, prompts.recall_tool, PARAMETERS),
        spans_of(result.replaced, located.messages),
        located.messages,
        room_tokens=max(0, room),
        count_text=located.counter.count_text,
    )


@dataclass(frozen=True)
class Step:
    """What follows an answer: ask ``again`` (the next body), or send the client ``answer``
    (with ``held`` kept for the next request, when the model also called the agent's tools)."""

    answer: Mapping[str, Any]
    again: dict[str, Any] | None = None
    held: Held | None = None


@dataclass
class RecallLoop:
    """One request's recall loop (see the module docstring)."""

    codec: RecallCodec
    tool: RecallTool
    spans: Sequence[Span]
    raw: Sequence[Mapping[str, Any]]
    room_tokens: int
    """Tokens the loop may add to the request (the usable window less its estimate)."""
    count_text: Callable[[str], int]
    body: dict[str, Any] = field(default_factory=dict)
    rounds: int = 0
    calls: int = 0
    """Recall calls answered."""
    chars: int = 0
    """Characters of recalled text returned."""
    recalled: list[str] = field(default_factory=list)
    """The spans the results quoted, each once, in order."""

    def first(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with the tool offered: the loop's first request."""
        self.body = self.codec.offered(body, self.tool)
        return self.body

    def step(self, answer: Mapping[str, Any]) -> Step:
        """What follows ``answer`` (see the module docstring)."""
        found = self.codec.calls(answer)
        mine = [call for call in found if call.name == self.tool.name]
        if not mine:
            return Step(answer)
        others = [call for call in found if call.name != self.tool.name]
        without = self.codec.without(answer, self.tool.name)
        if others:
            results = self._results(mine, answer, last=False)
            return Step(without, held=Held(tuple(c.id for c in others), answer, results))
        if self.rounds >= MAX_ROUNDS:
            return Step(without)
        self.rounds += 1
        results = self._results(mine, answer, last=self.rounds == MAX_ROUNDS)
        self.body = self.codec.continued(self.body, answer, results)
        return Step(answer, again=self.body)

    def _results(
        self, mine: Sequence[ToolCall], answer: Mapping[str, Any], *, last: bool
    ) -> tuple[tuple[str, str], ...]:
        self.room_tokens -= self.count_text(json.dumps(answer, ensure_ascii=False))
        results = []
        for call in mine:
            self.calls += 1
            found = answer_call(read_call(call.arguments), self.spans, self.raw)
            text = found.render()
            tokens = self.count_text(text) + CALL_OVERHEAD_TOKENS
            if self.chars + found.chars > MAX_TURN_CHARS or tokens > self.room_tokens:
                text = NO_ROOM
                tokens = self.count_text(text) + CALL_OVERHEAD_TOKENS
            else:
                self.chars += found.chars
                for hit in found.hits:
                    if hit.span not in self.recalled:
                        self.recalled.append(hit.span)
            self.room_tokens -= tokens
            results.append((call.id, text + LAST_ROUND if last else text))
        return tuple(results)
