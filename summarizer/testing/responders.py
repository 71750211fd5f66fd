"""What the test upstream answers: reply models and deterministic stand-ins for a model.

A *responder* is any callable taking the parsed request body and returning a :class:`Reply`.
The ones here are deterministic, so tests and benchmarks replay exactly:

- :func:`echo_responder` always says ``"ok"`` (the server's default);
- :func:`summary_responder` writes the summary a competent model would write when asked to
  summarize the conversation, carrying every ``NOTE:`` line forward verbatim;
- :class:`RoutingResponder` sends summary requests (``tool_choice == "none"``) to one responder
  and agent requests to another;
- :class:`ScriptedToolAgent` walks a list of tool calls and answers for long tool-using sessions.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from pydantic import BaseModel, Field

from ..core.messages import INSTRUCTION_ROLES, content_text, message_text
from ..loaders.tokenizers import load_encoding

__all__ = [
    "Reply",
    "Responder",
    "RoutingResponder",
    "ScriptedToolAgent",
    "Step",
    "ToolCallSpec",
    "echo_responder",
    "is_summary_request",
    "summary_responder",
]


class ToolCallSpec(BaseModel):
    """One function call the model makes; ``id`` is generated (``call_<n>``) when omitted."""

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as the JSON string the Chat Completions API carries."""
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
    from ..loaders.prompts import load_prompt

    return tuple(
        load_prompt(name).split(".")[0] for name in ("self_summary", "self_summary_strict")
    )


def is_summary_request(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is one of summarizer's summary requests: ``tool_choice="none"`` (set
    whenever the agent has tools), or a last user message opening with a summary instruction."""
    if body.get("tool_choice") == "none":
        return True
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return False
    last = messages[-1]
    content = last.get("content")
    return (
        last.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(_summary_openings())
    )


def echo_responder(body: dict[str, Any]) -> Reply:
    """The default responder: always answers ``"ok"``."""
    return Reply(content="ok")


# --- summary_responder -------------------------------------------------------------------------

SUMMARY_MAX_TOKENS = 1500
"""The summary responder never writes more than this many o200k_base tokens."""

_TASK_CHARS = 400
_STATE_CHARS = 600
_LINE_CHARS = 300
_NOTE_CHARS = 1000
_MAX_NOTES = 60
_MAX_FILES = 50
_MAX_LINES = 10

_FILE_EXTENSIONS = frozenset(
    """py pyi pyx ipynb js mjs cjs ts tsx jsx json jsonl yaml yml toml cfg ini conf env md rst
    txt csv tsv log rs go java kt kts scala c h cc cpp hpp cs rb php sh bash zsh ps1 html htm
    css scss sql xml lock proto graphql swift m mm lua pl r dart vue svelte tf gradle""".split()  # noqa: SIM905
)
_WORD_RE = re.compile(r"[\w./~-]+")
_ANCHOR_RE = re.compile(r"«(.*?)»", re.DOTALL)
_TRIM = ".,:;-"


def _strings(value: Any) -> Iterable[str]:
    """Every string inside a parsed JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _argument_strings(arguments: Any) -> list[str]:
    """The string values of a tool call's arguments (the raw text when it is not JSON)."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return [arguments]
        return list(_strings(parsed))
    return list(_strings(arguments))


def _tool_call_arguments(message: Mapping[str, Any]) -> list[str]:
    strings: list[str] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            strings.extend(_argument_strings(function.get("arguments")))
    return strings


def _message_lines(message: Mapping[str, Any]) -> list[str]:
    """The non-empty, non-heading lines of a message: its text and its tool-call arguments."""
    texts = [content_text(message), *_tool_call_arguments(message)]
    lines: list[str] = []
    for text in texts:
        for line in text.splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                lines.append(stripped)
    return lines


def _file_paths(strings: Iterable[str]) -> list[str]:
    found: list[str] = []
    for text in strings:
        for word in _WORD_RE.findall(text):
            word = word.rstrip(_TRIM)
            if not any(ch.isalnum() for ch in word) or word.startswith("//"):
                continue
            name = word.rsplit("/", 1)[-1]
            extension = name.rsplit(".", 1)[-1].lower() if "." in name.strip(".") else ""
            if "/" in word or extension in _FILE_EXTENSIONS:
                found.append(word)
    return found


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _previous_task(text: str) -> str | None:
    """The task section of an earlier summary inside ``text``, if there is one."""
    match = re.search(
        r"^## Task(?: and constraints)?[ \t]*\n(.*?)(?=^## |\Z)",
        text,
        flags=re.MULTILINE | re.DOTALL,
    )
    if match is None:
        return None
    section = match.group(1).strip()
    return section or None


def _bullets(items: Sequence[str], empty: str) -> str:
    return "\n".join(f"- {item}" for item in items) if items else f"- {empty}"


def summary_responder(body: dict[str, Any]) -> Reply:
    """Summarize the conversation in ``body`` the way a careful model would, deterministically.

    The final user message (the summary instruction) is not part of what is summarized. The
    summary has the sections summarizer's prompt asks for: ``## Task and constraints`` (the
    first user message, or the task section of an earlier summary found there, clipped to ~400
    characters), ``## Notes`` (every line containing ``NOTE:``, verbatim; only when there are
    some), ``## Current state`` (the last assistant text), ``## Files and identifiers`` (file
    paths in tool-call arguments, in order of first use), ``## Decisions`` (lines with
    ``Decision:`` or ``decided``), ``## Errors and fixes`` (the first 10 lines with ``Error``,
    ``FAILED`` or ``Traceback``) and ``## Open work and next step`` (lines with ``TODO`` or
    ``Next:``). Lines are taken from message text and tool-call arguments; markdown headings are
    skipped. At most 1,500 tokens.

    Like a model following a stricter retry instruction, it also lists any facts the instruction
    says "must be mentioned: a; b; c" (under ``## Files and identifiers``, when missing) and keeps
    to "under N words". Asked to summarize only what came after a quoted message (``«...»``), it
    summarizes the messages after the last one that begins with that text, and takes the task
    from that message when it is the user's.
    """
    raw = body.get("messages")
    messages: list[Mapping[str, Any]] = (
        [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    )
    instruction = ""
    if messages and messages[-1].get("role") in ("user", "system", "developer"):
        earlier = messages[:-1]
        if any(m.get("role") not in INSTRUCTION_ROLES for m in earlier):
            instruction = content_text(messages[-1])
            messages = earlier

    task = "(no task stated)"
    anchor = _ANCHOR_RE.search(instruction)
    if anchor is not None:
        quoted = anchor.group(1).removesuffix("…")
        for index in range(len(messages) - 1, -1, -1):
            if " ".join(message_text(messages[index]).split()).startswith(quoted):
                if messages[index].get("role") == "user":
                    task = _clip(content_text(messages[index]).strip() or task, _TASK_CHARS)
                messages = messages[index + 1 :]
                break
    for message in messages if anchor is None else ():
        if message.get("role") == "user":
            text = content_text(message)
            task = _clip((_previous_task(text) or text).strip() or task, _TASK_CHARS)
            break

    state = "(no assistant output yet)"
    for message in reversed(messages):
        if message.get("role") == "assistant":
            text = content_text(message).strip()
            if text:
                state = _clip(text, _STATE_CHARS)
                break

    lines = [line for message in messages for line in _message_lines(message)]
    notes = _dedupe(_clip(line, _NOTE_CHARS) for line in lines if "NOTE:" in line)[:_MAX_NOTES]
    decisions = _dedupe(
        _clip(line, _LINE_CHARS)
        for line in lines
        if "decision:" in line.lower() or "decided" in line.lower()
    )[-_MAX_LINES:]
    errors = _dedupe(
        _clip(line, _LINE_CHARS)
        for line in lines
        if "Error" in line or "FAILED" in line or "Traceback" in line
    )[:_MAX_LINES]
    open_work = _dedupe(
        _clip(line, _LINE_CHARS) for line in lines if "TODO" in line or "Next:" in line
    )[-_MAX_LINES:]
    files = _dedupe(
        _file_paths(
            s
            for message in messages
            if message.get("role") == "assistant"
            for s in _tool_call_arguments(message)
        )
    )[:_MAX_FILES]

    required = _required_facts(instruction)
    summary_so_far = "\n".join([task, *notes, state, *files, *decisions, *errors, *open_work])
    files += [fact for fact in required if fact not in summary_so_far and fact not in files]

    sections = [f"## Task and constraints\n{task}"]
    if notes:
        sections.append("## Notes\n" + "\n".join(notes))
    sections += [
        f"## Current state\n{state}",
        "## Files and identifiers\n" + _bullets(files, "(none)"),
        "## Decisions\n" + _bullets(decisions, "(none recorded)"),
        "## Errors and fixes\n" + _bullets(errors, "(none)"),
        "## Open work and next step\n" + _bullets(open_work, "(none recorded)"),
    ]
    summary = "\n\n".join(sections)
    encoding = load_encoding("o200k_base")
    tokens = encoding.encode_ordinary(summary)
    if len(tokens) > SUMMARY_MAX_TOKENS:
        summary = encoding.decode(tokens[:SUMMARY_MAX_TOKENS])
    max_words = _max_words(instruction)
    if max_words is not None and len(summary.split()) > max_words:
        summary = _clip_words(summary, max_words)
    return Reply(content=summary)


def _required_facts(instruction: str) -> list[str]:
    match = re.search(r"must be mentioned:\s*(.+)", instruction)
    if match is None:
        return []
    text = match.group(1).strip().rstrip(".")
    if text.startswith("(none"):
        return []
    return [fact.strip() for fact in text.split("; ") if fact.strip()]


def _max_words(instruction: str) -> int | None:
    match = re.search(r"under (\d+) words", instruction)
    return int(match.group(1)) if match else None


def _clip_words(text: str, limit: int) -> str:
    """``text`` cut after ``limit`` words, keeping its line structure."""
    kept: list[str] = []
    count = 0
    for line in text.splitlines():
        words = line.split()
        if count + len(words) > limit:
            if limit - count > 0:
                kept.append(" ".join(words[: limit - count]))
            break
        kept.append(line)
        count += len(words)
    return "\n".join(kept)


# --- routing and scripted agents ---------------------------------------------------------------


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
