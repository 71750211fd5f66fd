"""SWE-agent ``.traj`` files: ``history`` (or ``trajectory`` steps) as the messages, and the gold
facts the run itself recorded (the files its final patch changed, failing tests and error lines
seen in observations, an obvious reproduce command)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import message_text
from ..dataset import Case, GoldFact, Probe
from .cases import _unique, _validated
from .messages import _content, _truthy, openai_messages

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_TEST_LINE = re.compile(
    r"^(?:(?:FAILED|ERROR)\s+(\S+::\S+|\S*test\S*\.py)(?:\s|$)|(\S+::\S+)\s+(?:FAILED|ERROR)\b)"
)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
_PYTEST_E = re.compile(r"^E\s{2,}((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)")
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+')
_REPRODUCE = re.compile(r"^\s*(python3?\s+\S*reproduc\w*\.py)\b")


def patch_files(patch: str) -> list[str]:
    """The files a unified diff changes, in order (the ``b/`` side of ``diff --git`` lines)."""
    return _unique(match.group(2) for match in _DIFF_FILE.finditer(patch.replace("\r\n", "\n")))


def failing_tests(text: str) -> list[str]:
    """Test ids pytest reported as failed or erroring (``FAILED path::test``, ...), in order."""
    found = []
    for line in text.replace("\r\n", "\n").split("\n"):
        match = _TEST_LINE.match(line.strip()[:500])
        if match:
            found.append(match.group(1) or match.group(2))
    return _unique(found)


def error_lines(text: str) -> list[str]:
    """The exception line ending each Python traceback (or ``File "...", line N`` report, as
    for a ``SyntaxError``), and pytest's ``E   XError: ...`` lines, in order."""
    found: list[str] = []
    in_traceback = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.startswith("Traceback (most recent call last)") or _FRAME.match(line[:500]):
            in_traceback = True
            continue
        if in_traceback and line and not line[0].isspace():
            if _EXCEPTION.match(line[:500]):
                found.append(line.strip()[:300])
            in_traceback = False
            continue
        match = _PYTEST_E.match(line[:500])
        if match:
            found.append(match.group(1).strip()[:300])
    return _unique(found)


def _commands(message: Mapping[str, Any]) -> Iterator[str]:
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"]["arguments"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(arguments, Mapping):
            for value in arguments.values():
                if isinstance(value, str):
                    yield from value.splitlines()
    content = message.get("content")
    if isinstance(content, str):
        yield from content.splitlines()


def _numbered(prefix: str, kind: str, texts: Iterable[str]) -> list[GoldFact]:
    return [
        GoldFact(
            id=f"{prefix}-{n}",
            text=text,
            kind=kind,
            aliases=[text.replace("/", "\\")] if kind == "path" and "/" in text else [],
        )
        for n, text in enumerate(texts, start=1)
    ]


def _swe_facts(messages: list[dict[str, Any]], patch: str) -> list[GoldFact]:
    observed = "\n".join(message_text(m) for m in messages if m["role"] in ("tool", "user"))
    commands = (
        match.group(1)
        for m in messages
        if m["role"] == "assistant"
        for line in _commands(m)
        if (match := _REPRODUCE.match(line))
    )
    return [
        *_numbered("patch-file", "path", patch_files(patch)),
        *_numbered("test", "test", failing_tests(observed)),
        *_numbered("error", "error", error_lines(observed)),
        *_numbered("command", "command", list(commands)[:1]),
    ]


def _trajectory_messages(steps: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(steps, list):
        raise ConversionError(f"{where}: 'trajectory' must be a list")
    out: list[dict[str, Any]] = []
    for step in steps:
        if not isinstance(step, Mapping):
            raise ConversionError(f"{where}: a trajectory step is not an object")
        thought = str(step.get("thought") or step.get("response") or "").rstrip()
        action = str(step.get("action") or "").rstrip()
        text = f"{thought}\n\n```\n{action}\n```" if action else thought
        out.append({"role": "assistant", "content": text.strip()})
        observation = step.get("observation")
        if observation is not None:
            out.append({"role": "user", "content": _content(observation) or ""})
    return out


def convert_swe_agent(data: Mapping[str, Any], *, source: str) -> Case:
    """One case from a parsed SWE-agent ``.traj`` (``source`` names the file)."""
    info: Mapping[str, Any] = data["info"] if isinstance(data.get("info"), Mapping) else {}
    raw_history = data.get("history")
    if isinstance(raw_history, list) and raw_history:
        demos = sum(1 for m in raw_history if isinstance(m, Mapping) and _truthy(m.get("is_demo")))
        messages, origin = openai_messages(raw_history, where=source), "history"
    else:
        demos = 0
        raw = _trajectory_messages(data.get("trajectory"), source)
        messages, origin = openai_messages(raw, where=source), "trajectory"
    if not messages:
        raise ConversionError(f"{source}: no messages in 'history' or 'trajectory'")
    submission = info.get("submission")
    patch = submission if isinstance(submission, str) else ""
    facts = _swe_facts(messages, patch)
    instance = str(data.get("instance_id") or info.get("instance_id") or Path(source).stem)
    changed = [f.text for f in facts if f.kind == "path"]
    question = "Which file did the final patch change first?"
    return _validated(
        source,
        id=instance,
        messages=messages,
        facts=facts,
        probes=[Probe(question=question, answer=changed[0])] if changed else [],
        metadata={
            "source": source,
            "format": "swe-agent",
            "instance_id": instance,
            "exit_status": info.get("exit_status"),
            "messages_from": origin,
            "dropped_demos": demos,
        },
    )
