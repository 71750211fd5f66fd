"""What the test upstream answers: the reply model, the responder contract and the default.

A *responder* is any callable taking the parsed request body and returning a :class:`Reply`.
The ones in this package are deterministic, so tests and benchmarks replay exactly:

- :func:`echo_responder` (here) always says ``"ok"`` (the server's default);
- :func:`~context_summarizer.testing.summaries.summary_responder` writes the summary a competent
model
  would write when asked to summarize the conversation, carrying every ``NOTE:`` line forward;
- :class:`~context_summarizer.testing.agents.RoutingResponder` sends summary requests
  (:func:`is_summary_request`) to one responder and agent requests to another;
- :class:`~context_summarizer.testing.agents.ScriptedToolAgent` walks a list of tool calls and
answers
  for long tool-using sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, Field

__all__ = [
    "Reply",
    "Responder",
    "ToolCallSpec",
    "echo_responder",
    "is_summary_request",
]


class ToolCallSpec(BaseModel):
    """One tool call the model makes; ``id`` is generated (``call_...``, unique) when omitted.

    ``type="custom"`` is a call of a custom (free-form) tool: ``arguments`` is then its raw
    ``input`` string (a Responses ``custom_tool_call``, a chat ``custom`` tool call)."""

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None
    type: Literal["function", "custom"] = "function"

    def arguments_json(self) -> str:
        """The arguments as the JSON string the Chat Completions API carries (a custom call's
        ``input`` as it is)."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class Reply(BaseModel):
    """What the model says back: text, tool calls, or both.

    ``finish_reason`` is derived when left ``None``: ``"tool_calls"`` when there are tool calls,
    else ``"stop"``; the server reports ``"length"`` whenever it truncates the content to the
    request's ``max_completion_tokens`` / ``max_tokens``.
    """

    content: str | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: str | None = None
    chunk_delay: float = Field(default=0.0, ge=0)
    """When streamed: seconds to wait before each chunk after the first (to test relaying)."""

    @classmethod
    def text(cls, content: str) -> Reply:
        """A plain text answer."""
        return cls(content=content)

    @classmethod
    def call(cls, name: str, arguments: str | Mapping[str, Any] | None = None) -> Reply:
        """A single tool call."""
        return cls(tool_calls=[_spec(name, arguments)])

    def derived_finish_reason(self) -> str:
        """``finish_reason`` if set, else ``"tool_calls"`` / ``"stop"``."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


Responder: TypeAlias = Callable[[dict[str, Any]], Reply]
"""Gets the parsed request body, returns the reply."""


def _spec(name: str, arguments: str | Mapping[str, Any] | None) -> ToolCallSpec:
    if arguments is None:
        return ToolCallSpec(name=name)
    if isinstance(arguments, str):
        return ToolCallSpec(name=name, arguments=arguments)
    return ToolCallSpec(name=name, arguments=dict(arguments))


def _summary_openings() -> tuple[str, ...]:
    """The first words (up to a full stop or a placeholder) of every summary instruction, in
    every prompt version."""
    import re

    from ..loaders.prompts import load_prompt

    names = (
        "self_summary",
        "self_summary_strict",
        "self_summary_since",
        "self_summary_since_strict",
    )
    return tuple(
        {
            re.split(r"[.{]", load_prompt(name, version))[0]
            for version in ("v1", "v2")
            for name in names
        }
    )


def is_summary_request(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is one of summarizer's summary requests: ``tool_choice="none"`` (set
    whenever the agent has tools; the Messages API's ``{"type": "none"}`` too), or a last user
    message opening with a summary instruction.

    ``body`` is a chat completion request, a Messages request, or a Responses API request (its
    ``input``: a string, or items whose last is a user message with string content or a single
    text part)."""
    tool_choice = body.get("tool_choice")
    if tool_choice == "none" or (
        isinstance(tool_choice, Mapping) and tool_choice.get("type") == "none"
    ):
        return True
    messages = body.get("messages")
    if messages is None and "input" in body:
        messages = _responses_messages(body["input"])
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return False
    last = messages[-1]
    content = last.get("content")
    return (
        last.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(_summary_openings())
    )


def _responses_messages(value: Any) -> Any:
    """A Responses API ``input`` as far as :func:`is_summary_request` reads it: its last item,
    with a single text part's text as string content."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value or not isinstance(value[-1], Mapping):
        return None
    last = value[-1]
    content = last.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], Mapping):
        content = content[0].get("text")
    return [{"role": last.get("role"), "content": content}]


def echo_responder(body: dict[str, Any]) -> Reply:
    """The default responder: always answers ``"ok"``."""
    return Reply(content="ok")
