"""A deterministic summarizing model: what ``summary_responder`` writes when asked to summarize.

It summarizes the conversation the way a careful model would, carrying every ``NOTE:`` line
forward verbatim, so tests and benchmarks that compact a session replay exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.messages import INSTRUCTION_ROLES, content_text, message_text
from ..loaders.tokenizers import load_encoding
from .responders import Reply

__all__ = ["SUMMARY_MAX_TOKENS", "summary_responder"]

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
_SPAN_LIST_RULE = "lines beginning `- span-`"
_SPAN_LINE_RE = re.compile(r"(?:- )+span-[0-9a-f]{12}: ")


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
    skipped; so are an earlier summary's recall span lines (``- span-...``) when the
    instruction says to leave them out. At most 1,500 tokens.

    Like a model following a stricter retry instruction, it also lists any facts the instruction
    says "must be mentioned: a; b; c" (under ``## Files and identifiers``, when missing) and keeps
    to "under N words". Asked to summarize only what came after a quoted message (``«...»``), it
    summarizes the messages after the last one that begins with that text, and takes the task
    from that message when it is the user's.
    """
    messages, instruction = _conversation(body)
    task, messages = _task_and_scope(messages, instruction)
    state = _current_state(messages)

    lines = [line for message in messages for line in _message_lines(message)]
    if _SPAN_LIST_RULE in instruction:  # as told: an earlier summary's span list is left out
        lines = [line for line in lines if not _SPAN_LINE_RE.match(line)]
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
    return Reply(content=_bounded("\n\n".join(sections), instruction))


def _conversation(body: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], str]:
    """The messages to summarize, and the summary instruction after them (``""``: none)."""
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
    return messages, instruction


def _task_and_scope(
    messages: list[Mapping[str, Any]], instruction: str
) -> tuple[str, list[Mapping[str, Any]]]:
    """The task, and the messages to summarize: only those after a quoted message, if any."""
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
    return task, messages


def _current_state(messages: Sequence[Mapping[str, Any]]) -> str:
    """The last assistant text, clipped."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            text = content_text(message).strip()
            if text:
                return _clip(text, _STATE_CHARS)
    return "(no assistant output yet)"


def _bounded(summary: str, instruction: str) -> str:
    """``summary`` cut to ``SUMMARY_MAX_TOKENS`` tokens and to the instruction's word limit."""
    encoding = load_encoding("o200k_base")
    tokens = encoding.encode_ordinary(summary)
    if len(tokens) > SUMMARY_MAX_TOKENS:
        summary = encoding.decode(tokens[:SUMMARY_MAX_TOKENS])
    max_words = _max_words(instruction)
    if max_words is not None and len(summary.split()) > max_words:
        summary = _clip_words(summary, max_words)
    return summary


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
