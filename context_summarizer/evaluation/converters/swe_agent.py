"""SWE-agent ``.traj`` files: ``history`` (or ``trajectory`` steps) as the messages, and the gold
facts the run itself recorded (``evidence.run_facts``: the files and definitions its final patch
changed, failing tests and error lines seen in observations, the reproduce and test commands)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import message_text
from ..dataset import Case, GoldFact, Probe
from .cases import _validated
from .evidence import run_facts
from .messages import _content, _truthy, openai_messages


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


def _swe_facts(messages: list[dict[str, Any]], patch: str) -> list[GoldFact]:
    observed = "\n".join(message_text(m) for m in messages if m["role"] in ("tool", "user"))
    said = "\n".join(message_text(m) for m in messages)
    commands = [line for m in messages if m["role"] == "assistant" for line in _commands(m)]
    return run_facts(patch, observed, commands, said)


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
