"""The recall loop's own bounds (``core.recall_loop``): what a turn may add is held to the room
the window has left and to ``MAX_TURN_CHARS``, and a result past either says so instead."""

from __future__ import annotations

import json
from typing import Any

from context_summarizer.core.recall_chat import CHAT
from context_summarizer.core.recall_loop import MAX_TURN_CHARS, NO_ROOM, RecallLoop
from context_summarizer.core.recall_tool import PARAMETERS, RecallTool
from context_summarizer.core.spans import spans_of

RAW: list[dict[str, Any]] = [
    {"role": "user", "content": "go"},
    *(
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"ERROR in module_{i}.py " * 40}
        for i in range(20)
    ),
]


def loop(room_tokens: int) -> RecallLoop:
    tool = RecallTool("recall", "Read back replaced turns.", PARAMETERS)
    spans = spans_of([(1, len(RAW))], RAW)
    made = RecallLoop(CHAT, tool, spans, RAW, room_tokens=room_tokens, count_text=len)
    made.first({"model": "m", "messages": [{"role": "user", "content": "q"}]})
    return made


def asked(query: str) -> dict[str, Any]:
    call = {
        "id": "call_r",
        "type": "function",
        "function": {"name": "recall", "arguments": json.dumps({"query": query})},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def result_of(step: Any) -> str:
    assert step.again is not None
    return str(step.again["messages"][-1]["content"])


def test_a_result_fits_the_room_the_window_has_left() -> None:
    roomy = loop(room_tokens=1_000_000)
    text = result_of(roomy.step(asked("module_3.py")))
    assert "module_3.py" in text and roomy.chars > 0 and roomy.recalled
    tight = loop(room_tokens=len(json.dumps(asked("module_3.py"))) + 10)
    assert result_of(tight.step(asked("module_3.py"))) == NO_ROOM
    assert tight.chars == 0 and tight.recalled == []


def test_a_turn_adds_at_most_max_turn_chars() -> None:
    made = loop(room_tokens=1_000_000)
    made.chars = MAX_TURN_CHARS - 10  # what earlier rounds of the turn returned
    assert result_of(made.step(asked("ERROR"))) == NO_ROOM
    assert made.chars == MAX_TURN_CHARS - 10
