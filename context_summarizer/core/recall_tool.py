"""The recall tool, as the model is offered it once its conversation has a compaction: its
definition, the index of spans a summary carries, and a call read and answered. Pure.

One definition in a neutral form (``RecallTool``: a name, the description of
``prompts/<version>/recall_tool.md``, a JSON schema); each API's codec renders it in its own
tool shape. A call's arguments are read strictly (``read_call``): anything malformed is answered
with what was wrong, as a tool result the model can act on, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .prompt_set import PromptSet
from .recall import RecallAnswer, fetch, search
from .spans import Span, index_line

TOOL_NAMES = ("recall", "summarizer_recall", "summarizer_recall_compacted")
"""The tool's name, the first one the agent's own tools do not already use."""

PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Text to find (case-insensitive), or a regular expression if regex.",
        },
        "regex": {"type": "boolean"},
        "span": {"type": "string", "description": "A span id, to read that span."},
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "With span: the message to start from (0: its first).",
        },
    },
    "additionalProperties": False,
}
"""The arguments: ``query`` (and ``regex``) to search, or ``span`` (and ``offset``) to read."""


@dataclass(frozen=True)
class RecallTool:
    """The tool's definition, before any API's shape."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class RecallCall:
    """One call's arguments, read: a search (``query``) or a read of a span (``span``)."""

    query: str | None = None
    regex: bool = False
    span: str | None = None
    offset: int = 0


def recall_tool(prompts: PromptSet, taken: Iterable[str]) -> RecallTool | None:
    """The tool's definition, named with the first of ``TOOL_NAMES`` not in ``taken`` (the
    agent's own tools' names); None when the agent uses them all."""
    used = set(taken)
    name = next((candidate for candidate in TOOL_NAMES if candidate not in used), None)
    if name is None:
        return None
    return RecallTool(name, prompts.recall_tool, PARAMETERS)


def chat_definition(name: str, prompts: PromptSet) -> dict[str, Any]:
    """The tool named ``name`` as chat completions define a function (the shape the engine
    counts tool definitions in, whatever the API)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": prompts.recall_tool,
            "parameters": json.loads(json.dumps(PARAMETERS)),
        },
    }


def declared_tool_names(tools: Iterable[Any] | None) -> set[str]:
    """The names of the agent's own tools, in any API's shape (``name``, ``function.name``,
    Gemini's ``functionDeclarations``): the names the recall tool must not take."""
    names: set[str] = set()
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        for holder in (tool, function if isinstance(function, Mapping) else {}):
            if isinstance(holder.get("name"), str):
                names.add(holder["name"])
        for key in ("functionDeclarations", "function_declarations"):
            for declaration in tool.get(key) or ():
                if isinstance(declaration, Mapping) and isinstance(declaration.get("name"), str):
                    names.add(declaration["name"])
    return names


def index_text(
    prompts: PromptSet, tool: str, spans: Sequence[Span], raw: Sequence[Mapping[str, Any]]
) -> str:
    """What a summary says of the spans the model can recall: one index line each."""
    lines = "\n".join(f"- {index_line(span, raw)}" for span in spans)
    return prompts.recall_index.format(tool=tool, spans=lines)


def read_call(arguments: str | Mapping[str, Any] | None) -> RecallCall | str:
    """A call's arguments (JSON text, as chat completions and Responses send them, or an
    object, as Messages and Gemini do), read; else what is wrong with them."""
    if arguments is None or arguments == "":
        return "recall needs either query or span"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return "the arguments are not valid JSON"
    if not isinstance(arguments, Mapping):
        return "the arguments must be an object"
    unknown = sorted(set(arguments) - set(PARAMETERS["properties"]))
    if unknown:
        return f"unknown arguments: {', '.join(unknown)}"
    query, span = arguments.get("query"), arguments.get("span")
    regex, offset = arguments.get("regex", False), arguments.get("offset", 0)
    if (query is None) == (span is None):
        return "give either query (to search) or span (to read a span), not both"
    if query is not None and not isinstance(query, str):
        return "query must be a string"
    if span is not None and not isinstance(span, str):
        return "span must be a string"
    if not isinstance(regex, bool):
        return "regex must be true or false"
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return "offset must be a whole number, 0 or more"
    return RecallCall(query=query, regex=regex, span=span, offset=offset)


def answer_call(
    call: RecallCall | str, spans: Sequence[Span], raw: Sequence[Mapping[str, Any]]
) -> RecallAnswer:
    """The answer to a call read by ``read_call`` (a reading error is answered as such)."""
    if isinstance(call, str):
        return RecallAnswer(error=call)
    if not spans:
        return RecallAnswer(error="nothing of this conversation has been replaced")
    if call.span is not None:
        return fetch(spans, raw, call.span, offset=call.offset)
    assert call.query is not None
    return search(spans, raw, call.query, is_regex=call.regex)
