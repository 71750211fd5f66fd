"""Stand-ins for the agent's model: routing between agent and summary, and a scripted agent.

- :class:`RoutingResponder` sends summary requests (``tool_choice == "none"``) to one responder
  and agent requests to another;
- :class:`ScriptedToolAgent` walks a list of tool calls and answers for long tool-using sessions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .responders import Reply, Responder, ToolCallSpec, _spec, is_summary_request
from .summaries import summary_responder

__all__ = ["RoutingResponder", "ScriptedToolAgent", "Step"]


class RoutingResponder:
    """Summary requests (``tool_choice == "none"``) go to ``summary``, all others to ``agent``."""

    def __init__(self, agent: Responder, summary: Responder = summary_responder) -> None:
        self.agent = agent
        self.summary = summary

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return self.summary(body)
        return self.agent(body)


ToolCallLike: TypeAlias = ToolCallSpec | tuple[str, str | Mapping[str, Any]]
Step: TypeAlias = Reply | str | ToolCallLike | Sequence[ToolCallLike]
"""One agent turn: a ``Reply``; a final text (``str``); one tool call (a ``ToolCallSpec`` or a
``(name, arguments)`` pair); or a list of tool calls made in parallel."""


def _call_spec(item: Any) -> ToolCallSpec:
    if isinstance(item, ToolCallSpec):
        return item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        arguments = item[1]
        if isinstance(arguments, (str, Mapping)):
            return _spec(item[0], arguments)
    raise TypeError(f"not a tool call step: {item!r} (expected ToolCallSpec or (name, arguments))")


def _step_reply(step: Any) -> Reply:
    if isinstance(step, Reply):
        return step
    if isinstance(step, str):
        return Reply(content=step)
    if isinstance(step, ToolCallSpec) or (
        isinstance(step, tuple) and len(step) == 2 and isinstance(step[0], str)
    ):
        return Reply(tool_calls=[_call_spec(step)])
    if isinstance(step, Sequence):
        calls = [_call_spec(item) for item in step]
        if not calls:
            raise TypeError("an empty list of parallel tool calls is not a step")
        return Reply(tool_calls=calls)
    raise TypeError(f"not a step: {step!r}")


class ScriptedToolAgent:
    """A tool-using agent that follows a script, one step per agent request.

    Each agent request (any request that is not a summary request) consumes the next step;
    summary requests are answered by ``summary`` without consuming anything. Once the script
    is exhausted every agent request gets the text ``final`` (``"done"``). Thread-safe.
    """

    def __init__(
        self,
        steps: Iterable[Step],
        *,
        final: str = "done",
        summary: Responder = summary_responder,
    ) -> None:
        self.steps: list[Reply] = [_step_reply(step) for step in steps]
        self.final = final
        self.summary = summary
        self.agent_requests = 0
        self.summary_requests = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Steps not yet taken."""
        with self._lock:
            return max(0, len(self.steps) - self.agent_requests)

    @property
    def finished(self) -> bool:
        """Whether every step has been taken."""
        return self.remaining == 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            with self._lock:
                self.summary_requests += 1
            return self.summary(body)
        with self._lock:
            index = self.agent_requests
            self.agent_requests += 1
        if index < len(self.steps):
            return self.steps[index].model_copy(deep=True)
        return Reply(content=self.final)
